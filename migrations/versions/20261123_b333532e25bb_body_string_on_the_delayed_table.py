"""body string on the delayed table

Revision ID: b333532e25bb
Revises: 639df196532d
Create Date: 2026-11-23 22:46:40.829965

add body string column of \"Billing.Delayed\" (schema \"billing\")
"""
from alembic import op

import sqltransport_schema.migrate  # noqa: F401  (registers the transport operations on op)

revision = 'b333532e25bb'
down_revision = '639df196532d'
branch_labels = None
depends_on = None

# Every operation below names the transport version it builds, so this revision
# executes the same statements under any later release of sqltransport-schema.
transport_version = '9.1'

# The topology file this history is compiled from (relative to alembic.ini); `compile` refuses
# another one unless told (--topology-switch).
TOPOLOGY_FILE = 'topology.yaml'


def upgrade() -> None:
    op.add_body_string("Billing.Delayed", schema="billing", version="9.1")


def downgrade() -> None:
    op.drop_body_string("Billing.Delayed", schema="billing", version="9.1")


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
{"kind": "saga", "table": "Bill_Invoices", "schema": "billing", "prefix": "Bill_", "correlation": {"name": "InvoiceNumber", "type": "int"}}
]}
"""
