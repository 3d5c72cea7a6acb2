"""What commands print: the one set of exit codes and the one way to print a result or an error.

Results go to people as lines, or to machines as one indented JSON object under `--format json`;
errors as `error: ...` on stderr, or as a JSON status. Under `--format github` (cli/github.py) the
lines are printed as for people, each problem before them as a GitHub workflow command. The SQL a
DBA reads (statements, grants, script) is written as it is. One rule for the streams: a command's product (the
text it prints, or its JSON) on stdout, or in the file it writes; every status line (what was
written, progress) on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from . import github

if TYPE_CHECKING:
    from ..topology import TopologyError

# 1 means "something to do": uncompiled changes (compile --check, check), drift (check), an upgrade to
# apply (adopt), moves pending or messages left (pipeline), a table missing (status), failed
# messages left in the error queue (retry).
EXIT_OK, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2
DESCRIPTION = (
    "sqltransport-schema command line. Exit codes: 0 ok, 1 changes found (compile --check, check), drift (check), "
    "a missing table (status) or messages left (retry), 2 error."
)


def emit(args: argparse.Namespace, payload: dict, lines: list[str], stream: TextIO | None = None) -> None:
    """The payload as JSON under --format json, else the lines (stdout unless stream)."""
    stream = stream or sys.stdout
    if getattr(args, "format", "text") == "json":
        stream.write(json.dumps(payload, indent=2, default=str) + "\n")
    else:
        stream.write("".join(line + "\n" for line in lines))


def emit_status(args: argparse.Namespace, payload: dict, lines: list[str]) -> None:
    """What a command whose product is a file (or a database) says it did: the lines on stderr, so
    that stdout holds products alone; the payload under --format json still on stdout, for CI."""
    emit(args, payload, lines, stream=sys.stdout if getattr(args, "format", "text") == "json" else sys.stderr)


def wrote(path: object) -> None:
    """The status line of a product written to a file (-o): on stderr, as every status line."""
    sys.stderr.write(f"wrote {path}\n")


def emit_product(output: str | None, product: str | bytes, encoding: str = "utf-8") -> int:
    """A command's product: into the file -o names (and its status line on stderr), else on stdout."""
    data = product.encode(encoding) if isinstance(product, str) else product
    if output:
        Path(output).write_bytes(data)
        wrote(output)
    else:
        sys.stdout.write(data.decode(encoding))
    return EXIT_OK


def emit_error(args: argparse.Namespace, message: str, json_stream: TextIO | None = None, details: list[str] | None = None) -> int:
    """`error: message` on stderr, then each of the details indented below it; or {"status": "error",
    "details": [...]} under --format json (stdout unless json_stream)."""
    if getattr(args, "format", "text") == "json":
        emit(args, {"status": "error", "message": message, **({"details": details} if details else {})}, [], stream=json_stream)
        return EXIT_ERROR
    if getattr(args, "format", "text") == github.FORMAT:
        github.report([github.Annotation("\n".join([message, *(details or ())]))], [])
    sys.stderr.write(f"error: {message}\n" + "".join(f"  {line}\n" for line in details or ()))
    return EXIT_ERROR


# Builtin errors of other libraries (and the standard library) whose first line is written for a
# person: OSError (a file that is not there or not readable names the file), ImportError (an
# optional module missing names the module), ValueError (uuid, json and datetime parsing what the
# user typed). ValueError and LookupError also still carry the messages of code not yet on
# errors.py (cli/, pipeline/plan.py).
# TODO(cli27): once those raise errors.py classes, LookupError goes (a stdlib
# KeyError's message is the key alone) and ValueError stays for the standard library's parsers.
THIRD_PARTY_WRITTEN_FOR_USERS = (OSError, ImportError, ValueError, LookupError)


def describe(error: BaseException) -> str:
    """One line for a failed command that says what to change; the traceback is --debug's."""
    from alembic.util import CommandError
    from sqlalchemy import exc

    from ..db import DRIVER_MODULES, failure
    from ..errors import SqltransportError

    if isinstance(error, exc.SQLAlchemyError):
        return failure(error)
    if isinstance(error, (SqltransportError, CommandError)):  # written for the user, as it is
        return _first_line(error)
    if isinstance(error, THIRD_PARTY_WRITTEN_FOR_USERS):
        return _first_line(error)
    origin = type(error).__module__.split(".")[0]
    if origin in DRIVER_MODULES:  # the pipeline's own driver connections: the database's answer, said as such
        return f"the database refused: {_first_line(error)}"
    if origin in ("py4j", "pyspark"):
        return f"Spark failed: {_first_line(error)}"
    return f"{type(error).__name__}: {_first_line(error)} (unexpected; run with --debug for the traceback)"


def _first_line(error: BaseException | str) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# Commands that write (a revision, a project, a file, the database): an error before they do says nothing was.
WRITING_COMMANDS = frozenset({"compile", "init", "adopt", "retry", "outbox"})


def writes(args: argparse.Namespace) -> bool:
    """Whether this run of a command would have written something (`compile --check` and `validate` never do)."""
    if getattr(args, "check", False):
        return False
    return getattr(args, "command", None) in WRITING_COMMANDS or bool(getattr(args, "output", None) or getattr(args, "split", None))


def emit_invalid(args: argparse.Namespace, error: TopologyError) -> int:
    """Every problem of an invalid topology.yaml as `error: FILE:LINE:COLUMN: message`, the form of every
    error line; a command that writes adds that nothing was written."""
    payload = {"status": "invalid", "problems": [p.to_json() for p in error.problems]}
    lines = [f"error: {p}" for p in error.problems]
    if len(lines) == 1 and writes(args):
        lines[0] += " (nothing was written)"  # one mistake, one line
    elif len(lines) > 1:
        lines.append(f"{len(lines)} problem(s)" + ("; nothing was written." if writes(args) else "."))
    if getattr(args, "format", "text") == github.FORMAT:
        title = f"sqltransport-schema {getattr(args, 'command', None) or 'validate'}"
        summary = [f"### {title}: invalid", ""] + [f"- `{p.mark}`: {p.message}" for p in error.problems]
        github.report([github.Annotation.at(p.mark, p.message, title=title) for p in error.problems], [], "\n".join(summary))
    emit_status(args, payload, lines)
    return EXIT_ERROR
