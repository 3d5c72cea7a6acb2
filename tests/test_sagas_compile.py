"""Sagas in the topology format, the blueprint and its snapshot, and compile's lifecycle plans (no database)."""

from __future__ import annotations

import pytest

from sqltransport_schema import topology
from sqltransport_schema.migrate import saga_ops
from sqltransport_schema.migrate.compile import CompileError, plan
from sqltransport_schema.schema import Blueprint, Correlation, Kind, TableName, blueprint

HEAD = 'transport_version: "9.1"\nendpoints:\n  - name: Sales.Api\n'


def saga_topology(saga: str, engines: str = "[mssql, postgresql, sqlite]", endpoint_extra: str = "") -> str:
    return f'transport_version: "9.1"\nengines: {engines}\nendpoints:\n  - name: Sales.Api\n{endpoint_extra}    sagas:\n{saga}'


ORDER = "      - name: OrderSaga\n        correlation: {name: OrderId, type: string}\n"
ORDER_T = ORDER + "        transitional: {name: OrderNumber, type: int}\n"
PROMOTED = "      - name: OrderSaga\n        correlation: {name: OrderNumber, type: int}\n"


def bp(text: str) -> Blueprint:
    return blueprint(topology.loads(text))


def problems(text: str) -> list[str]:
    with pytest.raises(topology.TopologyError) as exc:
        topology.loads(text)
    return [str(p) for p in exc.value.problems]


def saga_specs(text: str):
    return [spec for spec in bp(text).tables if spec.kind is Kind.SAGA]


# --------------------------------------------------------------------------- the format
def test_table_name_is_prefix_and_name_or_suffix():
    (spec,) = saga_specs(saga_topology(ORDER))
    assert spec.name == TableName("Sales_Api_OrderSaga")
    assert spec.correlation == Correlation("OrderId", "string") and spec.transitional is None
    assert spec.saga_prefix == "Sales_Api_"
    text = saga_topology(
        "      - name: OrderSaga\n        table_suffix: Orders\n        correlation: {name: OrderId, type: guid}\n",
        endpoint_extra="    table_prefix: S_\n    schema: sales\n",
    )
    (spec,) = saga_specs(text)
    assert spec.name == TableName("S_Orders", "sales") and spec.saga_prefix == "S_"


def test_datetimeoffset_on_an_engine_without_it_is_an_error_at_the_type():
    text = saga_topology("      - name: OrderSaga\n        correlation: {name: PlacedAt, type: datetimeoffset}\n", engines="[mssql, mysql]")
    (problem,) = problems(text)
    assert problem.startswith("topology.yaml:7:45: correlation type 'datetimeoffset'")
    assert "mysql" in problem and "remove mysql from engines" in problem
    # SQL Server and SQLite hold it
    saga_topology("      - name: OrderSaga\n        correlation: {name: PlacedAt, type: datetimeoffset}\n", engines="[mssql, sqlite]")


def test_saga_problems_are_reported_with_file_line_column():
    text = saga_topology(
        "      - name: OrderSaga\n        correlation: {name: OrderId, type: strin}\n"
        "      - name: ShipSaga\n        correlation: {name: OrderId, type: int}\n        transitional: {name: orderid, type: int}\n"
        "      - name: NoCorrelation\n"
        "      - name: OnlyTransitional\n        transitional: {name: OrderNumber, type: int}\n",
    )
    found = problems(text)
    assert any(p.startswith("topology.yaml:7:44: ") and "did you mean 'string'" in p for p in found)
    assert any(p.startswith("topology.yaml:10:30: ") and "is the correlation property" in p for p in found)
    # SQL persistence allows a saga without a correlation property, not a transitional one alone
    assert not any("NoCorrelation" in p or ":11:" in p for p in found)
    assert any(p.startswith("topology.yaml:13:23: ") and "needs a correlation property" in p for p in found)


def test_names_over_an_engines_limit_are_errors():
    long_saga = "      - name: " + "S" * 40 + "\n        correlation: {name: OrderId, type: int}\n"
    found = problems(saga_topology(long_saga, engines="[sqlite, oracle]"))
    assert len(found) == 1 and "on oracle" in found[0] and "at most 27 ASCII characters" in found[0]
    # SQL persistence on PostgreSQL: a table prefix over 20 characters, a suffix over 43
    long_prefix = saga_topology(ORDER, engines="[postgresql]", endpoint_extra="    table_prefix: " + "P" * 21 + "\n")
    assert any("table prefix" in p and "over 20" in p for p in problems(long_prefix))
    found = problems(saga_topology(long_saga.replace("S" * 40, "S" * 44), engines="[postgresql]"))
    assert any("table suffix" in p and "over 43" in p for p in found)
    long_prop = "      - name: OrderSaga\n        correlation: {name: " + "P" * 60 + ", type: int}\n"
    found = problems(saga_topology(long_prop, engines="[postgresql, mysql]"))
    assert any("postgresql" in p and "63-byte" in p for p in found) and any("mysql" in p and "64" in p for p in found)


def test_send_only_endpoints_have_no_sagas_and_saga_tables_collide_like_tables():
    found = problems(saga_topology(ORDER, endpoint_extra="    send_only: true\n"))
    assert any("send-only" in p for p in found)
    text = 'transport_version: "9.1"\nendpoints:\n  - name: Sales\n    sagas:\n' + ORDER + "queues:\n  - name: sales_ordersaga\n"
    (problem,) = problems(text)
    assert "same table as saga table 'Sales_OrderSaga'" in problem and "sqlite" in problem


def test_saga_only_engines_skip_queue_tables_in_validation():
    # 60-character queue names exceed PostgreSQL's transport limit, not MySQL's concern
    text = saga_topology(ORDER, engines="[mysql, oracle]").replace(
        "  - name: Sales.Api\n", "  - name: Sales.Api\n    instances: [" + "h" * 60 + "]\n"
    )
    topology.loads(text)


# --------------------------------------------------------------------------- snapshots
def test_snapshot_without_sagas_stays_format_1_and_with_sagas_round_trips_as_format_2():
    plain = bp(HEAD)
    assert plain.to_snapshot().startswith('{"format": 1,')
    assert Blueprint.from_snapshot(plain.to_snapshot()) == plain
    with_sagas = bp(saga_topology(ORDER_T, endpoint_extra="    table_prefix: \"P\\\"x_\"\n"))
    text = with_sagas.to_snapshot()
    assert text.startswith('{"format": 2,')
    assert Blueprint.from_snapshot(text) == with_sagas
    (spec,) = [s for s in Blueprint.from_snapshot(text).tables if s.kind is Kind.SAGA]
    assert spec.transitional == Correlation("OrderNumber", "int") and spec.saga_prefix == 'P"x_'


def test_a_format_1_snapshot_of_an_old_revision_still_loads():
    old = (
        '{"format": 1, "transport_version": "9.1", "engines": ["sqlite"], "tables": [\n'
        '{"kind": "queue", "table": "Sales", "body_string": false, "seq_type": "serial"}\n]}'
    )
    loaded = Blueprint.from_snapshot(old)
    assert loaded.tables[0].kind is Kind.QUEUE and loaded.tables[0].correlation is None


# --------------------------------------------------------------------------- lifecycle plans
def saga_steps(old: str, new: str) -> list:
    return [op for op in plan(bp(old), bp(new)).upgrade if isinstance(op, saga_ops.TransportOp)]


def test_adding_a_transitional_property_adds_its_column_and_index():
    (step,) = saga_steps(saga_topology(ORDER), saga_topology(ORDER_T))
    assert isinstance(step, saga_ops.AddSagaCorrelationOp) and step.correlation == Correlation("OrderNumber", "int")
    assert step.python() == 'op.add_saga_correlation("Sales_Api_OrderSaga", prefix="Sales_Api_", property=("OrderNumber", "int"))'
    assert isinstance(step.reverse(), saga_ops.DropSagaCorrelationOp) and step.reverse().require is None


def test_promotion_drops_the_old_column_guarded_by_the_new_one():
    (step,) = saga_steps(saga_topology(ORDER_T), saga_topology(PROMOTED))
    assert isinstance(step, saga_ops.DropSagaCorrelationOp)
    assert step.correlation == Correlation("OrderId", "string") and step.require == Correlation("OrderNumber", "int")
    assert step.python() == (
        'op.drop_saga_correlation("Sales_Api_OrderSaga", prefix="Sales_Api_", '
        'property=("OrderId", "string"), require=("OrderNumber", "int"))'
    )
    assert "refused while any row lacks it" in step.describe()


def test_abandoning_a_transition_drops_the_transitional_column_unguarded():
    (step,) = saga_steps(saga_topology(ORDER_T), saga_topology(ORDER))
    assert isinstance(step, saga_ops.DropSagaCorrelationOp) and step.correlation.name == "OrderNumber" and step.require is None


def test_a_new_transition_while_promoting_adds_then_drops():
    nxt = PROMOTED + "        transitional: {name: OrderCode, type: guid}\n"
    steps = saga_steps(saga_topology(ORDER_T), saga_topology(nxt))
    assert [type(s).__name__ for s in steps] == ["AddSagaCorrelationOp", "DropSagaCorrelationOp"]
    assert steps[1].require == Correlation("OrderNumber", "int")


def test_changing_a_correlation_type_is_refused_with_the_way_to_do_it():
    changed = ORDER.replace("type: string", "type: int")
    with pytest.raises(CompileError) as exc:
        plan(bp(saga_topology(ORDER)), bp(saga_topology(changed)))
    message = str(exc.value)
    assert "'OrderId' changes type from string to int" in message
    assert "new property" in message and "transitional" in message and "promote" in message


def test_switching_the_correlation_property_without_a_transition_is_refused():
    with pytest.raises(CompileError) as exc:
        plan(bp(saga_topology(ORDER)), bp(saga_topology(PROMOTED)))
    assert "Add 'OrderNumber' as the transitional property first" in str(exc.value)


def test_a_saga_without_a_correlation_property_compiles_and_gains_or_loses_one_plainly():
    plain = "      - name: OrderSaga\n"
    (spec,) = saga_specs(saga_topology(plain))
    assert spec.correlation is None and spec.correlations == ()
    # dropping the correlation property drops its column, unguarded
    (step,) = saga_steps(saga_topology(ORDER), saga_topology(plain))
    assert isinstance(step, saga_ops.DropSagaCorrelationOp) and step.correlation.name == "OrderId" and step.require is None
    # a correlation property for a saga that had none (never looked up by one): added, as the installer does
    (step,) = saga_steps(saga_topology(plain), saga_topology(ORDER))
    assert isinstance(step, saga_ops.AddSagaCorrelationOp) and step.correlation == Correlation("OrderId", "string")


def test_new_and_removed_saga_tables_create_and_drop_refusing_while_sagas_remain():
    steps = saga_steps(HEAD, saga_topology(ORDER_T))
    assert [type(s).__name__ for s in steps] == ["CreateSagaTableOp"]
    assert steps[0].python() == (
        'op.create_saga_table("Sales_Api_OrderSaga", prefix="Sales_Api_", '
        'correlation=("OrderId", "string"), transitional=("OrderNumber", "int"))'
    )
    (drop,) = saga_steps(saga_topology(ORDER_T), HEAD)
    assert isinstance(drop, saga_ops.DropSagaTableOp) and not drop.discard_messages
    discarded = HEAD + "discard:\n  - name: Sales_Api_OrderSaga\n"
    (drop,) = saga_steps(saga_topology(ORDER_T), discarded)
    assert drop.discard_messages


def test_compile_cli_reports_a_refused_type_change(project, capsys):
    project.write_topology(saga_topology(ORDER))
    assert project.compile("sagas") == 0
    project.write_topology(saga_topology(ORDER.replace("type: string", "type: guid")))
    capsys.readouterr()
    assert project.compile("retype") == 2
    assert "changes type from string to guid" in capsys.readouterr().err
    assert len(project.revisions()) == 1


def test_runtime_grants_cover_an_endpoints_own_saga_tables_only():
    from sqltransport_schema import grants

    text = (
        saga_topology(ORDER)
        + "  - name: Billing\n    sagas:\n      - name: InvoiceSaga\n        correlation: {name: InvoiceId, type: int}\n"
    )
    topo = topology.loads(text)
    sagas = lambda plan: {g.table.table for g in plan.tables if g.need == grants.SAGA}  # noqa: E731
    assert sagas(grants.runtime_plan(topo)) == {"Sales_Api_OrderSaga", "Billing_InvoiceSaga"}
    assert sagas(grants.runtime_plan(topo, "Billing")) == {"Billing_InvoiceSaga"}
    lines = "\n".join(
        __import__("sqltransport_schema.engines", fromlist=["get"])
        .get("postgresql")
        .grants.runtime(grants.runtime_plan(topo, "Billing"), "app")
    )
    assert 'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "public"."Billing_InvoiceSaga" TO "app";' in lines


SAGA_STRUCTURALLY_BAD = {
    "unknown-saga-key": ORDER + "        correlation_property: x\n",
    "no-type": "      - name: OrderSaga\n        correlation: {name: OrderId}\n",
    "unknown-type": "      - name: OrderSaga\n        correlation: {name: OrderId, type: decimal}\n",
    "no-name": "      - table_suffix: OrderSaga\n",
    "list-for-transitional": ORDER + "        transitional: [OrderNumber]\n",
    "number-for-suffix": "      - name: OrderSaga\n        table_suffix: 7\n        correlation: {name: OrderId, type: int}\n",
}


@pytest.mark.parametrize("saga", list(SAGA_STRUCTURALLY_BAD.values()), ids=list(SAGA_STRUCTURALLY_BAD))
def test_the_json_schema_rejects_the_saga_entries_the_loader_rejects(saga):
    import yaml

    from .support.topology import validator

    text = saga_topology(saga)
    problems(text)
    assert list(validator().iter_errors(yaml.safe_load(text))), "the editor schema accepts what the loader rejects"


def test_the_json_schema_accepts_a_full_saga_entry():
    import yaml

    from .support.topology import validator

    text = saga_topology(
        "      - name: OrderSaga\n        table_suffix: Orders\n" + ORDER_T.split("\n", 1)[1], endpoint_extra="    table_prefix: S_\n"
    )
    topology.loads(text)
    assert list(validator().iter_errors(yaml.safe_load(text))) == []
