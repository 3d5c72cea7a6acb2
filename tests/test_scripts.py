"""`sqltransport-schema script`: the deployment script a DBA reviews, safe to re-run as a whole."""

from __future__ import annotations

import hashlib
import re

import pytest

from sqltransport_schema import cli

from .support import catalog
from .support.scripts import run_pg, script, split
from .support.tsql import GO_LINE, assert_parses

TOPOLOGY = """\
transport_version: "9.1"
engines: [mssql, postgresql]
endpoints:
  - name: Sales
    instances: [host-a]
queues:
  - name: error
  - name: audit
"""

EXAMPLE_LIKE = """\
transport_version: "9.1"
engines: [mssql, postgresql, sqlite]
delayed_table_suffix: Delayed
subscriptions:
  table: SubscriptionRouting
endpoints:
  - name: Sales
    instances: [host-a, host-b]
  - name: Billing
    schema: billing
    body_string: true
  - name: Shipping
    catalog: logistics
    delayed_delivery: false
  - name: WebFrontend
    send_only: true
queues:
  - name: error
  - name: audit
"""


def versions(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as connection:
        return [r[0] for r in connection.execute("SELECT version_num FROM alembic_version")]


def test_postgresql_script_runs_twice_on_a_fresh_database(project, pg_url, tmp_path):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    project.write_topology(TOPOLOGY + "  - name: poison\n")
    assert project.compile("add poison") == 0
    head = project.head()
    sql = script(project, tmp_path, "postgresql")
    assert "CREATE TABLE IF NOT EXISTS alembic_version (" in sql
    assert "RETURNING" not in sql  # Alembic's unguarded INSERT was rewritten
    run_pg(pg_url, sql)
    first = catalog.read(pg_url)
    assert len(first) == 7 and versions(pg_url) == [head]
    run_pg(pg_url, sql)
    assert catalog.read(pg_url) == first
    assert versions(pg_url) == [head]


def test_postgresql_drop_guard_fires_on_a_queue_with_messages(project, pg_url, tmp_path):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    first = project.head()
    run_pg(pg_url, script(project, tmp_path, "postgresql"))
    project.write_topology(TOPOLOGY.replace("  - name: audit\n", "") + "drop_protected:\n  - name: audit\n")
    assert project.compile("drop audit") == 0
    sql = script(project, tmp_path, "postgresql", "--from", first, "--to", "head")
    assert "CREATE TABLE" not in sql.split("-- Running upgrade")[0]  # the database already has alembic_version
    assert f"-- revisions: {first} -> {project.head()}" in sql
    run_pg(pg_url, """INSERT INTO "public"."audit" (Id, Headers) VALUES (gen_random_uuid(), '{}')""")
    with pytest.raises(Exception, match="refusing to drop"):
        run_pg(pg_url, sql)
    assert ("public", "audit") in catalog.read(pg_url)
    assert versions(pg_url) == [first]
    # emptied, the same script drops it
    run_pg(pg_url, 'DELETE FROM "public"."audit"')
    run_pg(pg_url, sql)
    assert ("public", "audit") not in catalog.read(pg_url)
    assert versions(pg_url) == [project.head()]


def test_postgresql_from_script_with_a_drop_runs_twice(project, pg_url, tmp_path):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    first = project.head()
    run_pg(pg_url, script(project, tmp_path, "postgresql"))
    project.write_topology(TOPOLOGY.replace("  - name: audit\n", "") + "drop_protected:\n  - name: audit\n")
    assert project.compile("drop audit") == 0
    sql = script(project, tmp_path, "postgresql", "--from", first)
    run_pg(pg_url, sql)
    run_pg(pg_url, sql)
    assert versions(pg_url) == [project.head()]


def test_mssql_script_batches_parse_and_header_records_topology_and_range(project, tmp_path):
    project.write_topology(EXAMPLE_LIKE)
    assert project.compile("initial") == 0
    first = project.head()
    project.write_topology(EXAMPLE_LIKE.replace("  - name: audit\n", "") + "drop_protected:\n  - name: audit\n")
    assert project.compile("drop audit") == 0
    head = project.head()
    sql = script(project, tmp_path, "mssql")
    digest = hashlib.sha256(project.topology.read_bytes()).hexdigest()
    header = sql.split("\n\n", 1)[0]
    assert all(line.startswith("-- ") for line in header.splitlines())
    assert f"sha256 {digest}" in header
    assert f"-- revisions: base -> {head}" in header
    assert "-- engine: mssql" in header
    assert re.search(r"^-- generated: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", header, re.M)
    assert "IF OBJECT_ID(N'alembic_version', N'U') IS NULL" in sql
    assert f"IF NOT EXISTS (SELECT 1 FROM alembic_version)\n    INSERT INTO alembic_version (version_num) VALUES ('{first}');" in sql
    assert f"IF EXISTS (SELECT 1 FROM alembic_version WHERE version_num = '{first}')" in sql
    chunks = [c for c in GO_LINE.split(sql) if c.strip()]
    assert len(chunks) >= 14
    for i, chunk in enumerate(chunks):
        assert_parses(chunk, f"script batch {i}")
    partial = script(project, tmp_path, "mssql", "--from", first)
    assert f"-- revisions: {first} -> {head}" in partial
    assert "alembic_version_pkc" not in partial
    for i, chunk in enumerate(c for c in GO_LINE.split(partial) if c.strip()):
        assert_parses(chunk, f"partial batch {i}")


def test_unknown_alembic_version_statements_are_refused():
    from sqltransport_schema.migrate import offline

    with pytest.raises(offline.ScriptError, match="not made idempotent"):
        offline.make_idempotent("DELETE FROM alembic_version WHERE alembic_version.version_num = 'x';", "postgresql")


def test_postgresql_script_split_by_endpoint_runs_twice_and_matches_the_whole_script(project, pg_url, tmp_path):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    files = split(project, tmp_path, "postgresql")
    assert list(files) == ["00-shared.sql", "01-Sales.sql", "99-alembic-version.sql"]
    assert '"Sales.host-a"' in files["01-Sales.sql"] and '"Sales.Delayed"' in files["01-Sales.sql"]
    assert '"error"' in files["00-shared.sql"] and '"SubscriptionRouting"' in files["00-shared.sql"]
    assert '"Sales"' not in files["00-shared.sql"] and "INSERT INTO alembic_version" not in files["01-Sales.sql"]
    for text in files.values():
        assert "-- part: " in text and f"sha256 {hashlib.sha256(project.topology.read_bytes()).hexdigest()}" in text
    for _ in range(2):
        for text in files.values():
            run_pg(pg_url, text)
    assert versions(pg_url) == [project.head()]
    assert cli.main(["check", "--url", pg_url, "-c", str(project.ini)]) == 0


def test_mssql_script_split_files_parse_and_hold_every_table_once(project, tmp_path):
    project.write_topology(EXAMPLE_LIKE)
    assert project.compile("initial") == 0
    whole = script(project, tmp_path, "mssql")
    files = split(project, tmp_path, "mssql")
    assert list(files)[0] == "00-shared.sql" and list(files)[-1] == "99-alembic-version.sql"
    creates = re.compile(r"^-- Create .*$", re.M)
    assert sorted(line for text in files.values() for line in creates.findall(text)) == sorted(creates.findall(whole))
    for name, text in files.items():
        for i, chunk in enumerate(c for c in GO_LINE.split(text) if c.strip()):
            assert_parses(chunk, f"{name} batch {i}")


def alembic_sql(project, url: str, *revision: str) -> str:
    """`alembic -x url=URL upgrade REV --sql` as README runs it, in the project folder."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from .support.projects import REPO

    command = [str(Path(sys.executable).parent / "alembic"), "-x", f"url={url}", "upgrade", *(revision or ("head",)), "--sql"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, cwd=project.root, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def psql(url: str, path) -> None:
    import subprocess

    database = url.replace("postgresql+psycopg", "postgresql")
    result = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(path), database], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_alembic_offline_script_runs_twice_with_psql(project, pg_url, tmp_path):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    first = project.head()
    project.write_topology(TOPOLOGY + "  - name: poison\n")
    assert project.compile("add poison") == 0
    deploy = tmp_path / "deploy.sql"
    deploy.write_text(alembic_sql(project, "postgresql://"), encoding="utf-8")
    psql(pg_url, deploy)
    tables = catalog.read(pg_url)
    assert ("public", "poison") in tables and versions(pg_url) == [project.head()]
    psql(pg_url, deploy)  # again: nothing changes, one stamp
    assert catalog.read(pg_url) == tables and versions(pg_url) == [project.head()]
    # a database a first script brought to the first revision takes the whole script too
    fresh = tmp_path / "first.sql"
    fresh.write_text(alembic_sql(project, "postgresql://", first), encoding="utf-8")
    run_pg(pg_url, "DROP TABLE alembic_version")
    psql(pg_url, fresh)
    assert versions(pg_url) == [first]
    psql(pg_url, deploy)
    assert catalog.read(pg_url) == tables and versions(pg_url) == [project.head()]


def test_alembic_offline_mssql_script_stamps_repeatably_and_parses(project):
    project.write_topology(EXAMPLE_LIKE)
    assert project.compile("initial") == 0
    first = project.head()
    project.write_topology(EXAMPLE_LIKE + "  - name: poison\n")
    assert project.compile("add poison") == 0
    sql = alembic_sql(project, "mssql://")
    assert "IF OBJECT_ID(N'alembic_version', N'U') IS NULL\nBEGIN\nCREATE TABLE alembic_version (" in sql
    assert f"IF NOT EXISTS (SELECT 1 FROM alembic_version)\n    INSERT INTO alembic_version (version_num) VALUES ('{first}');" in sql
    assert f"IF EXISTS (SELECT 1 FROM alembic_version WHERE version_num = '{first}')" in sql and "OUTPUT inserted" not in sql
    for i, chunk in enumerate(c for c in GO_LINE.split(sql) if c.strip()):
        assert_parses(chunk, f"alembic --sql batch {i}")


def test_mssql_scripts_name_their_writer_and_stop_at_an_error_under_any_client(project, tmp_path):
    from sqltransport_schema import __version__

    project.write_topology(EXAMPLE_LIKE)
    assert project.compile("initial") == 0
    whole = script(project, tmp_path, "mssql")
    header = whole.split("\n\n", 1)[0].splitlines()
    assert f"-- written by: sqltransport-schema {__version__}" in header and "-- transport version: 9.1" in header
    guard = "IF @@ERROR <> 0 OR @@TRANCOUNT = 0\nBEGIN\n    IF @@TRANCOUNT > 0 ROLLBACK;\n    SET NOEXEC ON;\nEND;"
    for text in [whole, alembic_sql(project, "mssql://"), *split(project, tmp_path, "mssql").values()]:
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("--"))  # after the header
        body = "\n".join(lines[start:])
        assert body.startswith("SET ANSI_NULLS") and "SET XACT_ABORT ON;\n\nGO\n\nBEGIN TRANSACTION;" in body, body[:300]
        batches = [c.strip() for c in GO_LINE.split(body) if c.strip()][1:]  # after the session options' batch
        # after every batch of the transaction, the guard: once an error rolled it back, nothing more runs
        commit = next(i for i, b in enumerate(batches) if b.endswith("COMMIT;"))
        assert [i for i in range(commit) if batches[i] != guard and batches[i + 1] != guard] == []
        assert batches[commit + 1 :] == ["SET NOEXEC OFF;"]
        for i, chunk in enumerate(batches):
            assert_parses(chunk, f"batch {i}")


def test_script_header_names_the_transport_versions_across_a_change(project, tmp_path):
    mssql_only = TOPOLOGY.replace("engines: [mssql, postgresql]", "engines: [mssql]")
    project.write_topology(mssql_only.replace('"9.1"', '"4.0"'))
    assert project.compile("initial") == 0
    first = project.head()
    assert "-- transport version: 4.0\n" in script(project, tmp_path, "mssql")
    project.write_topology(mssql_only)
    assert project.compile("upgrade the transport") == 0
    assert "-- transport version: 4.0 -> 9.1\n" in script(project, tmp_path, "mssql", "--from", first)


def psql_without_stop(url: str, path) -> tuple[int, str]:
    """psql as a DBA may run a file: without ON_ERROR_STOP, so that it goes on past an error."""
    import subprocess

    database = url.replace("postgresql+psycopg", "postgresql")
    result = subprocess.run(["psql", "-X", "-q", "-f", str(path), database], capture_output=True, text=True, timeout=120)
    return result.returncode, result.stderr


def stamped(url: str) -> list[str]:
    """alembic_version's rows, none when the table is missing."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as connection:
        if connection.execute("SELECT to_regclass('alembic_version')").fetchone()[0] is None:
            return []
        return [r[0] for r in connection.execute("SELECT version_num FROM alembic_version")]


@pytest.mark.parametrize("how", ["failing", "skipped"])
def test_split_postgresql_files_under_psql_without_on_error_stop_stamp_only_once_every_part_completed(project, pg_url, tmp_path, how):
    project.write_topology(TOPOLOGY.replace("queues:", "  - name: Billing\n    instances: [host-b]\nqueues:"))
    assert project.compile("initial") == 0
    split(project, tmp_path, "postgresql")
    folder = tmp_path / "split-postgresql"
    names = sorted(path.name for path in folder.iterdir())
    assert names == ["00-shared.sql", "01-Sales.sql", "02-Billing.sql", "99-alembic-version.sql"]
    if how == "failing":  # a table of that name, not the transport's: its CREATE INDEX on Due fails, the rest goes on
        run_pg(pg_url, 'CREATE TABLE "public"."Billing.Delayed" (x int)')
    for name in names:
        if how == "skipped" and name == "02-Billing.sql":
            continue
        code, errors = psql_without_stop(pg_url, folder / name)
        assert code == 0  # psql went on past every error, as it does without ON_ERROR_STOP
        if name == "02-Billing.sql" and how == "failing":
            assert "ERROR:" in errors
    assert ("public", "Sales.host-a") in catalog.read(pg_url)  # the other parts completed
    assert ("public", "Billing.host-b") not in catalog.read(pg_url)  # the failing part rolled back whole
    assert stamped(pg_url) == []  # 99 stamped nothing ...
    _, errors = psql_without_stop(pg_url, folder / "99-alembic-version.sql")
    lines = [line for line in errors.splitlines() if "ERROR:" in line]
    assert len(lines) == 1, errors  # ... and said which part, in one error
    assert "not stamped: 02-Billing.sql of this deployment did not complete; run it, then this file again" in lines[0]
    assert stamped(pg_url) == []
    # the part run (again) once the cause is gone, then the last file: stamped, and the markers gone with it
    run_pg(pg_url, 'DROP TABLE IF EXISTS "public"."Billing.Delayed"')
    for name in ["02-Billing.sql", "99-alembic-version.sql"]:
        code, errors = psql_without_stop(pg_url, folder / name)
        assert "ERROR" not in errors, errors
    assert stamped(pg_url) == [project.head()]
    assert not any(table == "sqltransport_script_parts" for _, table in catalog.read(pg_url))
    assert cli.main(["check", "--url", pg_url, "-c", str(project.ini)]) == 0
