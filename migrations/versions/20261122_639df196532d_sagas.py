"""sagas

Revision ID: 639df196532d
Revises: 65e6d1afb571
Create Date: 2026-11-22 01:22:19.427126

create saga table \"Sales_OrderSaga\" (correlation OrderId, OrderNumber)
create saga table \"Bill_Invoices\" (schema \"billing\") (correlation InvoiceNumber)
"""
from alembic import op

import sqltransport_schema.migrate  # noqa: F401  (registers the transport operations on op)

revision = '639df196532d'
down_revision = '65e6d1afb571'
branch_labels = None
depends_on = None

# Every operation below names the transport version it builds, so this revision
# executes the same statements under any later release of sqltransport-schema.
transport_version = '9.1'


def upgrade() -> None:
    op.create_saga_table("Sales_OrderSaga", prefix="Sales_", correlation=("OrderId", "guid"), transitional=("OrderNumber", "string"))
    op.create_saga_table("Bill_Invoices", schema="billing", prefix="Bill_", correlation=("InvoiceNumber", "int"))


def downgrade() -> None:
    op.drop_saga_table("Bill_Invoices", schema="billing", prefix="Bill_", correlation=("InvoiceNumber", "int"))
    op.drop_saga_table("Sales_OrderSaga", prefix="Sales_", correlation=("OrderId", "guid"), transitional=("OrderNumber", "string"))


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
{"kind": "delayed", "table": "Billing.Delayed", "schema": "billing"},
{"kind": "subscriptions", "table": "SubscriptionRouting"},
{"kind": "saga", "table": "Sales_OrderSaga", "prefix": "Sales_", "correlation": {"name": "OrderId", "type": "guid"}, "transitional": {"name": "OrderNumber", "type": "string"}},
{"kind": "saga", "table": "Bill_Invoices", "schema": "billing", "prefix": "Bill_", "correlation": {"name": "InvoiceNumber", "type": "int"}}
]}
"""
