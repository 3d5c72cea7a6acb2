<%
    snapshot = context.get("snapshot")
    transport_version = context.get("transport_version")
    summary = context.get("summary")
%>"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
% if summary:

${summary}
% endif
"""
from alembic import op

import sqltransport_schema.migrate  # noqa: F401  (registers the transport operations on op)

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}
% if transport_version:

# Every operation below names the transport version it builds, so this revision
# executes the same statements under any later release of sqltransport-schema.
transport_version = ${repr(transport_version)}
% endif


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
% if snapshot:


# The blueprint this revision leaves behind, read by `sqltransport-schema compile`
# (to diff topology.yaml against the head) and by checks of a deployed database.
SNAPSHOT = r"""
${snapshot}
"""
% endif
