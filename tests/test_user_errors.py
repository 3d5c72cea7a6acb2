"""A user's typical mistakes, run as the `sqltransport-schema` script: every one ends in exit 2 and
one `error:` line on stderr (or a JSON error object), never a traceback, so CI never reads a typo
as a finding (exit 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .support.commands import CLOSED_PORT, run

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a]
queues:
  - name: error
"""
ERROR_LINE = re.compile(r"^(\S+:\d+:\d+: )?error: ")  # topology problems carry file:line:column


def no_pyodbc(tmp_path: Path) -> Path:
    """A folder whose pyodbc fails to import as it does without libodbc: the missing-driver case."""
    folder = tmp_path / "no_pyodbc"
    folder.mkdir(exist_ok=True)
    (folder / "pyodbc.py").write_text('raise ImportError("libodbc.so.2: cannot open shared object file")\n')
    return folder


@pytest.fixture
def compiled(project):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    (project.root / "other.yaml").write_text(TOPOLOGY.replace("Sales", "Shipping"))  # not the history's file
    return project


def foreign_database(root: Path) -> str:
    """A SQLite database stamped with a revision these migrations do not hold (made by `make_foreign`)."""
    return f"sqlite:///{root / 'foreign.db'}"


def make_foreign(root: Path) -> None:
    import sqlite3

    with sqlite3.connect(root / "foreign.db") as db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        db.execute("INSERT INTO alembic_version VALUES ('0123456789ab')")


def mistakes(root: Path, sqlite: str) -> list[tuple[str, list[str]]]:
    """(what, arguments) of each command's typical mistakes."""
    c = ["-c", str(root / "alembic.ini")]
    out = []
    for what, url in [
        ("wrong scheme", "foo://x"),
        ("not a URL", "localhost:5432"),
        ("missing driver", "mssql://u:p@dsn"),
        ("server down", CLOSED_PORT),
    ]:
        out += [
            (f"check, {what}", ["check", "--url", url, *c]),
            (f"adopt, {what}", ["adopt", "--url", url, *c]),
            (f"status, {what}", ["status", "--url", url, *c]),
            (f"retry, {what}", ["retry", "--url", url, "--all", *c]),
            (f"pipeline plan, {what}", ["pipeline", "plan", "--url", url, *c]),
            (f"pipeline run, {what}", ["pipeline", "run", "--url", url, *c]),
            (
                f"pipeline move, {what}",
                ["pipeline", "move", "--from-url", url, "--from-table", "Sales", "--to-table", "B", "--kind", "subscriptions"],
            ),
            (
                f"pipeline backfill, {what}",
                [
                    "pipeline",
                    "backfill",
                    "--url",
                    url,
                    "--table",
                    "Sales_OrderSaga",
                    "--property",
                    "OrderId",
                    "--column",
                    "Correlation_OrderId",
                    "--no-spark",
                ],
            ),
        ]
    out += [
        ("check, unknown table of a database never migrated", ["check", "--url", sqlite, *c]),
        (
            "pipeline move, unknown table",
            ["pipeline", "move", "--from-url", sqlite, "--from-table", "Nope", "--to-table", "B", "--no-spark"],
        ),
        (
            "pipeline backfill, unknown table",
            ["pipeline", "backfill", "--url", sqlite, "--table", "Nope", "--property", "P", "--column", "C", "--no-spark"],
        ),
        ("grants, unknown endpoint", ["grants", "--engine", "postgresql", "--login", "r", "--endpoint", "Nope", *c]),
        ("compile, missing topology", ["compile", *c, "--topology", str(root / "missing.yaml")]),
        ("compile, foreign topology", ["compile", *c, "--topology", str(root / "other.yaml")]),
        ("check, a database another project's migrations stamped", ["check", "--url", foreign_database(root), *c]),
        ("pipeline plan, a database another project's migrations stamped", ["pipeline", "plan", "--url", foreign_database(root), *c]),
        ("compile, no alembic.ini", ["compile", "-c", str(root / "nope.ini")]),
        ("validate, no topology", ["validate", "--topology", str(root / "missing.yaml")]),
        ("script, unknown revision", ["script", "--engine", "postgresql", "--to", "feedface", *c]),
        ("statements, unknown version", ["statements", "--engine", "postgresql", "--transport-version", "0.1"]),
        ("unknown option", ["check", "--bogus"]),
        ("status, a database never migrated", ["status", "--url", sqlite, *c]),
        ("status, a watch of no time", ["status", "--url", sqlite, "--watch", "0"]),
        ("retry, no selection", ["retry", "--url", sqlite]),
        ("retry, two selections", ["retry", "--url", sqlite, "--all", "--failed-queue", "Sales"]),
        ("retry, a database never migrated", ["retry", "--url", sqlite, "--all", *c]),
    ]
    return out


# One test per mistake, so they spread over the suite's workers (they were one test of 50 processes).
MISTAKES = [what for what, _ in mistakes(Path("project"), "sqlite:///empty.db")]


@pytest.mark.parametrize("what", MISTAKES)
def test_every_mistake_is_one_error_line_and_exit_2(compiled, tmp_path, what):
    make_foreign(compiled.root)
    args = dict(mistakes(compiled.root, f"sqlite:///{tmp_path / 'empty.db'}"))[what]
    result = run(tmp_path, *args, shadow=no_pyodbc(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and ERROR_LINE.match(lines[0]), f"exit {result.returncode}, stderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "url, says",
    [
        ("foo://x", "unknown database scheme foo://"),
        ("mssql://u:p@dsn", "pip install 'sqltransport-schema[mssql]'"),
        (CLOSED_PORT, "cannot reach the database"),
    ],
)
def test_json_errors_are_a_json_object(compiled, tmp_path, url, says):
    result = run(tmp_path, "check", "--url", url, "-c", str(compiled.ini), "--format", "json", shadow=no_pyodbc(tmp_path))
    assert result.returncode == 2, result.stderr
    payload = json.loads(result.stdout)
    assert payload["status"] == "error" and says in payload["message"]


@pytest.mark.postgresql
def test_postgres_scheme_means_postgresql(compiled, pg_url, tmp_path):
    """postgres://, as libpq, psql and hosting providers write it, reaches the same database."""
    url = pg_url.replace("postgresql+psycopg://", "postgres://")
    result = run(tmp_path, "adopt", "--url", url, "-c", str(compiled.ini), "--dry-run", "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(compiled, tmp_path):
    result = run(tmp_path, "--debug", "check", "--url", "foo://x", "-c", str(compiled.ini))
    assert result.returncode != 0 and "Traceback" in result.stderr
