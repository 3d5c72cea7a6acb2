"""The one root of every error a user of the tool or the runtime can see, with subclasses by meaning.

A message is written for the person who reads it: what is wrong, where, and what to change.
The command line maps a class to an exit code (cli/output.py); nothing recognises an error by its
module or its text. Each class keeps the builtin base it always had (ValueError, LookupError, ...)
beside this root, so callers that caught those still catch them.
"""

from __future__ import annotations

__all__ = ["SqltransportError", "UsageError", "Refused", "DatabaseRefused", "Conflict", "NotFound", "Unavailable", "Failed", "Unsupported"]


class SqltransportError(Exception):
    """Root of the project's own errors: the message is meant for the user, as it is."""


class UsageError(SqltransportError, ValueError):
    """The user's input is wrong (topology file, URL, option, version, project folder): change it and rerun."""


class Refused(SqltransportError):
    """The tool refuses a step that would lose or break something; the message names the override, if any."""


class DatabaseRefused(Refused):
    """The database refused a statement through one of the project's own guards (recognised by its
    SQLSTATE or driver error code, never by its text)."""


class Conflict(Refused):
    """Two things the user wrote cannot both hold (two branches changing one table, a structure
    that is not the transport's)."""


class NotFound(SqltransportError, LookupError):
    """Something the command needs is not there (a table, a revision, a subscriber, a message)."""


class Unavailable(SqltransportError, RuntimeError):
    """An optional part is not installed or cannot start (Spark, a JDBC driver, Graphviz); the message
    names what to install."""


class Failed(SqltransportError, RuntimeError):
    """A long job stopped part-way; the message says what was done and how to go on."""


class Unsupported(SqltransportError, NotImplementedError):
    """The engine (or the transport version) does not do this, or not yet; the message names it.
    A NotImplementedError too, as it always was, so callers that caught that still catch it."""
