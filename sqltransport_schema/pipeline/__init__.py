"""Data pipelines over queue tables (move, plan/run, archive/replay, backfill), run by Spark.

Nothing here imports pyspark at module level: only session.py does, when a job starts.
"""
