"""PostgreSQL's DDL: the columns of each table kind (the one source of the shapes `check`
expects), the create, drop and upgrade steps of the transport's tables, and schemas.

A mixin of `PostgreSQL` (engines/postgresql/__init__.py): it reaches the class's quoting, names and
helpers (`qualified`, `_fields`, `dollar_tag`) through `self`.
"""

from __future__ import annotations

from typing import Any

from ...schema import Kind, SchemaName, TableName, TableSpec
from ...shapes import Column, IndexShape, TableShape, shape_columns
from ...versions import Profile


class DDL:
    """Columns, expected shapes, and every statement that creates, drops or changes a transport table."""

    # Types as format_type() prints them. Seq's type follows the topology's seq_type (SEQ_TYPES).
    MESSAGE_COLUMNS = (
        Column("Id", "uuid", False),
        Column("Expires", "timestamp without time zone", True),
        Column("Headers", "text", False),
        Column("Body", "bytea", True),
    )
    COLUMNS = {
        Kind.QUEUE: MESSAGE_COLUMNS + (Column("Seq", None, False),),
        Kind.DELAYED: (
            Column("Id", "uuid", False),
            Column("Headers", "text", False),
            Column("Body", "bytea", True),
            Column("Due", "timestamp with time zone", False),
        ),
        Kind.SUBSCRIPTIONS: (
            Column("QueueAddress", "character varying(200)", False),
            Column("Endpoint", "character varying(200)", False),
            Column("Topic", "character varying(200)", False),
        ),
        # the queue's message columns, Seq the archive's own key, then when, why and who archived
        Kind.ARCHIVE: MESSAGE_COLUMNS
        + (
            Column("Seq", "bigint", False),
            Column("ArchivedAt", "timestamp with time zone", False),
            Column("ArchivedWhy", "text", False),
            Column("ArchivedBy", "text", False),
        ),
        Kind.ACTION_LOG: (
            Column("Id", "bigint", False),
            Column("At", "timestamp with time zone", False),
            Column("Who", "text", False),
            Column("Action", "text", False),
            Column("Target", "text", False),
            Column("Messages", "integer", False),
        ),
    }
    SEQ_TYPES = {"serial": "integer", "bigserial": "bigint"}
    BODY_STRING_COLUMN = ("text", True)  # GENERATED ALWAYS AS (encode(Body, 'escape')) STORED

    # -- expected shapes (check; the live side is Catalog.read_shapes) -------------------
    # As the catalog prints them (pg_get_expr); Seq's nextval names the serial sequence the column owns.
    BODY_STRING_EXPRESSION = "encode(body, 'escape'::text) stored"
    DELAYED_ID_DEFAULT = "gen_random_uuid()"

    def expected_shape(self, spec: TableSpec, profile: Profile) -> TableShape:
        shape = self._expected_structure(spec, profile)
        if spec.kind in (Kind.QUEUE, Kind.DELAYED, Kind.SUBSCRIPTIONS, Kind.ARCHIVE, Kind.ACTION_LOG):
            shape.names = {column: column for column in shape.columns}  # created unquoted: folded to lower case
        if spec.kind in (Kind.QUEUE, Kind.ARCHIVE, Kind.ACTION_LOG):
            key = "id" if spec.kind is Kind.ACTION_LOG else "seq"
            shape.defaults[key] = self.Catalog.NEXTVAL_OWNED
            shape.numbering[key] = self.Catalog.OWNED_SEQUENCE
        elif spec.kind is Kind.DELAYED:
            shape.defaults["id"] = self.DELAYED_ID_DEFAULT
        if "bodystring" in shape.columns:
            shape.generated["bodystring"] = self.BODY_STRING_EXPRESSION
        return shape

    def _expected_structure(self, spec: TableSpec, profile: Profile) -> TableShape:
        if spec.kind is Kind.QUEUE:
            columns = shape_columns(self.COLUMNS[Kind.QUEUE], seq=self.SEQ_TYPES[spec.seq_type])
            if self.has_body_string(spec, profile):
                columns["bodystring"] = self.BODY_STRING_COLUMN
            indexes = [IndexShape(("id",), unique=True), IndexShape(("seq",), unique=True)]
        elif spec.kind is Kind.DELAYED:
            columns = shape_columns(self.COLUMNS[Kind.DELAYED])
            if self.has_body_string(spec, profile):
                columns["bodystring"] = self.BODY_STRING_COLUMN
            due = self.index_names(spec)[0].table
            indexes = [IndexShape(("id",), unique=True), IndexShape(("due",), name=due)]
        elif spec.kind is Kind.SAGA:
            columns = dict(self.SAGA_SHAPE_COLUMNS)
            indexes = [IndexShape(("id",), unique=True)]
            names = dict(self.SAGA_IDENTIFIERS)
            for c in spec.correlations:
                column = self.correlation_column(c.name)
                columns[column.lower()] = (self.SHAPE_CORRELATION_TYPES[c.type], True)
                names[column.lower()] = column  # quoted, as the installer adds it
                indexes.append(IndexShape((column.lower(),), unique=True, name=self.correlation_index(spec, c.name)))
            return TableShape(columns, indexes, names=names)
        elif spec.kind is Kind.OUTBOX:
            columns = shape_columns(self.OUTBOX_COLUMNS)
            indexes = [IndexShape(("messageid",), unique=True)]
            indexes += [IndexShape((column.lower(),), name=index) for index, column in self.OUTBOX_INDEXES.items()]
            names = {c.name.lower(): c.name for c in self.OUTBOX_COLUMNS}  # quoted
            return TableShape(columns, indexes, defaults=dict(self.OUTBOX_DEFAULTS), names=names)
        elif spec.kind is Kind.ARCHIVE:
            columns = shape_columns(self.COLUMNS[Kind.ARCHIVE])
            indexes = [IndexShape(("seq",), unique=True), IndexShape(("archivedat",), name=self.index_names(spec)[0].table)]
        elif spec.kind is Kind.ACTION_LOG:
            columns = shape_columns(self.COLUMNS[Kind.ACTION_LOG])
            indexes = [IndexShape(("id",), unique=True)]
        else:
            columns = shape_columns(self.COLUMNS[Kind.SUBSCRIPTIONS])
            indexes = [IndexShape(("endpoint", "topic"), unique=True)]
        return TableShape(columns, indexes)

    # =====================================================================================
    # -- DDL ------------------------------------------------------------------------------
    # =====================================================================================
    # MESSAGE_COLUMNS as declared, in CREATE_QUEUE (Id its key) and CREATE_ARCHIVE (its Seq the key)
    MESSAGE_COLUMN_LIST = "Id uuid NOT NULL{id_key}, Expires TIMESTAMP, Headers TEXT NOT NULL, Body BYTEA"
    CREATE_QUEUE = (
        "CREATE TABLE IF NOT EXISTS {table} (" + MESSAGE_COLUMN_LIST.format(id_key=" PRIMARY KEY") + ", Seq {seq_type} NOT NULL UNIQUE)"
    )
    CREATE_DELAYED = (
        "CREATE TABLE IF NOT EXISTS {table} (Id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY, "
        "Headers text NOT NULL, Body bytea, Due timestamptz NOT NULL) WITH (fillfactor=100)"
    )
    CREATE_DUE_INDEX = "CREATE INDEX IF NOT EXISTS {index} on {table}(Due)"
    CREATE_SUBSCRIPTIONS = (
        "CREATE TABLE IF NOT EXISTS {table} (QueueAddress VARCHAR(200) NOT NULL, Endpoint VARCHAR(200) NOT NULL, "
        "Topic VARCHAR(200) NOT NULL, PRIMARY KEY (Endpoint, Topic)) WITH (fillfactor=100)"
    )
    CREATE_ARCHIVE = (
        "CREATE TABLE IF NOT EXISTS {table} ("
        + MESSAGE_COLUMN_LIST.format(id_key="")
        + ", Seq bigserial NOT NULL PRIMARY KEY, ArchivedAt timestamptz NOT NULL, ArchivedWhy text NOT NULL, ArchivedBy text NOT NULL)"
    )
    CREATE_ARCHIVED_AT_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} (ArchivedAt)"
    CREATE_ACTION_LOG = (
        "CREATE TABLE IF NOT EXISTS {table} (Id bigserial PRIMARY KEY, At timestamptz NOT NULL, Who text NOT NULL, "
        "Action text NOT NULL, Target text NOT NULL, Messages integer NOT NULL)"
    )
    DROP_GUARDED = """\
DO {tag}
BEGIN
    -- nested, not AND: PL/pgSQL plans an expression whole, and the table may be gone already
    IF to_regclass({table_literal}) IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM {table}{where}) THEN
            RAISE EXCEPTION USING MESSAGE = {message}, ERRCODE = 'object_in_use';
        END IF;
    END IF;
END
{tag}"""
    DROP_TABLE = "DROP TABLE IF EXISTS {table}"
    # A dropped queue's subscription rows: those whose address's table part (before the first '@')
    # is the queue and whose schema part (up to the next '@') names its schema; a catalog part does
    # not qualify names here (transport-facts §5, §7).
    DELETE_SUBSCRIBERS_OF = (
        "DELETE FROM {subscriptions} WHERE split_part(QueueAddress, '@', 1) = @Table AND split_part(QueueAddress, '@', 2) = ANY(@Schemas)"
    )
    HAS_TABLE = "SELECT to_regclass(@Name) IS NOT NULL"
    SCRIPT_IF_TABLE_EXISTS = """\
DO {tag}
BEGIN
    IF to_regclass({name}) IS NOT NULL THEN
        {statement};
    END IF;
END
{tag}"""
    # The transport's AddMessageBodyStringColumn as 8.1.13 and 9.0.2+ ship it (one anonymous
    # block, run after the queue's creation): it checks the table and the column, takes a
    # transaction-scoped advisory lock so concurrent installers add the column once, checks the
    # column again and adds it. {schema_literal}/{name_literal} are the raw schema and table as
    # string literals, {schema_bare} the schema unquoted where that means the same schema, {name}
    # the quoted table, {lock_id} advisory_lock_id() of the qualified name.
    ADD_BODY_STRING = """\
DO {tag}
BEGIN

IF NOT EXISTS (
   SELECT FROM information_schema.tables
   WHERE  table_schema = {schema_literal}
   AND    table_name   = {name_literal}
   )
THEN
    RETURN;
END IF;

IF EXISTS (
    SELECT FROM information_schema.columns
    WHERE  table_schema = {schema_literal}
    AND table_name={name_literal}
    AND column_name='bodystring'
    )
THEN
    RETURN;
END IF;

PERFORM pg_advisory_xact_lock('{lock_id}');

IF EXISTS (
    SELECT FROM information_schema.columns
    WHERE  table_schema = {schema_literal}
    AND table_name={name_literal}
    AND column_name='bodystring'
    )
THEN

    RETURN;
END IF;

ALTER TABLE {schema_bare}.{name}
ADD BodyString text GENERATED ALWAYS AS (encode(Body, 'escape')) STORED;

END
{tag}"""
    DROP_BODY_STRING = "ALTER TABLE {table} DROP COLUMN IF EXISTS BodyString"
    SEQ_COLUMN_TYPE = "ALTER TABLE {table} ALTER COLUMN Seq TYPE {column_type}"
    SEQ_SEQUENCE_TYPE = """\
DO {tag}
BEGIN
    EXECUTE format('ALTER SEQUENCE %s AS {column_type}', pg_get_serial_sequence({table_literal}, 'seq'));
END
{tag}"""
    RENAME_INDEX = "ALTER INDEX {index} RENAME TO {new}"
    CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"
    DROP_SCHEMA_IF_EMPTY = """\
DO {tag}
BEGIN
    DROP SCHEMA IF EXISTS {schema};
EXCEPTION WHEN dependent_objects_still_exist THEN
    NULL;
END
{tag}"""

    def create_queue(self, spec: TableSpec, profile: Profile) -> list[str]:
        batches = [self.CREATE_QUEUE.format(seq_type=spec.seq_type, **self._fields(spec))]
        if self.has_body_string(spec, profile):
            batches += self.add_body_string(spec, profile)
        return batches

    def add_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        schema = spec.name.schema if spec.name.schema is not None else self.default_schema
        fields = {
            "schema_literal": self.literal(schema),
            "name_literal": self.literal(spec.name.table),
            "schema_bare": self.bare(schema),
            "name": self.quote(spec.name.table),
        }
        tag = self.dollar_tag(*fields.values(), first="$$")
        return [self.ADD_BODY_STRING.format(tag=tag, lock_id=self.advisory_lock_id(self.qualified(spec.name)), **fields)]

    def drop_body_string(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.DROP_BODY_STRING.format(**self._fields(spec))]

    def create_delayed(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec)
        batches = [
            self.CREATE_DELAYED.format(**fields),
            self.CREATE_DUE_INDEX.format(index=self.quote(self.index_names(spec)[0].table), **fields),
        ]
        if self.has_body_string(spec, profile):  # the transport's option covers the delayed table too
            batches += self.add_body_string(spec, profile)
        return batches

    def create_subscriptions(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.CREATE_SUBSCRIPTIONS.format(**self._fields(spec))]

    def create_archive(self, spec: TableSpec, profile: Profile) -> list[str]:
        fields = self._fields(spec)
        index = self.quote(self.index_names(spec)[0].table)
        return [self.CREATE_ARCHIVE.format(**fields), self.CREATE_ARCHIVED_AT_INDEX.format(index=index, **fields)]

    def create_action_log(self, spec: TableSpec, profile: Profile) -> list[str]:
        return [self.CREATE_ACTION_LOG.format(**self._fields(spec))]

    def drop_table(self, spec: TableSpec, profile: Profile, discard_messages: bool) -> list[str]:
        fields = self._fields(spec)
        batches = []
        if not discard_messages:
            message = self.literal(self.refusal(spec))
            tag = self.dollar_tag(fields["table"], fields["table_literal"], message)
            batches.append(self.DROP_GUARDED.format(tag=tag, message=message, where=self.drop_guard_where(spec), **fields))
        batches.append(self.DROP_TABLE.format(**fields))
        return batches

    def script_value(self, value: Any) -> str:
        if isinstance(value, list):  # an array, as the driver binds a list
            return "ARRAY[" + ", ".join(self.literal(item) for item in value) + "]::text[]"
        return super().script_value(value)

    def script_delete_subscribers_of(self, subscriptions: TableName, queue: TableName) -> list[str]:
        name = self.literal(self.qualified(subscriptions))
        statements = super().script_delete_subscribers_of(subscriptions, queue)
        return [self.SCRIPT_IF_TABLE_EXISTS.format(tag=self.dollar_tag(s, name), name=name, statement=s) for s in statements]

    def change_seq_type(self, spec: TableSpec, old: str, new: str) -> list[str]:
        column_type = self.SEQ_TYPES[new]
        fields = self._fields(spec)
        tag = self.dollar_tag(fields["table_literal"])
        return [
            self.SEQ_COLUMN_TYPE.format(column_type=column_type, **fields),
            self.SEQ_SEQUENCE_TYPE.format(column_type=column_type, tag=tag, **fields),
        ]

    def rename_index(self, table: TableName, old: str, new: str) -> list[str] | None:
        return [self.RENAME_INDEX.format(index=self.qualified(TableName(old, table.schema)), new=self.quote(new))]

    def create_schema(self, schema: SchemaName) -> list[str]:
        if schema.schema == self.default_schema:
            return []
        return [self.CREATE_SCHEMA.format(schema=self.quote(schema.schema))]

    def drop_schema(self, schema: SchemaName) -> list[str]:
        if schema.schema == self.default_schema:
            return []
        quoted = self.quote(schema.schema)
        return [self.DROP_SCHEMA_IF_EMPTY.format(schema=quoted, tag=self.dollar_tag(quoted))]
