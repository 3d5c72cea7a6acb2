"""initial topology

Revision ID: 65e6d1afb571
Revises: 
Create Date: 2026-11-21 22:40:58.693853

ensure schema 'billing' exists
create queue "Sales" (transport 9.1)
create queue "Sales.host-a" (transport 9.1)
create queue "Sales.host-b" (transport 9.1)
create queue "Billing" (schema "billing") (transport 9.1)
create queue "Shipping" (catalog "logistics") (transport 9.1)
create queue "error" (transport 9.1)
create queue "audit" (transport 9.1)
create delayed table "Sales.Delayed" (transport 9.1)
create delayed table "Billing.Delayed" (schema "billing") (transport 9.1)
create subscription table "SubscriptionRouting" (transport 9.1)
"""
from alembic import op

import sqltransport_schema.migrate  # noqa: F401  (registers the transport operations on op)

revision = '65e6d1afb571'
down_revision = None
branch_labels = None
depends_on = None

# Every operation below names the transport version it builds, so this revision
# executes the same statements under any later release of sqltransport-schema.
transport_version = '9.1'


def upgrade() -> None:
    op.ensure_schema("billing")
    op.create_queue("Sales", version="9.1", body_string=False, seq_type="serial")
    op.create_queue("Sales.host-a", version="9.1", body_string=False, seq_type="serial")
    op.create_queue("Sales.host-b", version="9.1", body_string=False, seq_type="serial")
    op.create_queue("Billing", schema="billing", version="9.1", body_string=True, seq_type="serial")
    op.create_queue("Shipping", catalog="logistics", version="9.1", body_string=False, seq_type="serial")
    op.create_queue("error", version="9.1", body_string=False, seq_type="serial")
    op.create_queue("audit", version="9.1", body_string=False, seq_type="serial")
    op.create_delayed_table("Sales.Delayed", version="9.1")
    op.create_delayed_table("Billing.Delayed", schema="billing", version="9.1")
    op.create_subscription_table("SubscriptionRouting", version="9.1")


def downgrade() -> None:
    op.drop_subscription_table("SubscriptionRouting", version="9.1")
    op.drop_delayed_table("Billing.Delayed", schema="billing", version="9.1")
    op.drop_delayed_table("Sales.Delayed", version="9.1")
    op.drop_queue("audit", version="9.1", body_string=False, seq_type="serial")
    op.drop_queue("error", version="9.1", body_string=False, seq_type="serial")
    op.drop_queue("Shipping", catalog="logistics", version="9.1", body_string=False, seq_type="serial")
    op.drop_queue("Billing", schema="billing", version="9.1", body_string=True, seq_type="serial")
    op.drop_queue("Sales.host-b", version="9.1", body_string=False, seq_type="serial")
    op.drop_queue("Sales.host-a", version="9.1", body_string=False, seq_type="serial")
    op.drop_queue("Sales", version="9.1", body_string=False, seq_type="serial")
    op.drop_schema_if_empty("billing")


# The blueprint this revision leaves behind, read by `sqltransport-schema compile`
# (to diff topology.yaml against the head) and by checks of a deployed database.
SNAPSHOT = r"""
{"format": 1, "transport_version": "9.1", "engines": ["mssql", "postgresql", "sqlite"], "tables": [
{"kind": "queue", "table": "Sales", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "Sales.host-a", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "Sales.host-b", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "Billing", "schema": "billing", "body_string": true, "seq_type": "serial"},
{"kind": "queue", "table": "Shipping", "catalog": "logistics", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "error", "body_string": false, "seq_type": "serial"},
{"kind": "queue", "table": "audit", "body_string": false, "seq_type": "serial"},
{"kind": "delayed", "table": "Sales.Delayed"},
{"kind": "delayed", "table": "Billing.Delayed", "schema": "billing"},
{"kind": "subscriptions", "table": "SubscriptionRouting"}
]}
"""
