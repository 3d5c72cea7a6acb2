"""pipeline plan / run: the moves a compiled revision implies, performed so that its guarded drop passes."""

from __future__ import annotations

import json
import shlex

import pytest

from sqltransport_schema import cli
from sqltransport_schema.pipeline import plan as planning
from sqltransport_schema.schema import Blueprint, Kind, TableName, TableSpec

from .support.pipeline import fill_queue, queue_contents

BEFORE = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a, host-b]
  - name: Billing
queues:
  - name: error
"""
AFTER = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a]
  - name: Invoicing
queues:
  - name: error
"""


def _bp(*tables, discarded=()):
    return Blueprint("9.1", ("postgresql",), tuple(tables), frozenset(discarded))


def q(name, schema=None):
    return TableSpec(Kind.QUEUE, TableName(name, schema))


def d(name, schema=None):
    return TableSpec(Kind.DELAYED, TableName(name, schema))


def test_derive_rules():
    old = _bp(q("Sales"), q("Sales.host-b"), q("Billing"), q("Audit"), q("Shipping"), d("Sales.Delayed"), d("Billing.Delayed"), q("Gone"))
    new = _bp(q("Sales"), q("Invoicing"), q("Audit", "archive"), d("Sales.Delayed"), d("Invoicing.Delayed"), discarded=[TableName("Gone")])
    moves, unresolved, discarded = planning.derive(old, new, "postgresql", {"Billing@[public]": "Invoicing@[public]"})
    assert [m.describe() for m in moves] == [
        "queue Sales.host-b@[public] -> Sales@[public] (instance queue retired)",
        "queue Billing@[public] -> Invoicing@[public] (mapped)",
        "queue Audit@[public] -> Audit@[archive] (queue moved)",
        "delayed Billing.Delayed@[public] -> Invoicing.Delayed@[public] (follows its endpoint)",
    ]
    assert unresolved == [
        "queue Shipping@[public] is removed and holds no declared destination: pass --map OLD=NEW, or list it under discard:"
    ]
    assert discarded == ["Gone@[public]"]


@pytest.mark.parametrize("with_spark", [True, False])
def test_plan_then_run_lets_the_guarded_drop_pass(request, project, pg_url, capsys, with_spark):
    project.deploy(pg_url, BEFORE, "before")
    fill_queue(pg_url, TableName("Sales.host-b", "public"), 300, seed=31)
    fill_queue(pg_url, TableName("Billing", "public"), 20, seed=32)
    from sqltransport_schema.pipeline.connect import dbapi_connect

    conn = dbapi_connect(pg_url)
    conn.execute(
        'INSERT INTO "public"."SubscriptionRouting" (QueueAddress, Endpoint, Topic) VALUES '
        "('Billing@[public]', 'Billing', 'Shop.OrderPlaced'), ('Sales@[public]', 'Sales', 'Shop.Invoiced')"
    )
    conn.commit()
    conn.close()
    host_b = queue_contents(pg_url, TableName("Sales.host-b", "public"))
    billing = queue_contents(pg_url, TableName("Billing", "public"))
    project.write_topology(AFTER)
    assert project.compile("after") == 0
    with pytest.raises(Exception, match="refusing to drop queue"):
        project.upgrade(pg_url)

    base = ["-c", str(project.ini), "--url", pg_url]
    capsys.readouterr()
    assert cli.main(["pipeline", "plan", *base, "--format", "json"]) == 2 - 1  # unresolved: Billing has no destination
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "unresolved" and len(report["moves"]) == 1
    assert cli.main(["pipeline", "run", *base]) == 2  # refuses to move anything while unresolved

    mapped = base + ["--map", "Billing=Invoicing"]
    assert cli.main(["pipeline", "plan", *mapped]) == 1
    out = capsys.readouterr().out
    assert "move queue Sales.host-b@[public] -> Sales@[public] (instance queue retired)" in out
    assert "delayed Billing.Delayed@[public] -> Invoicing.Delayed@[public]" in out  # empty: moved already
    if with_spark:
        request.getfixturevalue("spark")  # the shared session is the active one
    assert cli.main(["pipeline", "run", *mapped, *([] if with_spark else ["--no-spark"])]) == 0
    assert f"Now: alembic -c {project.ini} -x url={pg_url} upgrade head" in capsys.readouterr().out
    assert cli.main(["pipeline", "plan", *mapped]) == 0  # the run did the moves: nothing pending
    out = capsys.readouterr().out
    assert "moved already (source empty): queue Sales.host-b@[public]" in out and "\n  move " not in out
    project.upgrade(pg_url)  # the guarded drops pass now
    assert queue_contents(pg_url, TableName("Sales", "public")) == host_b
    assert queue_contents(pg_url, TableName("Invoicing", "public")) == billing
    assert cli.main(["pipeline", "plan", *mapped]) == 0
    conn = dbapi_connect(pg_url)
    rows = sorted(conn.execute('SELECT QueueAddress, Endpoint, Topic FROM "public"."SubscriptionRouting"').fetchall())
    conn.close()
    assert rows == [("Invoicing@[public]", "Billing", "Shop.OrderPlaced"), ("Sales@[public]", "Sales", "Shop.Invoiced")]


def _pending_move(project, url):
    """A compiled revision that retires Sales.host-b while it holds messages (Billing mapped to Invoicing)."""
    project.deploy(url, BEFORE, "before")
    fill_queue(url, TableName("Sales.host-b", "public"), 10, seed=41)
    project.write_topology(AFTER)
    assert project.compile("after") == 0


def test_plan_suggests_the_run_on_the_database_it_was_given_password_masked(project, pg_url, capsys):
    _pending_move(project, pg_url)
    secret = pg_url.replace("postgres@", "postgres:s3cret@", 1)  # trust authentication ignores the password
    assert cli.main(["pipeline", "plan", "-c", str(project.ini), "--url", secret, "--map", "Billing=Invoicing"]) == 1
    out = capsys.readouterr().out
    assert "s3cret" not in out
    masked = secret.replace("s3cret", "***")
    run = next(line for line in out.splitlines() if line.startswith("Run: "))
    assert run.startswith(f"Run: sqltransport-schema pipeline run -c {project.ini} --url '{masked}' --map Billing=Invoicing (then ")
    assert f"-x 'url={masked}' upgrade head" in run
    # pasted with the password put back, it runs where the plan looked
    command = run[len("Run: ") : run.index(" (then ")].replace("***", "s3cret")
    pasted = shlex.split(command)[1:] + ["--no-spark"]
    assert pasted[:2] == ["pipeline", "run"]
    assert cli.main(pasted) == 0
    assert queue_contents(pg_url, TableName("Sales.host-b", "public")) == []
    assert len(queue_contents(pg_url, TableName("Sales", "public"))) == 10


def test_plan_says_when_the_database_came_from_the_environment(project, pg_url, capsys, monkeypatch):
    _pending_move(project, pg_url)
    monkeypatch.setenv("SQLTRANSPORT_URL", pg_url.replace("postgres@", "postgres:s3cret@", 1))
    assert cli.main(["pipeline", "plan", "-c", str(project.ini), "--map", "Billing=Invoicing"]) == 1
    out = capsys.readouterr().out
    assert "s3cret" not in out
    assert f"with SQLTRANSPORT_URL set as now ({pg_url.replace('postgres@', 'postgres:***@', 1)})" in out
