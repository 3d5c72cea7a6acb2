"""Saga tables that SQL persistence's installer made, on real PostgreSQL, MariaDB and SQLite:
adopted, upgraded and used without a second index, a wrong column type refused as the
installer refuses it, sagas without a correlation property, and the runtime's row locks.

The installer's DDL is written here from upstream-conformance.md §7 (what its script leaves:
names, types, nullability, charset). SQL persistence has no SQLite dialect: there the stand-in
is the installer's steps with this project's SQLite types and index name.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
import sqlalchemy as sa
from alembic import command

from sqltransport_schema import cli
from sqltransport_schema.runtime.sagas import SagaTable

from .support.databases import connect

ENGINES = "engines: [sqlite, postgresql, mysql]\n"
ORDER = "      - name: OrderSaga\n        correlation: {name: OrderId, type: string}\n"
TRANSITIONAL = "        transitional: {name: OrderNumber, type: int}\n"


def topology(sagas: str) -> str:
    return 'transport_version: "9.1"\n' + ENGINES + "endpoints:\n  - name: Sales\n    sagas:\n" + sagas


def pg_index(prop: str) -> str:
    """The installer's name: prefix, _i_, SHA-1 of '<suffix>/<property>' in upper-case hex."""
    return "Sales__i_" + hashlib.sha1(f"OrderSaga/{prop}".encode()).hexdigest().upper()


PG_TYPES = {"OrderId": "character varying(200)", "OrderNumber": "integer"}
MYSQL_TYPES = {"OrderId": "varchar(200) character set utf8mb4", "OrderNumber": "bigint(20)"}
SQLITE_TYPES = {"OrderId": "TEXT", "OrderNumber": "INTEGER"}


def installer_ddl(url: str, props: dict[str, str]) -> list[str]:
    """What SQL persistence's installer script runs for saga OrderSaga of endpoint Sales (prefix Sales_)."""
    if url.startswith("postgresql"):
        table = '"public"."Sales_OrderSaga"'
        out = [
            f'create table if not exists {table} ("Id" uuid not null, "Metadata" text not null, "Data" jsonb not null, '
            '"PersistenceVersion" character varying(23), "SagaTypeVersion" character varying(23), '
            '"Concurrency" int not null, primary key("Id"))'
        ]
        for prop, type_ in props.items():
            out.append(f'alter table {table} add column if not exists "Correlation_{prop}" {type_}')
            out.append(f'create unique index if not exists "{pg_index(prop)}" on {table} using btree ("Correlation_{prop}" asc)')
        return out
    if url.startswith("mysql"):
        out = [
            "create table if not exists `Sales_OrderSaga`(Id varchar(38) not null, Metadata json not null, Data json not null, "
            "PersistenceVersion varchar(23) not null, SagaTypeVersion varchar(23) not null, Concurrency int not null, "
            "primary key (Id)) default charset=ascii"
        ]
        for prop, type_ in props.items():
            out.append(f"alter table `Sales_OrderSaga` add column Correlation_{prop} {type_}")
            out.append(f"create unique index Index_Correlation_{prop} on `Sales_OrderSaga`(Correlation_{prop})")
        return out
    out = [
        'create table if not exists "Sales_OrderSaga" (Id TEXT not null primary key, Metadata TEXT not null, Data TEXT not null, '
        "PersistenceVersion TEXT not null, SagaTypeVersion TEXT not null, Concurrency INTEGER not null)"
    ]
    for prop, type_ in props.items():
        out.append(f'alter table "Sales_OrderSaga" add column Correlation_{prop} {type_}')
        out.append(
            f'create unique index "Sales_OrderSaga_Index_Correlation_{prop}" on "Sales_OrderSaga"(Correlation_{prop}) '
            f"where Correlation_{prop} is not null"
        )
    return out


def run_sql(url: str, statements: list[str]) -> None:
    db = connect(url)
    try:
        with db.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        db.dispose()


def unique_indexes(url: str) -> dict[str, list[str]]:
    """Correlation column -> names of the unique indexes on it alone."""
    db = connect(url)
    try:
        out: dict[str, list[str]] = {}
        for index in sa.inspect(db).get_indexes("Sales_OrderSaga"):
            columns = index["column_names"]
            if index["unique"] and len(columns) == 1 and columns[0].lower().startswith("correlation_"):
                out.setdefault(columns[0].lower(), []).append(index["name"])
        return out
    finally:
        db.dispose()


def installer_index(url: str, prop: str) -> str:
    if url.startswith("postgresql"):
        return pg_index(prop)
    return f"Index_Correlation_{prop}" if url.startswith("mysql") else f"Sales_OrderSaga_Index_Correlation_{prop}"


def adopt(project, url, capsys, *extra) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli.main(["adopt", "--url", url, "-c", str(project.ini), "--format", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_an_installer_made_saga_table_is_adopted_and_upgraded_without_a_second_index(project, saga_db, capsys):
    url = saga_db
    run_sql(
        url,
        installer_ddl(
            url,
            {
                "OrderId": (PG_TYPES if url.startswith("postgresql") else MYSQL_TYPES if url.startswith("mysql") else SQLITE_TYPES)[
                    "OrderId"
                ]
            },
        ),
    )
    project.write_topology(topology(ORDER))
    assert project.compile("sagas") == 0
    code, report = adopt(project, url, capsys, "--apply")  # the endpoint's queue tables are created with it
    (saga,) = [t for t in report["tables"] if t["kind"] == "saga"]
    assert saga["status"] == "matches", report
    assert not [step for step in report["plan"] if "saga" in step], report
    assert code == 0, report
    db = connect(url)
    orders = SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))
    saga_id = str(uuid.uuid4())
    with db.begin() as conn:
        orders.insert(conn, saga_id, '{"OrderId": "o-1"}', "o-1", persistence_version="8.1.0")
    # the next release adds a transitional property: one index per column, under the installer's name
    project.deploy(url, topology(ORDER + TRANSITIONAL), "transitional")
    types = PG_TYPES if url.startswith("postgresql") else MYSQL_TYPES if url.startswith("mysql") else SQLITE_TYPES
    if url.startswith("postgresql"):  # the endpoint's installer runs again at its next start (IF NOT EXISTS, by name)
        run_sql(url, installer_ddl(url, types))
    found = unique_indexes(url)
    assert found == {f"correlation_{p.lower()}": [installer_index(url, p)] for p in ("OrderId", "OrderNumber")}, found
    orders = SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))
    with db.begin() as conn:
        saga = orders.find(conn, "o-1")
        assert (saga.id, saga.concurrency, saga.persistence_version) == (saga_id, 1, None)
        assert orders.update(conn, saga, '{"OrderId": "o-1", "OrderNumber": 7}', transitional_value=7).concurrency == 2
    with db.begin() as conn:
        assert orders.find(conn, "o-2", transitional_value=7).id == saga_id  # this project's addition
    db.dispose()


@pytest.mark.parametrize("saga_db", ["postgresql", "mysql"], indirect=True)
def test_a_correlation_column_of_another_type_is_refused_as_the_installer_refuses_it(project, saga_db):
    url = saga_db
    wrong = "integer" if url.startswith("postgresql") else "varchar(38) character set ascii"
    run_sql(url, installer_ddl(url, {"OrderId": wrong}))
    project.write_topology(topology(ORDER))
    assert project.compile("sagas") == 0
    with pytest.raises(Exception) as exc:
        project.upgrade(url)
    text = str(exc.value)
    assert "Correlation_OrderId" in text and (
        "exists with type integer" in text if url.startswith("postgresql") else "is varchar(38) character set ascii" in text
    )
    assert unique_indexes(url) == {"correlation_orderid": [installer_index(url, "OrderId")]}  # left as it was


def test_a_saga_without_a_correlation_property_is_found_by_id(project, saga_db):
    url = saga_db
    project.deploy(url, topology("      - name: OrderSaga\n"), "sagas")
    db = connect(url)
    columns = {c["name"].lower() for c in sa.inspect(db).get_columns("Sales_OrderSaga")}
    assert columns == {"id", "metadata", "data", "persistenceversion", "sagatypeversion", "concurrency"}
    orders = SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))
    assert "find_saga" not in orders.statements
    saga_id = str(uuid.uuid4())
    with db.begin() as conn:
        orders.insert(conn, saga_id, "{}")
        saga = orders.get(conn, saga_id)
        assert orders.update(conn, saga, '{"n": 1}') is not None
    with db.begin() as conn:
        assert orders.complete(conn, orders.get(conn, saga_id))
    with pytest.raises(LookupError):
        orders.find(db.connect(), "x")
    db.dispose()


def test_lookups_lock_the_saga_row_as_sql_persistence_does(project, pg_url):
    project.deploy(pg_url, topology(ORDER), "sagas")
    db = connect(pg_url)
    orders = SagaTable.from_database(db, "Sales_OrderSaga", config_file=str(project.ini))
    saga_id = str(uuid.uuid4())
    with db.begin() as conn:
        orders.insert(conn, saga_id, "{}", "o-1")
    with db.begin() as holder:
        assert orders.find(holder, "o-1").id == saga_id  # FOR UPDATE: held until this transaction ends
        with db.connect() as other:
            other.exec_driver_sql("SET lock_timeout = '200ms'")
            with pytest.raises(Exception, match="lock timeout"):  # the driver's LockNotAvailable
                orders.get(other, saga_id)
            other.rollback()
    db.dispose()


def earlier_index_name(url: str, prop: str) -> str:
    """The name an earlier release of this project gave the index (PostgreSQL: docs/sagas.md)."""
    if url.startswith("postgresql"):
        return "Sales_" + "_i_" + hashlib.sha1(f"Sales_OrderSaga\0{prop}".encode()).hexdigest()
    return f"Sales_OrderSaga_{prop}_unique"


def rename_to_earlier(url: str, old: str, new: str) -> None:
    if url.startswith("postgresql"):
        run_sql(url, [f'ALTER INDEX "public"."{new}" RENAME TO "{old}"'])
    else:
        run_sql(url, [f"ALTER TABLE `Sales_OrderSaga` RENAME INDEX `{new}` TO `{old}`"])


@pytest.mark.parametrize("saga_db", ["postgresql", "mysql"], indirect=True)
def test_autogenerate_renames_a_saga_index_an_earlier_release_named_otherwise(project, saga_db, capsys):
    """A database this project deployed before it used the installer's index names: the autogenerated
    revision renames the index in place, so the endpoint's installer finds it by name and adds no second one."""
    url = saga_db
    project.deploy(url, topology(ORDER), "sagas")
    old, new = earlier_index_name(url, "OrderId"), installer_index(url, "OrderId")
    rename_to_earlier(url, old, new)
    capsys.readouterr()
    assert cli.main(["check", "--url", url, "-c", str(project.ini)]) == 1
    assert f"is named {old}" in capsys.readouterr().out

    script = command.revision(project.config(url), message="installer index names", autogenerate=True)
    text = open(script.path, encoding="utf-8").read()
    upgrade, downgrade = text[text.index("def upgrade") : text.index("def downgrade")], text[text.index("def downgrade") :]
    assert f'op.rename_index("Sales_OrderSaga", old="{old}", new="{new}")' in upgrade, upgrade
    assert f'op.rename_index("Sales_OrderSaga", old="{new}", new="{old}")' in downgrade, downgrade
    assert "transport drift" not in text
    project.upgrade(url)
    assert unique_indexes(url) == {"correlation_orderid": [new]}
    if url.startswith("postgresql"):  # the endpoint's installer, at its next start: IF NOT EXISTS, by name
        run_sql(url, installer_ddl(url, {"OrderId": PG_TYPES["OrderId"]}))
        assert unique_indexes(url) == {"correlation_orderid": [new]}
    capsys.readouterr()
    assert cli.main(["check", "--url", url, "-c", str(project.ini)]) == 0, capsys.readouterr().out


def test_adopt_renames_the_index_of_an_unmanaged_database(project, pg_url, capsys):
    """The same tables without a stamp (alembic_version dropped): adopt plans the rename and applies it."""
    project.deploy(pg_url, topology(ORDER), "sagas")
    old, new = earlier_index_name(pg_url, "OrderId"), installer_index(pg_url, "OrderId")
    rename_to_earlier(pg_url, old, new)
    run_sql(pg_url, ["DROP TABLE alembic_version"])
    code, report = adopt(project, pg_url, capsys, "--dry-run")
    (saga,) = [t for t in report["tables"] if t["kind"] == "saga"]
    assert saga["status"] == "other_shape" and saga["renamed_indexes"] == [{"from": old, "to": new}], report
    assert [step for step in report["plan"] if "rename" in step] == [f'rename index {old} of "public"."Sales_OrderSaga" to {new}']
    assert unique_indexes(pg_url) == {"correlation_orderid": [old]}  # a dry run changes nothing
    code, report = adopt(project, pg_url, capsys, "--apply")
    assert code == 0 and unique_indexes(pg_url) == {"correlation_orderid": [new]}, report
