"""fleet status --check's per-target path on real PostgreSQL: a worker checks each target on the
connection it read the stamps on, against what it computed once (check.Reference), and says what
`check` says of the same database: in sync, drifted, behind, never upgraded. What a target costs
is counted: its statements through SQLAlchemy are its catalog and subscription reads only (no
dialect set-up, no Alembic stamp read, no second connection's), the same for every target."""

from __future__ import annotations

import pytest
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Engine

from sqltransport_schema import check
from sqltransport_schema.fleet.file import Target
from sqltransport_schema.fleet.work import Migrations, Settings

from .support.fleets import SECRET, example_project, pg_databases, pg_url, revisions, run_fleet

pytestmark = [pytest.mark.postgresql, pytest.mark.slow]


@pytest.fixture
def example(tmp_path):
    return example_project(tmp_path)


def test_a_workers_check_says_what_check_says_at_a_cost_per_target_that_does_not_vary(example):
    ini = str(example / "alembic.ini")
    revs = revisions(example)
    with pg_databases(5) as names:
        short = [n.rsplit("_", 1)[1] for n in names]
        prefix = names[0].rsplit("_", 1)[0]
        (example / "fleet.yaml").write_text(f"url_template: {pg_url(f'{prefix}_{{name}}')}\nnames: [{', '.join(short[:4])}]\n")
        assert run_fleet(example, "upgrade", "--only", short[0], "--only", short[1], "--only", short[3]).returncode == 0
        assert run_fleet(example, "upgrade", "--only", short[2], "--to", revs[1]).returncode == 0
        import psycopg

        with psycopg.connect(pg_url(names[1]), autocommit=True) as connection:
            connection.execute('DROP TABLE "public"."error"')
        # names[4] never upgraded

        statements: list[str] = []

        def count(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001 - SQLAlchemy's event
            statements.append(statement)

        worker = Migrations(Settings(config=ini, check=True))
        targets = [Target(n.rsplit("_", 1)[1], pg_url(n, SECRET)) for n in names]
        event.listen(Engine, "before_cursor_execute", count)
        try:
            per_target = []
            drift = {}
            for target in targets:
                before = len(statements)
                result = worker.status(target)
                assert result.error is None, result.error
                drift[target.name] = result.drift
                per_target.append(len(statements) - before)
        finally:
            event.remove(Engine, "before_cursor_execute", count)

        # what check says of each database, its drift (unapplied revisions are the row's "behind")
        for target in targets:
            try:
                report = check.run(target.url, Config(ini))  # the same URL: the advice repeats it, password masked
            except check.CheckError as error:
                assert drift[target.name] == {"in_sync": False, "error": str(error), "counts": {}}
                continue
            counts = {c: n for c, n in report.counts().items() if c not in check.INFO_CATEGORIES and c != "unapplied_revisions"}
            assert drift[target.name] == {"in_sync": not counts, "counts": counts}, target.name
        assert drift[short[0]] == {"in_sync": True, "counts": {}}
        assert drift[short[1]] == {"in_sync": False, "counts": {"missing_table": 1}}
        assert drift[short[2]]["in_sync"] and worker.status(targets[2]).pending == len(revs) - 2
        assert drift[short[4]]["error"].startswith("the database is stamped with 0 revisions")
        assert SECRET not in repr(drift)

        # each target costs its catalog and subscription reads (the PostgreSQL catalog: four bulk
        # queries), nothing per target besides (Alembic's stamp read was two more, a new engine's set-up more)
        checked = per_target[:4]
        assert len(set(checked)) == 1 and checked[0] <= 5, per_target
        assert per_target[4] == 0, per_target  # never upgraded: its stamp read says so, no catalog read


SAGA_AND_OUTBOX = """\
transport_version: "9.1"
engines: [sqlite, postgresql, mysql]
endpoints:
  - name: Sales
    outbox: true
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
"""


@pytest.mark.mysql
def test_a_worker_checks_mariadb_targets_one_after_the_other_on_their_own_connections(project, mysql_url):
    """The driver's connection, adopted by the check and closed with it, is closed once (pymysql
    refuses a second close): each target's row is its check's, the second drifted, the first not."""
    from .support.databases import mysql_database

    second = mysql_database()
    other = next(second)
    try:
        project.deploy(mysql_url, SAGA_AND_OUTBOX)
        project.upgrade(other)
        from sqltransport_schema.db import make_engine

        engine = make_engine(other)
        with engine.begin() as connection:
            connection.exec_driver_sql("DROP TABLE `Sales_OutboxData`")
        engine.dispose()
        worker = Migrations(Settings(config=str(project.ini), check=True))
        rows = [worker.status(Target(name, url)) for name, url in (("a", mysql_url), ("b", other), ("a2", mysql_url))]
        assert [r.error for r in rows] == [None, None, None]
        assert [r.drift for r in rows] == [
            {"in_sync": True, "counts": {}},
            {"in_sync": False, "counts": {"missing_table": 1}},
            {"in_sync": True, "counts": {}},
        ]
    finally:
        next(second, None)
