"""Every operation counts toward a migration's part-way commit (migrate/execution.py, _checkpoint) by
the locks it holds on PostgreSQL until commit. Each kind is run here as a migration runs it (through
Alembic's `op`, in one transaction, on real PostgreSQL) and its locks counted from pg_locks:
each kind's lock_cost must cover every count, so this fails as soon as an operation takes more."""

from __future__ import annotations

import pytest
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext

from sqltransport_schema.migrate import execution, ops, toimpl
from sqltransport_schema.migrate import saga_ops as sagas
from sqltransport_schema.schema import Correlation, Kind, SchemaName, TableName, TableSpec

from .support.databases import connect

V = "9.1"
LOCKS = "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"


def queue(name: str, **options) -> TableSpec:
    return TableSpec(Kind.QUEUE, TableName(name), **options)


def delayed(name: str, **options) -> TableSpec:
    return TableSpec(Kind.DELAYED, TableName(name), **options)


def saga(name: str) -> TableSpec:
    return TableSpec(Kind.SAGA, TableName(name), correlation=Correlation("OrderId", "string"), saga_prefix="Shop_")


def outbox(name: str) -> TableSpec:
    return TableSpec(Kind.OUTBOX, TableName(name), saga_prefix="Shop_")


def subscriptions(name: str) -> TableSpec:
    return TableSpec(Kind.SUBSCRIPTIONS, TableName(name))


def archive(name: str) -> TableSpec:
    return TableSpec(Kind.ARCHIVE, TableName(name), queue="error")


def action_log(name: str) -> TableSpec:
    return TableSpec(Kind.ACTION_LOG, TableName(name))


# case: (what exists before, committed; the operation measured), each a function of a table name
CASES = {
    "create_queue": (lambda n: [], lambda n: ops.CreateQueueOp(queue(n), V)),
    "create_queue with BodyString, bigserial": (
        lambda n: [],
        lambda n: ops.CreateQueueOp(queue(n, body_string=True, seq_type="bigserial"), V),
    ),
    "create_delayed_table": (lambda n: [], lambda n: ops.CreateDelayedTableOp(delayed(n), V)),
    "create_delayed_table with BodyString": (lambda n: [], lambda n: ops.CreateDelayedTableOp(delayed(n, body_string=True), V)),
    "create_subscription_table": (lambda n: [], lambda n: ops.CreateSubscriptionTableOp(subscriptions(n), V)),
    "drop_queue": (lambda n: [ops.CreateQueueOp(queue(n), V)], lambda n: ops.DropQueueOp(queue(n), V)),
    "drop_queue deleting its subscription rows": (
        lambda n: [ops.CreateSubscriptionTableOp(subscriptions("Subscriptions"), V), ops.CreateQueueOp(queue(n), V)],
        lambda n: ops.DropQueueOp(queue(n), V, subscriptions=TableName("Subscriptions")),
    ),
    "drop_queue with BodyString, discarding": (
        lambda n: [ops.CreateQueueOp(queue(n, body_string=True, seq_type="bigserial"), V)],
        lambda n: ops.DropQueueOp(queue(n, body_string=True), V, discard_messages=True),
    ),
    "drop_delayed_table": (
        lambda n: [ops.CreateDelayedTableOp(delayed(n, body_string=True), V)],
        lambda n: ops.DropDelayedTableOp(delayed(n), V),
    ),
    "drop_subscription_table": (
        lambda n: [ops.CreateSubscriptionTableOp(subscriptions(n), V)],
        lambda n: ops.DropSubscriptionTableOp(subscriptions(n), V),
    ),
    "add_body_string": (lambda n: [ops.CreateQueueOp(queue(n), V)], lambda n: ops.AddBodyStringOp(TableName(n), V)),
    "add_body_string of a bigserial queue": (
        lambda n: [ops.CreateQueueOp(queue(n, seq_type="bigserial"), V)],
        lambda n: ops.AddBodyStringOp(TableName(n), V),
    ),
    "add_body_string of a delayed table": (
        lambda n: [ops.CreateDelayedTableOp(delayed(n), V)],
        lambda n: ops.AddBodyStringOp(TableName(n), V),
    ),
    "drop_body_string": (lambda n: [ops.CreateQueueOp(queue(n, body_string=True), V)], lambda n: ops.DropBodyStringOp(TableName(n), V)),
    "change_queue_seq_type serial -> bigserial": (
        lambda n: [ops.CreateQueueOp(queue(n), V)],
        lambda n: ops.ChangeQueueSeqTypeOp(TableName(n), "serial", "bigserial"),
    ),
    "change_queue_seq_type of a queue with BodyString": (
        lambda n: [ops.CreateQueueOp(queue(n, body_string=True), V)],
        lambda n: ops.ChangeQueueSeqTypeOp(TableName(n), "serial", "bigserial"),
    ),
    "change_queue_seq_type bigserial -> serial": (
        lambda n: [ops.CreateQueueOp(queue(n, seq_type="bigserial"), V)],
        lambda n: ops.ChangeQueueSeqTypeOp(TableName(n), "bigserial", "serial"),
    ),
    "change_queue_seq_type done already (a rerun)": (
        lambda n: [ops.CreateQueueOp(queue(n, seq_type="bigserial"), V)],
        lambda n: ops.ChangeQueueSeqTypeOp(TableName(n), "serial", "bigserial"),
    ),
    "change_queue_version": (lambda n: [ops.CreateQueueOp(queue(n), "8.1")], lambda n: ops.ChangeQueueVersionOp(TableName(n), "8.1", V)),
    "rename_index": (
        lambda n: [ops.CreateDelayedTableOp(delayed(n), V)],
        lambda n: ops.RenameIndexOp(TableName(n), f"{n}_Due", f"{n}_Due_renamed"),
    ),
    "ensure_schema": (lambda n: [], lambda n: ops.EnsureSchemaOp(SchemaName(n.lower()))),
    "drop_schema_if_empty": (
        lambda n: [ops.EnsureSchemaOp(SchemaName(n.lower()))],
        lambda n: ops.DropSchemaIfEmptyOp(SchemaName(n.lower())),
    ),
    "create_saga_table": (lambda n: [], lambda n: sagas.CreateSagaTableOp(saga(n))),
    "drop_saga_table": (lambda n: [sagas.CreateSagaTableOp(saga(n))], lambda n: sagas.DropSagaTableOp(saga(n))),
    "add_saga_correlation": (
        lambda n: [sagas.CreateSagaTableOp(saga(n))],
        lambda n: sagas.AddSagaCorrelationOp(saga(n), Correlation("CustomerId", "guid")),
    ),
    "drop_saga_correlation": (
        lambda n: [sagas.CreateSagaTableOp(saga(n))],
        lambda n: sagas.DropSagaCorrelationOp(saga(n), Correlation("OrderId", "string")),
    ),
    "create_outbox_table": (lambda n: [], lambda n: sagas.CreateOutboxTableOp(outbox(n))),
    "drop_outbox_table": (lambda n: [sagas.CreateOutboxTableOp(outbox(n))], lambda n: sagas.DropOutboxTableOp(outbox(n))),
    "create_archive_table": (lambda n: [], lambda n: ops.CreateArchiveTableOp(archive(n), V)),
    "drop_archive_table": (lambda n: [ops.CreateArchiveTableOp(archive(n), V)], lambda n: ops.DropArchiveTableOp(archive(n), V)),
    "create_action_log": (lambda n: [], lambda n: ops.CreateActionLogOp(action_log(n), V)),
    "drop_action_log": (lambda n: [ops.CreateActionLogOp(action_log(n), V)], lambda n: ops.DropActionLogOp(action_log(n), V)),
}


def _kinds(cls: type) -> set[str]:
    """The operation classes revisions use: the leaves under cls."""
    subclasses = cls.__subclasses__()
    return set().union(*map(_kinds, subclasses)) if subclasses else {cls.__name__}


def test_every_operation_kind_has_a_cost_and_is_measured():
    kinds = _kinds(ops.TransportOp)
    assert kinds == {kind.__name__ for kind in toimpl.kinds() if kind.lock_cost > 0}
    assert kinds == {type(CASES[case][1]("t")).__name__ for case in CASES}


def _invoke(connection, operation, **opts) -> None:
    context = MigrationContext.configure(connection, opts={"transactional_ddl": True, **opts})
    Operations(context).invoke(operation)


def _measure(url: str, case: str) -> tuple[int, int]:
    """(the locks the second of two such operations adds, what the first adds beyond that: the
    transaction's own), both in one transaction as a migration runs them."""
    setup, operation = CASES[case]
    engine = connect(url)
    try:
        names = [f"T{i}_{abs(hash(case)) % 10**6}" for i in (1, 2)]
        with engine.begin() as connection:
            for name in names:
                for step in setup(name):
                    _invoke(connection, step)
        with engine.connect() as connection:
            start = connection.exec_driver_sql(LOCKS).scalar()
            _invoke(connection, operation(names[0]))
            first = connection.exec_driver_sql(LOCKS).scalar()
            _invoke(connection, operation(names[1]))
            second = connection.exec_driver_sql(LOCKS).scalar()
            connection.rollback()
    finally:
        engine.dispose()
    each = second - first
    return each, first - start - each


@pytest.mark.parametrize("case", list(CASES))
def test_lock_costs_cover_what_each_operation_takes(pg_url, case):
    operation = CASES[case][1]("t")
    each, own = _measure(pg_url, case)
    assert operation.locks() >= each, f"{case}: {each} locks measured, its lock_cost says {operation.locks()}"
    assert own <= execution.TRANSACTION_LOCKS, f"{case}: the transaction's own locks ({own}) exceed TRANSACTION_LOCKS"


def test_an_online_rewrite_commits_the_run_and_its_count_starts_again(pg_url):
    """The online steps run in their own short transactions after committing the migration's:
    they add nothing to its locks, and the count toward the next part-way commit starts at 0."""
    engine = connect(pg_url)
    try:
        with engine.begin() as connection:
            _invoke(connection, ops.CreateQueueOp(queue("Sales"), V))
            _invoke(connection, ops.CreateQueueOp(queue("Billing"), V))
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"transactional_ddl": True})
            with context.begin_transaction():
                Operations(context).invoke(ops.CreateQueueOp(queue("Shipping"), V))
                state = execution._states[context]
                assert state.locks == ops.CreateQueueOp(queue("Shipping"), V).locks()
                start = connection.exec_driver_sql(LOCKS).scalar()
                Operations(context).invoke(ops.ChangeQueueSeqTypeOp(TableName("Sales"), "serial", "bigserial", online=True))
                Operations(context).invoke(ops.AddBodyStringOp(TableName("Billing"), V, online=True))
                assert connection.exec_driver_sql(LOCKS).scalar() < start  # Shipping's creation was committed
                assert state.locks == 0
    finally:
        engine.dispose()
