<%!
    def commands(rendered):
        """The operations as Alembic renders them, without the marker comments around them."""
        lines = [line for line in (rendered or "").split("\n") if not line.lstrip().startswith("# ### ")]
        return "\n".join(lines).strip() or "pass"
%><%
    snapshot = context.get("snapshot")
    transport_version = context.get("transport_version")
    summary = context.get("summary")
    topology_file = context.get("topology_file")
    topology_files = context.get("topology_files")
%>"""${context.get("docstring_message", message)}

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
% if topology_file:

# The topology file this history is compiled from (relative to alembic.ini); `compile` refuses
# another one unless told (--topology-switch).
TOPOLOGY_FILE = ${repr(topology_file)}
% endif
% if topology_files:

# The sha256 of each file of that topology as compiled: the root file, then the files it
# includes (relative to it).
TOPOLOGY_SHA256 = {
% for name, digest in topology_files:
    ${repr(name)}: ${repr(digest)},
% endfor
}
% endif


def upgrade() -> None:
    ${commands(context.get("upgrades"))}


def downgrade() -> None:
    ${commands(context.get("downgrades"))}
% if snapshot:


# The blueprint this revision leaves behind, read by `sqltransport-schema compile`
# (to diff topology.yaml against the head) and by checks of a deployed database.
SNAPSHOT = r"""
${snapshot}
"""
% endif
