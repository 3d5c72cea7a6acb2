"""The pipeline's and the split script's user-facing edges: a missing JDBC jar names its Debian
package, a second archive names the --mode that overwrites, saga tables go with their endpoint, and
SQLite runs have no schema step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sqltransport_schema import cli

from .support.projects import REPO

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


def test_export_without_the_jdbc_jar_names_the_debian_package(tmp_path):
    empty = tmp_path / "java"
    empty.mkdir()
    result = cli_run(
        "pipeline",
        "export",
        "--url",
        f"sqlite:///{tmp_path / 'q.db'}",
        "--table",
        "Sales",
        "--out-dir",
        str(tmp_path / "export"),
        env={"SQLTRANSPORT_JDBC_DIR": str(empty)},
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "sudo apt-get install libxerial-sqlite-jdbc-java" in result.stderr


def test_a_second_export_into_the_same_folder_names_the_mode(tmp_path, capsys):
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "_SUCCESS").write_text("")
    code = cli.main(["pipeline", "export", "--url", f"sqlite:///{tmp_path / 'q.db'}", "--table", "Sales", "--out-dir", str(folder)])
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
    java, started = _recording_java(tmp_path)
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
        env={"SQLTRANSPORT_JDBC_DIR": str(empty), "JAVA_HOME": str(java), "PATH": f"{java / 'bin'}{os.pathsep}{os.environ['PATH']}"},
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert f"{empty / 'postgresql.jar'}" in result.stderr and "sudo apt-get install libpostgresql-jdbc-java" in result.stderr
    assert not started.exists()  # no Spark session was started: its launcher would have run java


def _recording_java(tmp_path: Path) -> tuple[Path, Path]:
    """A JAVA_HOME whose java only leaves a mark (and fails): whether a command started a JVM, told by
    what it did rather than by how long it took (a loaded machine made a time bound flaky)."""
    home, mark = tmp_path / "jdk", tmp_path / "java-started"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\ntouch '{mark}'\nexit 1\n", encoding="utf-8")
    java.chmod(0o755)
    return home, mark


@pytest.mark.spark  # pyarrow comes with the spark extra
@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_archive_and_replay_without_spark_round_trip_byte_for_byte(tmp_path, capsys, request, engine):
    from sqltransport_schema.pipeline.connect import dbapi_connect
    from sqltransport_schema.schema import TableName

    from .support.pipeline import create_table, fill_queue, queue_contents, queue_spec

    url = request.getfixturevalue("pg_url" if engine == "postgresql" else "sqlite_url")
    table = TableName("audit", "public" if engine == "postgresql" else None)
    create_table(url, queue_spec("audit", table.schema))
    fill_queue(url, table, 300, seed=5)
    before = queue_contents(url, table)
    folder = tmp_path / "archive"
    address = "audit@[public]" if engine == "postgresql" else "audit"
    assert (
        cli.main(["pipeline", "export", "--url", url, "--table", address, "--out-dir", str(folder), "--no-spark", "--format", "json"]) == 0
    )
    archived = json.loads(capsys.readouterr().out)
    assert (archived["rows"], archived["dates"]) == (300, ["2026-11-01", "2026-11-02", "2026-11-03"])
    assert sorted(p.name for p in folder.iterdir()) == [f"date={d}" for d in archived["dates"]]

    def empty() -> None:
        conn = dbapi_connect(url)
        conn.cursor().execute('DELETE FROM "public"."audit"' if engine == "postgresql" else 'DELETE FROM "audit"')
        conn.commit()
        conn.close()

    empty()
    replay = ["pipeline", "replay", "--url", url, "--table", address, "--in-dir", str(folder), "--no-spark", "--format", "json"]
    assert cli.main(replay) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 300
    assert queue_contents(url, table) == before  # ids, headers, bodies, in order
    assert cli.main(replay) == 0  # the same replay again: nothing twice
    assert json.loads(capsys.readouterr().out)["rows"] == 0 and len(queue_contents(url, table)) == 300
    empty()
    one_type = ["--message-type", "Shop.Order3", "--since", "2026-11-02", "--replay-id", "again"]
    assert cli.main([*replay, *one_type]) == 0
    expected = [r for i, r in enumerate(before) if i % 7 == 3 and 1 + i % 3 >= 2]  # fill_queue's types and days
    assert json.loads(capsys.readouterr().out)["rows"] == len(expected) > 0
    assert queue_contents(url, table) == expected
    assert cli.main([*replay, "--where", "message_type = 'x'"]) == 2
    assert "--where is a Spark SQL condition" in capsys.readouterr().out


def test_an_archive_written_without_spark_reads_as_sparks_does(spark, tmp_path, pg_url):
    from sqltransport_schema.pipeline import archive as pipeline_archive
    from sqltransport_schema.pipeline.connect import Endpoint
    from sqltransport_schema.schema import TableName

    from .support.pipeline import create_table, fill_queue, queue_spec

    create_table(pg_url, queue_spec("audit", "public"))
    fill_queue(pg_url, TableName("audit", "public"), 200, seed=6)
    source = Endpoint(pg_url, TableName("audit", "public"))
    pipeline_archive.archive(None, source, str(tmp_path / "plain"))
    pipeline_archive.archive(spark, source, str(tmp_path / "spark"))
    plain, sparks = (spark.read.parquet(str(tmp_path / name)) for name in ("plain", "spark"))
    assert dict(plain.dtypes) == dict(sparks.dtypes)
    compared = [c for c in sparks.columns if c != "archived_at"]
    assert sorted(plain.select(compared).collect()) == sorted(sparks.select(compared).collect())
