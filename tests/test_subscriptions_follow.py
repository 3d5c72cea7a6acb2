"""Subscriptions follow their queues: a migration that drops a queue deletes the subscription rows
naming its address in the drop's transaction (online, with --sql and in `script`); `check` reports
rows naming no table as drift, `status` lists them, and a publish to such a subscriber fails with
one error that says how to unsubscribe it."""

from __future__ import annotations

import json
import logging

import psycopg
import pytest

from sqltransport_schema import Transport, cli
from sqltransport_schema.runtime import wire
from sqltransport_schema.runtime.transport import SubscriberMissing

from .support import catalog
from .support.catalog import is_sqlite
from .support.messages import insert_message
from .support.topology import MIGRATIONS as TOPOLOGY

RETIRED = TOPOLOGY.replace("  - name: Billing\n    schema: billing\n    body_string: true\n", "")
HEADERS = {wire.ENCLOSED_MESSAGE_TYPES: "Shop.OrderPlaced"}


def _subscribe(url: str) -> None:
    """Billing subscribed under the spellings of its address subscribers write, and other rows."""
    transport = Transport.from_database(url, verify=False)
    subscriptions = transport.subscriptions()
    billing, sales = transport.queue("Billing").address, transport.queue("Sales").address
    with transport.engine.begin() as conn:
        subscriptions.subscribe(conn, "Billing", billing, "Shop.OrderPlaced")  # the runtime's own spelling
        subscriptions.subscribe(conn, "BillingBare", "Billing@billing", "Shop.OrderShipped")
        subscriptions.subscribe(conn, "BillingNet", "Billing@[billing]@[shop]", "Shop.OrderCancelled")  # .NET: with a catalog
        subscriptions.subscribe(conn, "Sales", sales, "Shop.OrderPlaced")
        subscriptions.subscribe(conn, "Elsewhere", "Billing@[other]", "Shop.Other")  # another schema
        subscriptions.subscribe(conn, "Archive", "BillingArchive@[billing]", "Shop.Other")
    transport.engine.dispose()


def _endpoints(url: str) -> list[str]:
    return sorted(row[0] for row in catalog.execute(url, _quoted(url, "SELECT Endpoint FROM {subs}")))


def _quoted(url: str, text: str) -> str:
    return text.format(subs='"SubscriptionRouting"' if is_sqlite(url) else '"public"."SubscriptionRouting"')


def _deployed(project, url: str) -> str:
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(url)
    _subscribe(url)
    project.write_topology(RETIRED)
    project.compile("retire Billing")
    return project.revisions()[-1].read_text()


def test_a_retired_endpoints_subscriptions_go_with_its_queue(project, db_url, caplog):
    revision = _deployed(project, db_url)
    drop = 'op.drop_queue("Billing", schema="billing", version="9.1", body_string=True, seq_type="serial", '
    assert drop + 'subscriptions="SubscriptionRouting")' in revision
    with caplog.at_level(logging.INFO, logger="sqltransport_schema.migrate"):
        project.upgrade(db_url)
    kept = ["Archive", "Sales"] if is_sqlite(db_url) else ["Archive", "Elsewhere", "Sales"]  # SQLite: one namespace
    assert _endpoints(db_url) == kept
    where = '"Billing"' if is_sqlite(db_url) else '"billing"."Billing"'
    subs = '"SubscriptionRouting"' if is_sqlite(db_url) else '"public"."SubscriptionRouting"'
    assert f"deleted {6 - len(kept)} subscription row(s) naming {where} from {subs}" in caplog.text

    transport = Transport.from_database(db_url)
    with transport.engine.begin() as conn:  # its topics publish to the subscribers that are left
        assert transport.publish(conn, "Shop.OrderPlaced", b"{}", HEADERS) == [transport.queue("Sales").address]
        assert transport.publish(conn, ["Shop.OrderShipped", "Shop.OrderCancelled"], b"{}", HEADERS) == []
    transport.engine.dispose()


def test_a_refused_drop_keeps_the_subscriptions(project, db_url):
    """The DELETE runs in the drop's transaction: a drop refused (the queue holds messages) deletes nothing."""
    _deployed(project, db_url)
    insert_message(db_url, "Billing", schema="billing")
    with pytest.raises(Exception, match="refusing to drop queue"):
        project.upgrade(db_url)
    assert len(_endpoints(db_url)) == 6


def test_a_downgrade_that_drops_a_queue_deletes_its_subscriptions(project, sqlite_url):
    project.write_topology(RETIRED)
    project.compile("initial")
    first = project.head()
    project.write_topology(TOPOLOGY)
    project.compile("add Billing")
    assert 'subscriptions="SubscriptionRouting")' in project.revisions()[-1].read_text().split("def downgrade")[1]
    project.upgrade(sqlite_url)
    _subscribe(sqlite_url)
    project.downgrade(sqlite_url, first)
    assert _endpoints(sqlite_url) == ["Archive", "Sales"]


def test_the_offline_script_deletes_them_guarded_postgresql(project, pg_url):
    _deployed(project, pg_url)
    first = project.revisions()[0].name.split("_")[1]
    script = project.offline("postgresql://", f"{first}:head")
    assert '-- Delete the subscription rows naming "billing"."Billing"' in script
    assert "IF to_regclass('\"public\".\"SubscriptionRouting\"') IS NOT NULL THEN" in script
    assert "split_part(QueueAddress, '@', 2) = ANY(ARRAY['[billing]', 'billing']::text[])" in script
    with psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql")) as connection:
        connection.execute(script)
    assert _endpoints(pg_url) == ["Archive", "Elsewhere", "Sales"]

    # run again where the subscription table is gone: the guard skips the DELETE
    catalog.execute(pg_url, 'DROP TABLE "public"."SubscriptionRouting"', "DELETE FROM alembic_version")
    catalog.execute(pg_url, f"INSERT INTO alembic_version VALUES ('{first}')")
    with psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql")) as connection:
        connection.execute(script)


def test_the_sql_server_script_deletes_them_guarded(project, capsys):
    project.write_topology(TOPOLOGY.replace("transport_version", "engines: [mssql]\ntransport_version"))
    project.compile("initial")
    project.write_topology(RETIRED.replace("transport_version", "engines: [mssql]\ntransport_version"))
    project.compile("retire Billing")
    capsys.readouterr()
    assert cli.main(["script", "--engine", "mssql", "-c", str(project.ini)]) == 0
    script = capsys.readouterr().out
    delete = script[script.index("-- Delete the subscription rows naming [billing].[Billing]") :]
    # the addresses as N'...' literal lists: no OPENJSON (SQL Server 2016) in a script (docs/sql-server-versions.md)
    assert delete.startswith(
        "-- Delete the subscription rows naming [billing].[Billing]\n\n"
        "SET LOCK_TIMEOUT 2000;\n"  # as every statement of the script that locks a table
        "IF OBJECT_ID(N'[dbo].[SubscriptionRouting]', N'U') IS NOT NULL\n"
        "DELETE FROM [dbo].[SubscriptionRouting]\n"
        "WHERE QueueAddress IN (N'Billing@[billing]', N'Billing@billing')\n"
        "    OR QueueAddress IN (N'Billing@[billing]' + N'@' + QUOTENAME(DB_NAME()), N'Billing@billing' + N'@' + QUOTENAME(DB_NAME()));\n"
    ), delete[:800]
    assert script.index("DROP TABLE [billing].[Billing]") < script.index("-- Delete the subscription rows naming")


def test_check_status_and_publish_name_a_leftover_subscription(project, db_url, capsys):
    """A row whose address names no table (left by a hand-made drop, or a revision compiled before
    subscriptions followed their queues): drift for check, listed by status, one error on publish."""
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.upgrade(db_url)
    transport = Transport.from_database(db_url)
    gone = transport.address_of(transport.name("Gone"))
    with transport.engine.begin() as conn:
        transport.subscriptions().subscribe(conn, "Sales", transport.queue("Sales").address, "Shop.OrderPlaced")
        transport.subscriptions().subscribe(conn, "Gone", gone, "Shop.OrderPlaced")
    ini = ["-c", str(project.ini)]
    capsys.readouterr()

    assert cli.main(["check", "--url", db_url, *ini]) == 1
    text = capsys.readouterr().out
    table = "SubscriptionRouting" if is_sqlite(db_url) else "public.SubscriptionRouting"
    assert f"drift: orphaned_subscription: {table}: {gone} (endpoint Gone, topic Shop.OrderPlaced) names no table" in text
    assert "unsubscribe each with Subscriptions.unsubscribe(connection, endpoint, topic)" in text
    assert cli.main(["check", "--url", db_url, "--format", "json", *ini]) == 1
    [finding] = json.loads(capsys.readouterr().out)["findings"]
    assert (finding["category"], finding["severity"]) == ("orphaned_subscription", "drift")
    assert cli.main(["check", "--url", db_url, "--format", "markdown", *ini]) == 1
    assert f"| drift | orphaned_subscription | {table} | {gone} (endpoint Gone" in capsys.readouterr().out

    assert cli.main(["status", "--url", db_url, *ini]) == 0  # a finding to list, not a missing table
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("1 subscription(s) name no table (publishing their topics fails); unsubscribe each with")
    assert lines[-1] == f"  {gone} (endpoint Gone, topic Shop.OrderPlaced) names no table in the database"
    assert cli.main(["status", "--url", db_url, "--format", "json", *ini]) == 0
    assert json.loads(capsys.readouterr().out)["orphaned_subscriptions"] == [
        {"endpoint": "Gone", "topic": "Shop.OrderPlaced", "address": gone, "problem": "names no table in the database"}
    ]
    assert cli.main(["status", "--url", db_url, "--format", "markdown", *ini]) == 0
    assert f"| {gone} | Gone | Shop.OrderPlaced | names no table in the database |" in capsys.readouterr().out
    assert cli.main(["status", "--url", db_url, "--format", "prometheus", *ini]) == 0
    assert f'sqltransport_orphaned_subscription{{address="{gone}",endpoint="Gone",topic="Shop.OrderPlaced"}} 1.0' in capsys.readouterr().out

    with pytest.raises(SubscriberMissing) as missing, transport.engine.begin() as conn:
        transport.publish(conn, "Shop.OrderPlaced", b"{}", HEADERS)
    where = '"Gone"' if is_sqlite(db_url) else '"public"."Gone"'
    assert str(missing.value).startswith(
        f"publish of Shop.OrderPlaced failed: subscriber {gone} has no table ({where} does not exist; its endpoint was retired "
        "or its queue dropped). Unsubscribe it: Subscriptions.unsubscribe(connection, endpoint, topic) for each row of "
    )
    assert missing.value.address == gone

    with transport.engine.begin() as conn:  # as the error says
        transport.subscriptions().unsubscribe(conn, "Gone", "Shop.OrderPlaced")
        assert transport.publish(conn, "Shop.OrderPlaced", b"{}", HEADERS) == [transport.queue("Sales").address]
    transport.engine.dispose()
    assert cli.main(["check", "--url", db_url, *ini]) == 0


def test_a_revision_that_drops_the_subscription_table_too_deletes_no_rows_first(project, sqlite_url):
    """Lowered below 5.0 with an endpoint retired: the subscription table goes with every row, so the
    queue's drop names none (an offline SQLite script, which cannot guard, would fail on it)."""
    engines = "engines: [mssql, sqlite]\n"
    project.write_topology(engines + TOPOLOGY)
    project.compile("initial")
    project.upgrade(sqlite_url)
    project.write_topology(engines + RETIRED.replace('"9.1"', '"4.0"'))
    assert project.compile("back to 4.0 without Billing", "--allow-downgrade") == 0
    revision = project.revisions()[-1].read_text()
    assert 'op.drop_queue("Billing", schema="billing"' in revision and "subscriptions=" not in revision
    assert "DELETE FROM" not in project.offline("sqlite://")
    project.upgrade(sqlite_url)


def test_compile_check_holds_a_drops_subscriptions_to_the_table_the_revision_keeps(project, capsys):
    project.write_topology(TOPOLOGY)
    project.compile("initial")
    project.write_topology(RETIRED)
    project.compile("retire Billing")
    assert project.compile("nothing", "--check") == 0
    revision = project.revisions()[-1]
    text = revision.read_text()
    revision.write_text(text.replace('subscriptions="SubscriptionRouting")', 'subscriptions="Other@[public]")', 1))
    capsys.readouterr()
    assert project.compile("nothing", "--check") == 2
    err = capsys.readouterr().err
    assert revision.name in err and "edited by hand" in err
    assert 'subscriptions="Other@[public]", but the subscription table the revision keeps is "SubscriptionRouting"' in err
    # a revision compiled before drops took their subscriptions along names none: not an edit
    revision.write_text(text.replace(', subscriptions="SubscriptionRouting")', ")"))
    assert project.compile("nothing", "--check") == 0
