"""Compiled revisions run by real Alembic against real SQLite and PostgreSQL databases."""

from __future__ import annotations

import pytest

from .support import catalog
from .support.catalog import is_sqlite, key
from .support.messages import insert_message
from .support.topology import MIGRATIONS as TOPOLOGY

SQLITE_QUEUE = {
    "Id": ("TEXT", False),
    "CorrelationId": ("TEXT", True),
    "ReplyToAddress": ("TEXT", True),
    "Recoverable": ("INTEGER", False),
    "Expires": ("DATETIME", True),
    "Headers": ("TEXT", False),
    "Body": ("BLOB", True),
    "RowVersion": ("INTEGER", False),
}
PG_QUEUE = {
    "id": ("UUID", False),
    "expires": ("TIMESTAMP WITHOUT TIME ZONE", True),
    "headers": ("TEXT", False),
    "body": ("BYTEA", True),
    "seq": ("INTEGER SERIAL", False),
}


def test_upgrade_creates_every_table_column_and_index(project, db_url):
    project.deploy(db_url, TOPOLOGY)
    tables = catalog.read(db_url)

    expected = {
        key(db_url, "Sales"),
        key(db_url, "Sales.host-a"),
        key(db_url, "Billing", "billing"),
        key(db_url, "error"),
        key(db_url, "Sales.Delayed"),
        key(db_url, "Billing.Delayed", "billing"),
        key(db_url, "SubscriptionRouting"),
    }
    assert set(tables) == expected  # the send-only endpoint owns nothing

    if is_sqlite(db_url):
        assert tables[key(db_url, "Sales")].columns == SQLITE_QUEUE
        assert tables[key(db_url, "Billing")].columns == {**SQLITE_QUEUE, "BodyString": ("TEXT", True)}
        index = tables[key(db_url, "Sales")].indexes["Sales_Expires"]
        assert "(Expires) WHERE Expires IS NOT NULL" in index
        assert tables[key(db_url, "Sales.Delayed")].columns == {
            "Headers": ("TEXT", False),
            "Body": ("BLOB", True),
            "Due": ("DATETIME", False),
            "RowVersion": ("INTEGER", False),
        }
        assert "(Due)" in tables[key(db_url, "Sales.Delayed")].indexes["Sales.Delayed_Due"]
        # Billing's body_string covers its delayed table too, as the transport's option does
        assert tables[key(db_url, "Billing.Delayed", "billing")].columns == {
            **tables[key(db_url, "Sales.Delayed")].columns,
            "BodyString": ("TEXT", True),
        }
        assert tables[key(db_url, "SubscriptionRouting")].columns == {
            "QueueAddress": ("TEXT", False),
            "Endpoint": ("TEXT", False),
            "Topic": ("TEXT", False),
        }
    else:
        for name, schema in (("Sales", None), ("Sales.host-a", None), ("Billing", "billing"), ("error", None)):
            info = tables[key(db_url, name, schema)]
            # Billing has body_string: true, added as the PostgreSQL transport's installer adds it
            assert info.columns == ({**PG_QUEUE, "bodystring": ("TEXT", True)} if name == "Billing" else PG_QUEUE), name
            definitions = " | ".join(info.indexes.values())
            assert "UNIQUE INDEX" in definitions and "(seq)" in definitions
            assert "USING btree (id)" in definitions
        delayed = tables[key(db_url, "Sales.Delayed")]
        assert delayed.columns == {
            "id": ("UUID", False),
            "headers": ("TEXT", False),
            "body": ("BYTEA", True),
            "due": ("TIMESTAMP WITH TIME ZONE", False),
        }
        assert delayed.indexes["Sales.Delayed_Due"].endswith("USING btree (due)")
        billing_delayed = tables[key(db_url, "Billing.Delayed", "billing")]
        assert billing_delayed.columns == {**delayed.columns, "bodystring": ("TEXT", True)}
        subscriptions = tables[key(db_url, "SubscriptionRouting")]
        assert subscriptions.columns == {
            "queueaddress": ("CHARACTER VARYING", False),
            "endpoint": ("CHARACTER VARYING", False),
            "topic": ("CHARACTER VARYING", False),
        }
        assert any("(endpoint, topic)" in d for d in subscriptions.indexes.values())


def test_downgrade_to_base_and_upgrade_again(project, db_url):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(db_url)
    assert len(catalog.read(db_url)) == 7
    project.downgrade(db_url, "base", "drop_protected=error")
    assert catalog.read(db_url) == {}
    if not is_sqlite(db_url):
        assert "billing" not in catalog.schemas(db_url)  # the schema it created is gone too
    project.upgrade(db_url)
    assert len(catalog.read(db_url)) == 7


def test_dropping_a_queue_that_holds_messages_is_refused_by_the_database(project, db_url):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    first = project.head()
    project.write_topology(TOPOLOGY.replace("queues:\n  - name: error\n", "queues: []\n") + "drop_protected:\n  - name: error\n")
    assert project.compile("retire error queue") == 0
    revision = project.revisions()[-1].read_text()
    drop = 'op.drop_queue("error", version="9.1", body_string=False, seq_type="serial", allow_protected=True'
    assert drop + ', subscriptions="SubscriptionRouting")' in revision
    assert "discard_messages" not in revision

    project.upgrade(db_url, first)
    insert_message(db_url, "error")
    with pytest.raises(Exception) as refused:
        project.upgrade(db_url)
    assert "refusing to drop queue" in str(refused.value) and "error" in str(refused.value)
    tables = catalog.read(db_url)
    assert tables[key(db_url, "error")].rows == 1  # nothing was lost, nothing half-applied
    assert catalog.execute(db_url, "SELECT version_num FROM alembic_version") == [(first,)]

    # Emptied, the same revision passes.
    quoted = '"error"' if is_sqlite(db_url) else '"public"."error"'
    catalog.execute(db_url, f"DELETE FROM {quoted}")
    project.upgrade(db_url)
    assert key(db_url, "error") not in catalog.read(db_url)


def test_discarded_queue_is_dropped_with_its_messages(project, db_url):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(db_url)
    insert_message(db_url, "Sales.host-a")
    project.write_topology(TOPOLOGY.replace("    instances: [host-a]\n", "") + "discard:\n  - name: Sales.host-a\n")
    project.compile("retire host-a")
    assert (
        'op.drop_queue("Sales.host-a", version="9.1", body_string=False, seq_type="serial", discard_messages=True, '
        'subscriptions="SubscriptionRouting")' in project.revisions()[-1].read_text()
    )
    project.upgrade(db_url)
    assert key(db_url, "Sales.host-a") not in catalog.read(db_url)


def test_downgrade_refuses_to_drop_queues_with_messages_unless_told(project, db_url):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(db_url)
    insert_message(db_url, "Sales")
    with pytest.raises(Exception, match="refusing to drop queue"):
        project.downgrade(db_url, "base", "drop_protected=error")
    assert catalog.read(db_url)[key(db_url, "Sales")].rows == 1
    project.downgrade(db_url, "base", "discard_messages=true", "drop_protected=error")
    assert catalog.read(db_url) == {}


def test_compile_never_drops_a_protected_queue_without_its_override(project, capsys):
    project.write_topology(TOPOLOGY.replace("  - name: error\n", "  - name: error\n  - name: Archive\n    protected: true\n"))
    assert project.compile("initial") == 0
    capsys.readouterr()
    for removed in ("  - name: error\n", "  - name: Archive\n    protected: true\n"):
        project.write_topology(
            TOPOLOGY.replace("  - name: error\n", "  - name: error\n  - name: Archive\n    protected: true\n").replace(removed, "")
        )
        assert project.compile("drop it") == 2
        err = capsys.readouterr().err
        name = "error" if "error" in removed else "Archive"
        assert f'queue "{name}" is protected' in err and f"- {{name: {name}}}` under drop_protected:" in err
    assert len(project.revisions()) == 1  # nothing written

    # Turning a protected queue into an unprotected one is a change of its own; then it may go.
    project.write_topology(TOPOLOGY.replace("  - name: error\n", "  - name: error\n  - name: Archive\n    protected: false\n"))
    assert project.compile("unprotect Archive") == 0
    assert project.compile("nothing") == 0 and len(project.revisions()) == 2
    project.write_topology(TOPOLOGY)
    assert project.compile("drop Archive") == 0
    revision = project.revisions()[-1].read_text()
    assert 'op.drop_queue("Archive", version="9.1", body_string=False, seq_type="serial", subscriptions="SubscriptionRouting")' in revision


def test_downgrade_stops_before_dropping_a_protected_queue(project, db_url):
    project.write_topology(TOPOLOGY.replace("  - name: error\n", "  - name: error\n  - name: Archive\n    protected: true\n"))
    project.compile("initial")
    assert "protected=True" in project.revisions()[-1].read_text()
    project.upgrade(db_url)
    for allowed in ("", "error", "Archive"):
        with pytest.raises(Exception, match="refusing to drop protected queue") as refused:
            project.downgrade(db_url, "base", f"drop_protected={allowed}")
        assert "-x drop_protected=" in str(refused.value)
        assert len(catalog.read(db_url)) == 8  # rolled back whole
    project.downgrade(db_url, "base", "drop_protected=error,Archive")
    assert catalog.read(db_url) == {}


HOSTILE = [
    "Sales.v2",
    "with space",
    "close]bracket",
    'double"quote',
    "single'quote",
    "semi;colon",
    "Fäktura",
    "Заказы",
    "50%off %s %(x)s",
    "colon:name ?",
    'x"; DROP TABLE sentinel; --',
    "x'); DROP TABLE sentinel; --",
]


def test_hostile_names_are_quoted_not_run(project, db_url):
    queues = "".join("  - name: '" + name.replace("'", "''") + "'\n" for name in HOSTILE)
    project.write_topology('transport_version: "9.1"\nsubscriptions: false\nqueues:\n' + queues)
    assert project.compile("hostile") == 0
    catalog.execute(db_url, "CREATE TABLE sentinel (x INTEGER)")
    project.upgrade(db_url)
    tables = catalog.read(db_url)
    for name in HOSTILE:
        assert key(db_url, name) in tables, name
    assert key(db_url, "sentinel") in tables
    # and they are removed again, each by its exact name
    project.downgrade(db_url, "base")  # (none of them is error or audit: none is protected)
    assert set(catalog.read(db_url)) == {key(db_url, "sentinel")}


def test_existing_transport_tables_are_adopted_not_recreated(project, pg_url):
    """Tables an NServiceBus installer made already, with messages in them, survive `upgrade head`."""
    db_url = pg_url
    catalog.execute(
        db_url,
        'CREATE TABLE IF NOT EXISTS "public"."Sales" (Id uuid NOT NULL PRIMARY KEY, Expires TIMESTAMP, '
        "Headers TEXT NOT NULL, Body BYTEA, Seq serial NOT NULL UNIQUE)",
    )
    message_id = insert_message(db_url, "Sales")
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(db_url)
    rows = catalog.execute(db_url, 'SELECT id::text FROM "public"."Sales"')
    assert rows == [(message_id,)]


def test_offline_postgresql_script_runs_on_a_real_database(project, pg_url):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    script = project.offline("postgresql://")
    assert '-- Create queue "public"."Sales" (transport 9.1)' in script
    import psycopg

    with psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql")) as connection:
        connection.execute(script)
    assert len(catalog.read(pg_url)) == 7


def test_a_stranger_table_with_a_queue_name_is_refused_not_adopted(project, db_url):
    """IF NOT EXISTS alone would silently keep a table that is no queue; the upgrade refuses instead."""
    quoted = '"Sales"' if is_sqlite(db_url) else '"public"."Sales"'
    catalog.execute(db_url, f"CREATE TABLE {quoted} (Id INTEGER, Note TEXT)", f"INSERT INTO {quoted} VALUES (1, 'mine')")
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    with pytest.raises(Exception, match=r"already exists but lacks the column\(s\) .*headers"):
        project.upgrade(db_url)
    tables = catalog.read(db_url)
    assert set(tables) == {key(db_url, "Sales")}  # nothing else was created: the run rolled back
    assert tables[key(db_url, "Sales")].rows == 1
