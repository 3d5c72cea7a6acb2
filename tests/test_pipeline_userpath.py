"""The pipeline's and the split script's user-facing edges: a missing JDBC jar names its Debian
package, a second archive names the --mode that overwrites, saga tables go with their endpoint, and
SQLite runs have no schema step."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqltransport_schema import cli

from .conftest import REPO

SAGAS = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
  - name: Billing
    schema: billing
    table_prefix: Bill_
    sagas:
      - name: InvoiceSaga
        correlation: {name: InvoiceId, type: string}
queues:
  - name: error
"""


def cli_run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "sqltransport_schema.cli", *args], env=environment, capture_output=True, text=True, check=False, timeout=120
    )


def test_archive_without_the_jdbc_jar_names_the_debian_package(tmp_path):
    empty = tmp_path / "java"
    empty.mkdir()
    result = cli_run(
        "pipeline",
        "archive",
        "--url",
        f"sqlite:///{tmp_path / 'q.db'}",
        "--table",
        "Sales",
        "-o",
        str(tmp_path / "archive"),
        env={"SQLTRANSPORT_JDBC_DIR": str(empty)},
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "sudo apt-get install libxerial-sqlite-jdbc-java" in result.stderr


def test_a_second_archive_into_the_same_folder_names_the_mode(tmp_path, capsys):
    folder = tmp_path / "archive"
    folder.mkdir()
    (folder / "_SUCCESS").write_text("")
    code = cli.main(["pipeline", "archive", "--url", f"sqlite:///{tmp_path / 'q.db'}", "--table", "Sales", "-o", str(folder)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--mode overwrite" in err and "--mode append" in err


def test_split_script_puts_saga_tables_with_their_endpoint(project, tmp_path, capsys):
    project.write_topology(SAGAS)
    assert project.compile("sagas") == 0
    folder = tmp_path / "split"
    assert (
        cli.main(["script", "--engine", "postgresql", "-c", str(project.ini), "--topology", str(project.topology), "--split", str(folder)])
        == 0
    )
    files = {path.name: path.read_text() for path in folder.iterdir()}
    shared = next(text for name, text in files.items() if name.startswith("00-"))
    sales = next(text for name, text in files.items() if name.endswith("-Sales.sql"))
    billing = next(text for name, text in files.items() if name.endswith("-Billing.sql"))
    assert "Sales_OrderSaga" not in shared and "Bill_InvoiceSaga" not in shared
    assert "Sales_OrderSaga" in sales and "Bill_InvoiceSaga" in billing


def test_sqlite_runs_have_no_schema_step(project, sqlite_url):
    project.write_topology(SAGAS)
    assert project.compile("sagas") == 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "alembic"), "-x", f"url={sqlite_url}", "upgrade", "head"],
        cwd=project.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "ensure schema" not in result.stderr and 'create queue "Billing"' in result.stderr


def test_backfill_without_the_jdbc_jar_stops_before_spark_and_names_the_package(tmp_path, pg_url):
    empty = tmp_path / "java"
    empty.mkdir()
    started = time.monotonic()
    result = cli_run(
        "pipeline",
        "backfill",
        "--url",
        pg_url,
        "--table",
        "Sales_OrderSaga@[public]",
        "--property",
        "OrderId",
        "--column",
        "Correlation_OrderId",
        env={"SQLTRANSPORT_JDBC_DIR": str(empty)},
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert f"{empty / 'postgresql.jar'}" in result.stderr and "sudo apt-get install libpostgresql-jdbc-java" in result.stderr
    assert time.monotonic() - started < 5  # no Spark session was started (5-10 s here)


@pytest.mark.parametrize("command", ["archive", "replay"])
def test_archive_and_replay_refuse_no_spark_in_one_line(tmp_path, capsys, command):
    where = ["-o", str(tmp_path / "out")] if command == "archive" else ["--archive", str(tmp_path / "out")]
    code = cli.main(["pipeline", command, "--url", f"sqlite:///{tmp_path / 'q.db'}", "--table", "audit", *where, "--no-spark"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: pipeline {command} runs only under Spark") and "without --no-spark" in err
    assert "--no-spark" not in cli_run("pipeline", command, "--help").stdout  # not offered
