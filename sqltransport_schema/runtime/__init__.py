"""Runtime: version-matched statements, send/receive API, message pump.

Its public modules: `transport` (Transport, Queue, EndpointTables, Subscriptions), `pump` (MessagePump,
DueMover), `sagas` (SagaTable), `outbox` (OutboxTable, cleanup) and `operations` (status, flow;
retry is `sqltransport_schema.errorqueue`'s)."""

# The wire format moved to the core (sqltransport_schema.wire: the pipeline uses it too, and it
# needs nothing of the runtime); users' code imports it as `from sqltransport_schema.runtime import wire`,
# so that import keeps working.
from .. import wire as wire

__all__ = ["wire", "transport", "pump", "sagas", "outbox", "operations"]
