"""the console's archive and action log

Revision ID: 9b5c05e01c6a
Revises: 22458968043f
Create Date: 2026-11-27 13:58:12.137338

create archive table \"error_archive\" (transport 9.1)
create action log \"ConsoleActions\" (transport 9.1)
"""
from alembic import op

import sqltransport_schema.migrate  # noqa: F401  (registers the transport operations on op)

revision = '9b5c05e01c6a'
down_revision = '22458968043f'
branch_labels = None
depends_on = None

# Every operation below names the transport version it builds, so this revision
# executes the same statements under any later release of sqltransport-schema.
transport_version = '9.1'

# The topology file this history is compiled from (relative to alembic.ini); `compile` refuses
# another one unless told (--topology-switch).
TOPOLOGY_FILE = 'topology.yaml'

# The sha256 of each file of that topology as compiled: the root file, then the files it
# includes (relative to it).
TOPOLOGY_SHA256 = {
    'topology.yaml': '40038449f32c8d357450823f9d681b3e9e86c0be6186550dc282f75183facf65',
}


def upgrade() -> None:
    op.create_archive_table("error_archive", version="9.1", queue="error")
    op.create_action_log("ConsoleActions", version="9.1")


def downgrade() -> None:
    op.drop_action_log("ConsoleActions", version="9.1")
    op.drop_archive_table("error_archive", version="9.1", queue="error")


# The blueprint this revision leaves behind, read by `sqltransport-schema compile`
# (to diff topology.yaml against the head) and by checks of a deployed database.
SNAPSHOT = r"""
{"format": 2, "transport_version": "9.1", "engines": ["mssql", "postgresql", "sqlite"], "tables": [
{"kind": "queue", "table": "Sales", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "Sales.host-a", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "Sales.host-b", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "Billing", "schema": "billing", "body_string": true, "seq_type": "serial"},
{"kind": "queue", "table": "Shipping", "catalog": "logistics", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "error", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "audit", "body_string": false, "seq_type": "serial"},
{"kind": "delayed", "table": "Sales.Delayed"},
{"kind": "delayed", "table": "Billing.Delayed", "schema": "billing", "body_string": true},
{"kind": "subscriptions", "table": "SubscriptionRouting"},
{"kind": "saga", "table": "Sales_OrderSaga", "endpoint": "Sales", "prefix": "Sales_", "correlation": {"name": "OrderId", "type": "guid"}, "transitional": {"name": "OrderNumber", "type": "string"}},
{"kind": "saga", "table": "Bill_Invoices", "schema": "billing", "endpoint": "Billing", "prefix": "Bill_", "correlation": {"name": "InvoiceNumber", "type": "int"}},
{"kind": "outbox", "table": "Bill_OutboxData", "schema": "billing", "endpoint": "Billing", "prefix": "Bill_"},
{"kind": "archive", "table": "error_archive", "queue": "error"},
{"kind": "action_log", "table": "ConsoleActions"}
]}
"""
