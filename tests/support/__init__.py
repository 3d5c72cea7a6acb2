"""What the test modules share: projects, databases, catalogs, Spark, messages, T-SQL checks.

Test modules import from here, never from one another; conftest.py holds only fixtures and hooks.
"""
