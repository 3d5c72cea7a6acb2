"""the Billing endpoint's outbox

Revision ID: 22458968043f
Revises: b333532e25bb
Create Date: 2026-11-25 22:12:43.536603

create outbox table \"Bill_OutboxData\" (schema \"billing\")
"""
from alembic import op

import sqltransport_schema.migrate  # noqa: F401  (registers the transport operations on op)

revision = '22458968043f'
down_revision = 'b333532e25bb'
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
    'topology.yaml': '993f3dd706c94c4006da3cd0c2785009ca7312136efe08c79e8610dd7f9baab6',
}


def upgrade() -> None:
    op.create_outbox_table("Bill_OutboxData", schema="billing", prefix="Bill_")


def downgrade() -> None:
    op.drop_outbox_table("Bill_OutboxData", schema="billing", prefix="Bill_")


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
{"kind": "saga", "table": "Sales_OrderSaga", "prefix": "Sales_", "correlation": {"name": "OrderId", "type": "guid"}, "transitional": {"name": "OrderNumber", "type": "string"}},
{"kind": "saga", "table": "Bill_Invoices", "schema": "billing", "prefix": "Bill_", "correlation": {"name": "InvoiceNumber", "type": "int"}},
{"kind": "outbox", "table": "Bill_OutboxData", "schema": "billing", "prefix": "Bill_"}
]}
"""
