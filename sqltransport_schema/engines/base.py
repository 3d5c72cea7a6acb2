"""What every engine class provides. The neutral core only talks to this interface."""

from __future__ import annotations

from ..runtime.statements import MESSAGE, Statement, parameters_of
from ..schema import Kind, SchemaName, TableName, TableSpec
from ..shapes import TableShape
from ..versions import Profile

# The message a refused drop carries, on every engine.
DROP_REFUSED = (
    "refusing to drop queue {name}: it still holds messages. Move or consume them first "
    "(sqltransport-schema pipeline), or list the table under discard: in topology.yaml to drop it with its messages"
)


class Engine:
    """One database engine: quoting, name limits, and every DDL statement it runs.

    Methods that produce DDL return a list of batches: complete SQL texts that run
    one after the other (on SQL Server each is a batch, separated by GO in scripts).
    """

    name: str = ""
    dialect: str = ""  # SQLAlchemy dialect name
    default_schema: str | None = None
    case_insensitive_names = False

    # -- identifiers -----------------------------------------------------------------
    def quote(self, identifier: str) -> str:
        raise NotImplementedError

    def literal(self, text: str) -> str:
        """A string literal; names only ever reach SQL text through here or quote()."""
        return "'" + text.replace("'", "''") + "'"

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        raise NotImplementedError

    def table_key(self, name: TableName) -> tuple:
        """Two tables with the same key are the same table on this engine."""
        schema = name.schema if name.schema is not None else self.default_schema
        key = (name.catalog, schema, name.table)
        if self.case_insensitive_names:
            return tuple(part.casefold() if part is not None else None for part in key)
        return key

    # Suffixes of index names that share the tables' namespace, by table kind.
    index_suffixes: dict[str, tuple[str, ...]] = {}

    def index_names(self, spec: TableSpec) -> list[TableName]:
        """Index names that live in the schema's namespace (and can collide with tables)."""
        name = spec.name
        return [TableName(name.table + suffix, name.schema, name.catalog) for suffix in self.index_suffixes.get(spec.kind.value, ())]

    def name_problems(self, name: TableName) -> list[tuple[str, str]]:
        """(part, problem) for each part of the name this engine cannot hold."""
        return []

    def tables_per_transaction(self, connection) -> int | None:
        """How many table operations one transaction can hold on this server (None: no limit)."""
        return None

    # -- catalog ---------------------------------------------------------------------
    # Columns each table kind must have (lower case), to tell an adoptable table from a stranger.
    expected: dict[str, frozenset[str]] = {}
    EXISTING_COLUMNS = (
        "SELECT table_schema, table_name, column_name FROM information_schema.columns "
        "WHERE table_schema NOT IN ('information_schema', 'pg_catalog', 'sys')"
    )

    def expected_columns(self, spec: TableSpec) -> frozenset[str]:
        return self.expected[spec.kind.value]

    def existing_columns(self, connection) -> dict[tuple, set[str]]:
        """table_key -> lower-case column names of every table, in one query."""
        out: dict[tuple, set[str]] = {}
        for schema, table, column in connection.exec_driver_sql(self.EXISTING_COLUMNS):
            out.setdefault(self.table_key(TableName(table, schema)), set()).add(column.lower())
        return out

    def expected_shape(self, spec: TableSpec, profile: Profile) -> TableShape:
        """The columns and indexes our DDL gives this table (for `check`)."""
        raise NotImplementedError(f"check does not support {self.name} yet")

    def read_shapes(self, connection, catalogs=()) -> dict[tuple, tuple[TableName, TableShape]]:
        """table_key -> (name, live shape) of every user table, in a few bulk catalog queries."""
        raise NotImplementedError(f"check does not support {self.name} yet")

    def catalog_warnings(self, connection, queues: list[TableName], profile: Profile) -> list[str]:
        """What the transport would warn of at start-up (a missing expiry index, non-Unicode headers)."""
        return []

    def unsupported(self, profile: Profile) -> str | None:
        """Why this engine cannot host the given transport version, or None."""
        return None

    # -- DDL -------------------------------------------------------------------------
    def create_table(self, spec: TableSpec, profile: Profile) -> list[str]:
        builder = {
            Kind.QUEUE: self.create_queue,
            Kind.DELAYED: self.create_delayed,
            Kind.SUBSCRIPTIONS: self.create_subscriptions,
        }[spec.kind]
        return builder(spec, profile)

    def create_queue(self, spec: TableSpec, profile: Profile) -> list[str]:
        raise NotImplementedError

    def create_delayed(self, spec: TableSpec, profile: Profile) -> list[str]:
        raise NotImplementedError

    def create_subscriptions(self, spec: TableSpec, profile: Profile) -> list[str]:
        raise NotImplementedError

    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        raise NotImplementedError

    def change_queue_version(self, spec: TableSpec, old: Profile, new: Profile) -> list[str]:
        return []

    def add_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return []

    def drop_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return []

    def change_seq_type(self, spec: TableSpec, old: str, new: str) -> list[str]:
        return []

    def create_schema(self, schema: SchemaName) -> list[str]:
        return []

    def drop_schema(self, schema: SchemaName) -> list[str]:
        return []

    # -- runtime statements -------------------------------------------------------------
    # name -> (class attribute holding the template, what it does). Engines whose statements
    # do not vary by version only write the templates; SQL Server overrides runtime_statements.
    QUEUE_STATEMENTS = {
        "send": ("SEND", "place a message on the queue"),
        "receive": ("RECEIVE", "take the oldest unlocked message, flagging it if expired"),
        "receive_batch": ("RECEIVE_BATCH", "take up to @BatchSize oldest unlocked messages, flagging expired ones"),
        "peek": ("PEEK", "estimate how many messages wait"),
        "purge_expired": ("PURGE_EXPIRED", "delete up to @BatchSize expired messages"),
        "purge_all": ("PURGE_ALL", "delete every message (purge at startup)"),
    }
    DELAYED_STATEMENTS = {
        "store_delayed": ("STORE_DELAYED", "store a delayed message"),
        "move_due_delayed": ("MOVE_DUE_DELAYED", "move due messages into the input queue"),
        "next_due": ("NEXT_DUE", "when the next delayed message falls due"),
    }
    SUBSCRIPTION_STATEMENTS = {
        "subscribe": ("SUBSCRIBE", "subscribe an endpoint to a topic"),
        "unsubscribe": ("UNSUBSCRIBE", "unsubscribe an endpoint from a topic"),
        "find_subscribers": ("FIND_SUBSCRIBERS", "addresses subscribed to any of the topics"),
    }
    RESULT_COLUMNS = {"receive": MESSAGE, "receive_batch": MESSAGE + ("Order",)}

    def now_parameter(self):
        """The current UTC time as this engine's statements compare it (@Now), where they take one."""
        return None

    def runtime_statements(self, profile: Profile, queue: TableName, *, delayed: TableName | None = None,
                           subscriptions: TableName | None = None, topics: int = 1, **_options) -> dict[str, Statement]:
        """Every runtime statement for a queue (and its delayed table, and the subscription table)."""
        groups = [(self.QUEUE_STATEMENTS, {"table": self.qualified(queue, profile)})]
        if delayed is not None:
            groups.append((self.DELAYED_STATEMENTS, {"table": self.qualified(queue, profile), "delayed": self.qualified(delayed, profile)}))
        if subscriptions is not None:
            groups.append((self.SUBSCRIPTION_STATEMENTS, {"subscriptions": self.qualified(subscriptions, profile)}))
        topic_list = ", ".join(f"@Topic{i}" for i in range(topics))
        out = {}
        for statements, identifiers in groups:
            for name, (attribute, doc) in statements.items():
                template = getattr(self, attribute).replace("{topics}", topic_list)
                out[name] = Statement(name, template, identifiers, parameters_of(template), doc, self.RESULT_COLUMNS.get(name, ()))
        return out

    # -- grants -------------------------------------------------------------------------
    # Why this engine has nothing to grant (printed instead of statements), or None.
    grants_unsupported: str | None = None

    def runtime_grants(self, plan, role: str) -> list[str]:
        """The GRANT statements (and comments) a runtime login needs for a grants.GrantPlan."""
        raise NotImplementedError(f"grants are not supported on {self.name}")

    def installer_grants(self, plan, role: str) -> list[str]:
        """What the installer/migration login needs for a grants.GrantPlan."""
        raise NotImplementedError(f"grants are not supported on {self.name}")

    # -- helpers shared by engines ---------------------------------------------------
    def display(self, name: TableName, profile: Profile | None = None) -> str:
        return self.qualified(name, profile)

    def refusal(self, spec: TableSpec, profile: Profile | None = None) -> str:
        return DROP_REFUSED.format(name=self.display(spec.name, profile))
