"""Pure parts of the pipeline: JDBC URLs (jTDS for SQL Server), layouts, header rewriting, CLI wiring."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from sqltransport_schema import cli, wire
from sqltransport_schema.pipeline import layouts
from sqltransport_schema.pipeline.connect import Endpoint, jdbc, table_name
from sqltransport_schema.pipeline.move import parse_rewrites, rewrite_headers
from sqltransport_schema.schema import Kind, TableName


def test_jdbc_urls_and_drivers():
    pg = jdbc("postgresql://app:s3cret@db.example:5433/orders")
    assert pg.url == (
        "jdbc:postgresql://db.example:5433/orders?stringtype=unspecified&reWriteBatchedInserts=true&connectTimeout=10&user=app&password=s3cret"
    )
    assert (pg.driver, pg.jar) == ("org.postgresql.Driver", "/usr/share/java/postgresql.jar")
    lite = jdbc("sqlite:///relative.db")
    assert lite.url.startswith("jdbc:sqlite:/") and lite.url.endswith("/relative.db") and lite.driver == "org.sqlite.JDBC"
    mssql = jdbc("mssql+pyodbc://sa:pw@sql01:1433/nsb")
    assert mssql.url == "jdbc:jtds:sqlserver://sql01:1433/nsb;user=sa;password=pw;loginTimeout=10"
    assert (mssql.driver, mssql.jar) == ("net.sourceforge.jtds.jdbc.Driver", "/usr/share/java/jtds.jar")


def test_endpoints_hide_passwords_and_quote_by_engine():
    ep = Endpoint("postgresql://app:s3cret@db/orders", TableName('we"ird', "sales"))
    assert "s3cret" not in ep.describe() and ep.describe().endswith('"sales"."we""ird"')
    assert ep.layout.columns == ("Id", "Expires", "Headers", "Body", "Seq")
    assert Endpoint("sqlite:///q.db", TableName("Sales"), Kind.DELAYED).layout.columns == ("Headers", "Body", "Due", "RowVersion")
    ms = Endpoint("mssql+pyodbc://sa:pw@sql01/nsb", TableName("Sales", "dbo", "nsb"))
    assert ms.qualified == "[nsb].[dbo].[Sales]" and ms.layout.order == "RowVersion"
    assert table_name("Sales@[dbo]@[nsb.prod]") == TableName("Sales", "dbo", "nsb.prod")


def test_layout_conversion_between_sql_server_and_postgresql_rows():
    message_id = uuid.uuid4()
    row = layouts.read_queue_row(layouts.QUEUE_MSSQL, (message_id, "c", "r@[dbo]", 1, "2030-01-01 00:00:01.500", "{}", b"x", 7))
    assert row == layouts.QueueRow(str(message_id), "c", "r@[dbo]", datetime(2030, 1, 1, 0, 0, 1, 500000), "{}", b"x", 7)
    assert layouts.write_queue_row(layouts.QUEUE_POSTGRESQL, row, 42, False) == (str(message_id), row.expires, "{}", b"x", 42)
    assert layouts.write_queue_row(layouts.QUEUE_MSSQL, row, None, True)[:5] == (
        str(message_id),
        "c",
        "r@[dbo]",
        1,
        "2030-01-01 00:00:01.500",
    )
    aware = datetime(2030, 1, 1, 1, 0, tzinfo=timezone.utc)
    assert layouts.to_utc_naive(aware) == datetime(2030, 1, 1, 1, 0)


def test_rewrite_headers_touches_only_the_address_headers():
    rewrites = parse_rewrites(["Sales@[dbo]=Sales@[public]"])
    text = wire.encode_headers({wire.REPLY_TO_ADDRESS: "Sales@[dbo]", "Note": "Sales@[dbo]"})
    out = wire.decode_headers(rewrite_headers(text, rewrites))
    assert out == {wire.REPLY_TO_ADDRESS: "Sales@[public]", "Note": "Sales@[dbo]"}
    poison = '{"NServiceBus.ReplyToAddress": "Sales@[dbo]"'  # unreadable: passed on byte for byte
    assert rewrite_headers(poison, rewrites) is poison
    untouched = wire.encode_headers({wire.REPLY_TO_ADDRESS: "Billing@[dbo]"})
    assert rewrite_headers(untouched, rewrites) is untouched
    with pytest.raises(ValueError):
        parse_rewrites(["no-equals"])


def test_pipeline_subcommands_are_registered(capsys):
    with pytest.raises(SystemExit):
        cli.main(["pipeline", "--help"])
    out = capsys.readouterr().out
    for name in ("move", "plan", "run", "export", "replay", "backfill"):
        assert name in out


def test_move_reports_errors_with_exit_2(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    code = cli.main(
        [
            "pipeline",
            "move",
            "--from-url",
            url,
            "--from-table",
            "Missing",
            "--to-url",
            url,
            "--to-table",
            "Other",
            "--no-spark",
            "--format",
            "json",
        ]
    )
    assert code == 2
    assert '"status": "error"' in capsys.readouterr().out


def test_same_database_compares_what_the_urls_name(tmp_path):
    from sqltransport_schema.pipeline.connect import same_database

    assert same_database(f"sqlite:///{tmp_path}/q.db", f"sqlite:///{tmp_path}/./q.db")
    assert not same_database(f"sqlite:///{tmp_path}/q.db", f"sqlite:///{tmp_path}/r.db")
    assert same_database("postgresql://postgres@127.0.0.1/app", "postgresql+psycopg://postgres@127.0.0.1/app")
    assert not same_database("postgresql://postgres@127.0.0.1/app", "postgresql://postgres@127.0.0.1/other")


def test_the_tool_never_imports_pyspark_outside_a_spark_job():
    import subprocess
    import sys

    code = (
        "import sys, sqltransport_schema.cli as c; c.build_parser(); "
        "import sqltransport_schema.pipeline.move, sqltransport_schema.pipeline.plan, "
        "sqltransport_schema.pipeline.archive, sqltransport_schema.pipeline.backfill, sqltransport_schema.cli.pipeline; "
        "assert 'pyspark' not in sys.modules, 'pyspark imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_libpq_parameters_keep_quotes_and_backslashes_in_passwords():
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from sqlalchemy.engine import make_url

    from sqltransport_schema import engines

    url = make_url("postgresql://bob:a%27b%5Cc%20d@db.example:6543/queues")
    libpq_parameters = engines.get("postgresql").pipeline.libpq_parameters
    assert conninfo_to_dict(make_conninfo(**libpq_parameters(url))) == {
        "host": "db.example",
        "port": "6543",
        "dbname": "queues",
        "user": "bob",
        "password": "a'b\\c d",
    }


def test_the_pipeline_reaches_a_database_as_every_command_does(tmp_path):
    """db.pipeline_connection (pipeline/connect.dbapi_connect): db's one rule for a SQLite file that is not
    there (must_exist: refused and not created; a folder that is not there: refused always), and a server
    that accepts the connection but never answers given up on within the connect timeout."""
    import socket
    import time

    from sqltransport_schema.db import NoDatabase, pipeline_connection
    from sqltransport_schema.pipeline.connect import dbapi_connect

    missing = tmp_path / "nothing.db"
    with pytest.raises(NoDatabase, match=f"no SQLite database at {missing}"):
        dbapi_connect(f"sqlite:///{missing}", must_exist=True)
    assert not missing.exists()
    with pytest.raises(NoDatabase, match="no folder"):
        dbapi_connect(f"sqlite:///{tmp_path / 'no' / 'x.db'}")
    dbapi_connect(f"sqlite:///{missing}").close()  # a destination the pipeline may create, where its folder is
    assert missing.exists()
    dbapi_connect(f"sqlite:///{missing}", must_exist=True).close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # the handshake completes in the backlog; no startup answer ever comes
    try:
        started = time.monotonic()
        with pytest.raises(Exception, match="timeout"):
            pipeline_connection(f"postgresql://u@127.0.0.1:{silent.getsockname()[1]}/db", timeout=1)
        assert time.monotonic() - started < 5  # libpq waits 2 s at least
    finally:
        silent.close()
