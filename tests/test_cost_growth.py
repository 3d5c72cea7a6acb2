"""The guard against superlinear cost: each scale-sensitive command (tests/support/growth.py's
registry: compile, compile --check, check, status, script, adopt's plan, graph, and a fleet's
per-target planning and status) is run at n and at 10n items (endpoints; a fleet's targets), and
its cost per item at 10n must stay within 2.5x of that at n: blueprint specs and fleet targets
read, statements sent, SQLite connections and statements, and CPU time, never wall time
(tests/support/growth.py says why each)."""

from __future__ import annotations

import pytest

from sqltransport_schema.schema import Blueprint, Kind, TableName, TableSpec

from .support.growth import LIMIT, PATHS, BlueprintVisits, Cost, Growth, counted_reads, growth


@pytest.mark.parametrize("name", list(PATHS))
def test_cost_per_endpoint_does_not_grow_with_the_topology(name, tmp_path_factory):
    found = growth(PATHS[name], tmp_path_factory.mktemp("growth"))
    print(found.describe())
    assert found.small.visits > 0 or name == "script", "the counter saw no blueprint: it counts nothing"
    assert not found.too_steep(), f"cost per item grows more than {LIMIT}x from n to 10n:\n{found.describe()}"


def _blueprint(queues: int) -> Blueprint:
    tables = [TableSpec(Kind.QUEUE, TableName(f"q{i}")) for i in range(queues)]
    return Blueprint("9.1", ("sqlite",), (*tables, TableSpec(Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting"))))


def test_the_counter_counts_a_scan_per_table_and_none_for_a_lookup():
    """What the guard's first measure rests on: a scan of the blueprint per table counts n x n, a
    lookup of what the blueprint works out once (its subscription table, its tables by name) n."""
    visits = BlueprintVisits()
    with visits.watching():
        found = _blueprint(50)
        for _spec in found.tables:
            assert next(s for s in found.tables if s.kind is Kind.SUBSCRIPTIONS).kind is Kind.SUBSCRIPTIONS
        scanned = visits.count
        for spec in found.tables:
            assert found.subscription_table == TableName("SubscriptionRouting")
            assert found.by_name()[spec.name] is spec
        looked_up = visits.count - scanned
    assert scanned == 51 + 51 * 51
    assert looked_up == 51 + 51 + 51  # the loop itself, and each derived value worked out once
    assert "tables" not in Blueprint.__dict__  # the counter is gone once it stops watching
    assert type(_blueprint(1).tables) is tuple


def test_a_cost_that_grows_with_n_fails_the_guard():
    linear = Growth("linear", Cost(10, visits=30, statements=5, cpu=0.01), Cost(100, visits=300, statements=5, cpu=0.12))
    assert linear.too_steep() == []
    quadratic = Growth("quadratic", Cost(10, visits=30 + 100, cpu=0.01), Cost(100, visits=300 + 10_000, cpu=0.5))
    assert quadratic.too_steep() == ["visits", "cpu"]


def test_the_counter_counts_a_fleet_scanned_per_target_and_sqlite_reads(tmp_path):
    """The fleet path's measures: a per-target scan of the fleet's targets counts n x n where a
    lookup counts n; each SQLite connection and each statement SQLite runs is a read."""
    import sqlite3

    from sqltransport_schema.fleet import file

    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(f"url_template: sqlite:///{tmp_path}/{{name}}.db\nnames: [{', '.join(f't{i}' for i in range(30))}]\n")
    visits = BlueprintVisits()
    with visits.watching():
        fleet = file.load(fleet_file)
        loaded = visits.count
        for target in fleet.targets:
            assert next(t for t in fleet.targets if t.name == target.name) is target
        scanned = visits.count - loaded
    assert scanned == 30 + sum(range(1, 31))  # the loop, and each scan up to its target
    assert type(file.load(fleet_file).targets) is list
    with counted_reads() as reads:
        connection = sqlite3.connect(tmp_path / "t0.db")
        connection.execute("CREATE TABLE t (a int)")
        connection.execute("SELECT a FROM t").fetchall()
        connection.close()
    assert reads[0] == 1 + 2
