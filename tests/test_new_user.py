"""What a new user meets on the way, the rest of issue 56's smaller items, each said where it happens: a
database the server does not have (the command that creates it), a missing JDBC jar (`--no-spark`), the
console's URL as given, PostgreSQL addresses without a catalog, `adopt` on saga tables alone, a typo of a
queue naming the deployed ones, and a Spark command's start without the JVM's incubator warning."""

from __future__ import annotations

import sqlite3
import subprocess
import uuid

import pytest
from alembic.util import CommandError

from sqltransport_schema import cli, engines, errors

from .support.runtime import TWO_ENDPOINTS as TOPOLOGY
from .support.runtime import deployed
from .support.warm import program


def _plain(url: str) -> str:
    """A test database's URL as a user writes it (the fixtures name the driver)."""
    return url.replace("postgresql+psycopg://", "postgresql://").replace("mysql+pymysql://", "mysql://")


def _absent(url: str) -> tuple[str, str]:
    """(a URL of the same server naming a database it does not have, that name)."""
    name = f"absent_{uuid.uuid4().hex[:10]}"
    return _plain(url).rsplit("/", 1)[0] + "/" + name, name


def test_a_postgresql_database_that_is_not_there_suggests_createdb(project, pg_url, capsys):
    """status (and any command) and alembic upgrade: the one line names the database and `createdb NAME`, once."""
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    url, name = _absent(pg_url)
    said = f"cannot reach the database: the server has no database '{name}'; create it first: `createdb {name}`"
    capsys.readouterr()
    assert cli.main(["status", "-c", str(project.ini), "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("createdb") == 1 and len(err.splitlines()) == 1, err
    with pytest.raises(CommandError, match=f"^{said}") as raised:
        project.upgrade(url)
    assert str(raised.value).count("createdb") == 1


def test_a_mariadb_database_that_is_not_there_says_how_to_create_it(mysql_url, capsys):
    url, name = _absent(mysql_url)
    assert cli.main(["check", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach the database: the server has no database '{name}'; create it first: ")
    assert f"CREATE DATABASE {name}" in err, err


def _archive_without_jars(project, sqlite_url, tmp_path, monkeypatch) -> list[str]:
    from sqltransport_schema.pipeline import connect

    project.deploy(sqlite_url, TOPOLOGY)
    monkeypatch.setattr(connect, "JAVA_DIR", tmp_path / "no-jars")
    return ["pipeline", "export", "--url", sqlite_url, "--table", "error", "--out-dir", str(tmp_path / "export")]


def test_a_missing_jdbc_jar_mentions_no_spark(project, sqlite_url, tmp_path, monkeypatch, capsys):
    """The jar check runs before Spark starts; the pipeline's commands all take --no-spark, so the line says it."""
    archive = _archive_without_jars(project, sqlite_url, tmp_path, monkeypatch)
    capsys.readouterr()
    assert cli.main(archive) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Spark reads sqlite through the JDBC driver") and "which is missing" in err, err
    assert err.rstrip().endswith("or run it in this process, without Spark: --no-spark") and len(err.splitlines()) == 1


@pytest.mark.spark  # Parquet is written with the spark extra's pyarrow
def test_what_the_missing_jar_line_suggests_works(project, sqlite_url, tmp_path, monkeypatch):
    archive = _archive_without_jars(project, sqlite_url, tmp_path, monkeypatch)
    assert cli.main([*archive, "--no-spark"]) == 0


@pytest.mark.console
def test_the_console_shows_the_url_as_given(project, pg_url, monkeypatch):
    """docs/operations.md: a URL is shown as given (`postgresql://`), not as the driver's name rewrote it."""
    from sqltransport_schema.console.app import Console
    from sqltransport_schema.console.security import Access

    given = _plain(pg_url)
    transport = deployed(project, given, monkeypatch, TOPOLOGY)
    try:
        console = Console(transport, Access.from_environment("127.0.0.1", True, environ={}), None, "error")
        assert console.database == given and "+psycopg" not in console.database
    finally:
        transport.engine.dispose()


def test_postgresql_addresses_have_no_catalog(project, pg_url, monkeypatch):
    """The PostgreSQL transport's addresses are table@schema: a catalog the topology gives (for SQL Server) is
    not in them, nor in status's rows; SQL Server's keep it."""
    from sqltransport_schema.runtime.status import status

    topology = TOPOLOGY.replace("  - name: Billing\n", "  - name: Billing\n  - name: Shipping\n    catalog: logistics\n")
    transport = deployed(project, _plain(pg_url), monkeypatch, topology)
    try:
        shipping = transport.queue("Shipping", catalog="logistics")
        assert shipping.address == "Shipping@[public]"
        rows = {row.name: row for row in status(transport).tables}
        assert rows["Shipping"].catalog is None and rows["Shipping"].address == "Shipping@[public]", rows["Shipping"]
        assert "logistics" not in (rows["Shipping"].canonical_address or "")
    finally:
        transport.engine.dispose()
    assert engines.get("postgresql").has_catalogs is False and engines.get("mssql").has_catalogs is True


def test_sql_server_addresses_keep_their_catalog(project, sqlite_url, monkeypatch):
    """The same Transport.address_of on an engine with catalogs: `Shipping@[dbo]@[logistics]` (transport-facts §5)."""
    transport = deployed(project, sqlite_url, monkeypatch, TOPOLOGY)
    try:
        monkeypatch.setattr(transport, "dialect", engines.get("mssql"))
        name = transport.name("Shipping", None, "logistics")
        assert transport.address_of(name) == "Shipping@[dbo]@[logistics]"
    finally:
        transport.engine.dispose()


SAGAS = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
queues:
  - name: error
"""


def test_adopt_of_saga_tables_alone_says_the_version_cannot_be_told(project, sqlite_url, capsys):
    """A database holding a saga table only (every release makes it alike): no list of 17 releases, but that
    the release cannot be told from it and what to do."""
    project.deploy(sqlite_url, SAGAS)
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as connection:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if table not in ("Sales_OrderSaga", "sqlite_sequence"):
                connection.execute(f'DROP TABLE "{table}"')
    capsys.readouterr()
    assert cli.main(["adopt", "-c", str(project.ini), "--url", sqlite_url]) == 1  # an upgrade plan: the queues are missing
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("the transport version cannot be told from these tables"), out
    assert "transport_version 9.1" in first and "set transport_version to it and compile before adopting" in first
    assert "one layout" not in out and " / " not in out
    assert cli.main(["adopt", "-c", str(project.ini), "--url", sqlite_url, "--format", "json"]) == 1
    assert '"made_by": []' in capsys.readouterr().out


def test_a_typo_of_a_queue_names_the_deployed_queues(project, sqlite_url, monkeypatch):
    transport = deployed(project, sqlite_url, monkeypatch, TOPOLOGY)
    try:
        with pytest.raises(errors.NotFound, match=r"did you mean 'Sales'\? .*\(deployed: Billing, Sales, error\)$"):
            transport.queue("Sale")
    finally:
        transport.engine.dispose()


@pytest.mark.spark
def test_a_spark_command_starts_without_the_jvms_incubator_warning(project, tmp_path):
    """Spark's launcher adds jdk.incubator.vector to its JVM and Java warns of it on every start: the
    command's stderr holds none of it, and the JVM's other lines still pass (the move's own lines do)."""
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    project.deploy(source, TOPOLOGY)
    project.upgrade(target)
    move = [program("sqltransport-schema"), "pipeline", "move", "--from-url", source, "--from-table", "Sales"]
    result = subprocess.run(
        [*move, "--to-url", target, "--to-table", "Billing"], cwd=project.root, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert "moved 0 message(s)" in result.stdout
    assert "incubator" not in result.stderr and "WARNING" not in result.stderr, result.stderr


def test_the_jvms_stderr_filter_keeps_every_other_line():
    """What the JVM says besides its start-up warnings (an error of Spark's, a failed start) still shows."""
    import io

    from sqltransport_schema.pipeline.session import _forward

    said = io.StringIO()
    jvm = b"WARNING: Using incubator modules: jdk.incubator.vector\n12:00:01 ERROR Executor: boom\nJAVA_HOME is not set\n"
    _forward(io.BytesIO(jvm), said)
    assert said.getvalue() == "12:00:01 ERROR Executor: boom\nJAVA_HOME is not set\n"
