"""What every engine class provides. The neutral core only talks to this interface."""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from .. import errors
from ..schema import PERSISTENCE_KINDS, Correlation, Kind, SchemaName, TableName, TableSpec
from ..shapes import Column, TableShape
from ..statements import MESSAGE, Statement, fill, parameters_of, run_on
from ..versions import ExpiresIndex, Profile
from . import catalog as catalog_section
from . import grants as grants_section
from . import live_bus as live_bus_section
from . import online as online_section
from . import pipeline as pipeline_section
from . import script as script_section
from .connecting import Connecting

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

# The message a refused drop carries, on every engine.
DROP_REFUSED = (
    "refusing to drop queue {name}: it still holds messages. Move or consume them first "
    "(sqltransport-schema pipeline), or list the table under discard: in topology.yaml to drop it with its messages"
)

SAGA_DROP_REFUSED = (
    "refusing to drop saga table {name}: it still holds saga instances (sagas in progress). Let them complete "
    "first, or list the table under discard: in topology.yaml to drop it with its data"
)
OUTBOX_DROP_REFUSED = (
    "refusing to drop outbox table {name}: it still holds messages not yet dispatched (Dispatched = false). Let the "
    "endpoint dispatch them first, or list the table under discard: in topology.yaml to drop it with its rows"
)
# The message of a refused promotion (drop of the old correlation column), on every engine.
BACKFILL_REFUSED = (
    "refusing to drop {old} of saga table {name}: some rows still have {new} NULL (the backfill is not done). "
    "Backfill it first: sqltransport-schema pipeline backfill --property {prop} --column {new} (PostgreSQL), "
    "or e.g. UPDATE {name} SET {new_quoted} = <the saga data's {prop}> WHERE {new_quoted} IS NULL, "
    "or let the endpoint update each saga (every update writes {new}); then run the upgrade again"
)


_S = TypeVar("_S")


class _Section(Generic[_S]):
    """A dialect's section: an instance of the dialect's nested class of that name (its engine's
    subclass), made on first use and kept on the dialect, as a cached property would."""

    def __init__(self, nested: str, doc: str):
        self.nested = nested
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, dialect: Dialect | None, owner: type | None = None) -> _S:
        if dialect is None:
            return self  # type: ignore[return-value]  # the class's attribute: the descriptor itself
        made = dialect.__dict__[self.name] = getattr(dialect, self.nested)(dialect)
        return made


class LockHolder(NamedTuple):
    """A session that holds a lock on a table a migration waited for (what the migration logs)."""

    pid: int
    application: str
    state: str
    query_start: datetime | None
    query: str
    mode: str
    seconds: float | None = None  # how long its transaction has been open (None: unknown)


class Dialect(Connecting):
    """One database engine: quoting, name limits, and every DDL statement it runs.

    Methods that produce DDL return a list of batches: complete SQL texts that run
    one after the other (on SQL Server each is a batch, separated by GO in scripts).
    """

    name: str = ""
    sqlalchemy_name: str = ""  # the SQLAlchemy dialect's name
    drivers: tuple[str, ...] = ()  # DBAPI modules whose connections reach this engine (runtime driver path)
    default_schema: str | None = None
    case_insensitive_names = False
    # What the layers above ask instead of comparing engine names (tests/test_layers.py holds them to it):
    batch_separator: str | None = None  # the line that ends each statement a DBA pastes into the engine's client
    database_file = False  # a local file: connecting creates it when missing, and a pool keeps nothing worth keeping
    explicit_begin = False  # the driver begins transactions lazily: db.make_engine begins each one itself
    columns_beside_headers = False  # pipeline rows: CorrelationId, ReplyToAddress as queue columns, delayed rows without Id

    # -- identifiers -----------------------------------------------------------------
    def quote(self, identifier: str) -> str:
        raise NotImplementedError

    def literal(self, text: str) -> str:
        """A string literal; names only ever reach SQL text through here or quote()."""
        return "'" + text.replace("'", "''") + "'"

    def qualified(self, name: TableName, profile: Profile | None = None) -> str:
        raise NotImplementedError

    # False where a table is known by its name alone (a schema in an address is then dropped).
    has_schemas = True
    # False where the upstream transport's addresses have no catalog part (PostgreSQL's are table@schema: its
    # catalog is the database connected to); the address of a table then leaves the topology's catalog out.
    has_catalogs = True
    # A refused DDL statement can be undone to a savepoint and the migration's transaction goes on
    # (a refused drop, then the run looks for the others). Not where DDL commits implicitly (MySQL)
    # or an error may doom the transaction (SQL Server): there the first refusal ends the run.
    ddl_savepoints = False

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

    def script_name_problems(self, name: TableName) -> list[tuple[str, str]]:
        """(part, problem) for each part of the name this engine's deployment scripts cannot carry as written."""
        return []

    def lock_table_capacity(self, connection: Connection) -> int | None:
        """How many locks all the transactions of this server can hold at once (None: no such limit)."""
        return None

    # The lock table of a server with the engine's default settings: what an offline script, which
    # reads no server, commits part way for (None: no such limit).
    DEFAULT_LOCK_TABLE_CAPACITY: int | None = None

    def lock_table_full(self, error: BaseException) -> str | None:
        """The server setting to raise when a driver error says its lock table is full, else None."""
        return None

    def new_database_in_wal(self, dbapi_connection: Any) -> bool:
        """Switch a database the migrations are about to create to write-ahead logging; True if
        switched (nothing to do here: only a file database is created by connecting)."""
        return False

    # -- bounded lock waits of migrations (migrate/locks.py, docs/live-migrations.md) -------
    def set_lock_timeout(self, connection: Connection, milliseconds: int) -> None:
        """Make each later statement on this migration connection give up waiting for a lock after
        `milliseconds` (0: wait as long as it takes). Nothing on engines without such a setting."""

    def lock_timed_out(self, error: BaseException) -> bool:
        """Whether a driver error is this engine's "gave up waiting for a lock"."""
        return False

    # The codes a driver reports when one of this engine's DDL guards refuses a step (a drop of a table
    # that holds rows, a saga promotion before its backfill): SQLSTATEs, error numbers (set per engine).
    GUARD_ERROR_CODES: frozenset[str | int] = frozenset()

    def guard_refused(self, error: BaseException) -> bool:
        """Whether a driver error is one of this engine's DDL guards refusing (by its code, never its text)."""
        return not self.GUARD_ERROR_CODES.isdisjoint(driver_error_codes(error))

    def undefined_table(self, error: BaseException) -> bool:
        """Whether a driver error is this engine's "no such table" (a publish to a retired subscriber)."""
        return False

    # The codes a driver reports when a statement the connection keeps prepared no longer fits its
    # table (an online rewrite swapped it): the transaction is rolled back and run again at once.
    STALE_PLAN_CODES: frozenset[str | int] = frozenset()

    def stale_plan(self, error: BaseException) -> bool:
        """Whether a driver error (or SQLAlchemy's wrapper of one) says a prepared statement's plan
        no longer fits its table, by its code."""
        return not self.STALE_PLAN_CODES.isdisjoint(driver_error_codes(getattr(error, "orig", None) or error))

    # The codes a driver reports when the login may not read or change a table ("permission denied"):
    # SQLSTATEs, error numbers (set per engine). status reports such a table as not readable by the login.
    PERMISSION_DENIED_CODES: frozenset[str | int] = frozenset()

    def permission_denied(self, error: BaseException) -> bool:
        """Whether a driver error (or SQLAlchemy's wrapper of one) is this engine's "permission denied",
        by its code, never its text."""
        return not self.PERMISSION_DENIED_CODES.isdisjoint(driver_error_codes(getattr(error, "orig", None) or error))

    def one_migration_at_a_time(self, connection: Connection) -> None:
        """Wait (at most the lock timeout) until no other migration runs on this database; held until
        the connection closes. Nothing where Alembic's own transaction serialises them."""

    LOCK_TRY_MS = 0  # engines that take a table's lock in short tries (try_lock) set the length of a try

    def try_lock(self, connection: Connection, name: TableName, milliseconds: int) -> None:
        """Take the table's exclusive lock for the rest of the transaction, waiting at most
        `milliseconds` (a longer wait raises the engine's lock-timeout error)."""
        raise NotImplementedError

    def set_transaction_lock_timeout(self, connection: Connection, milliseconds: int) -> None:
        """The lock timeout for the rest of the transaction (take_lock puts the migration's back after
        its tries)."""

    def lock_holders(self, connection: Connection, name: TableName) -> list[LockHolder] | None:
        """The other sessions holding a lock on the table, oldest first (what a DBA looks at);
        None where the engine cannot tell."""
        return None

    # -- what a DDL step locks for how long (compile and script report it) -----------------
    def version_change_rewrite(self, old: Profile, new: Profile) -> str | None:
        """Why changing a queue between these releases holds an exclusive lock for a rewrite or rebuild
        of the whole table on this engine (None: only short locks)."""
        return None

    def version_change_effects(self, old: Profile, new: Profile) -> list[str]:
        """Each change an in-place change of a queue between these releases makes on this engine,
        with what it loses (compile lists them when it refuses a lowered transport_version)."""
        return []

    @staticmethod
    def expires_index_effect(old: Profile, new: Profile, index: str) -> list[str]:
        """The change of the Expires index between these releases, as version_change_effects says it."""
        if old.expires_index == new.expires_index:
            return []
        if new.expires_index is ExpiresIndex.NONE:
            return [f"{index} dropped: the purge of expired messages reads the whole table"]
        if old.expires_index is ExpiresIndex.NONE:
            return [f"{index} created"]
        if new.expires_index is ExpiresIndex.PLAIN:
            return [f"{index} no longer filtered (WHERE Expires IS NOT NULL): it indexes every message"]
        return [f"{index} filtered (WHERE Expires IS NOT NULL)"]

    def body_string_rewrite(self, profile: Profile) -> str | None:
        """Why adding BodyString rewrites the table on this engine (None: a change of metadata)."""
        return None

    def seq_type_rewrite(self, old: str, new: str) -> str | None:
        """Why changing the Seq column's type rewrites the table on this engine."""
        return None

    def correlation_index_build(self) -> str | None:
        """Why adding a saga's correlation column holds writers off for as long as its unique index
        takes to build on this engine (None: the index is built online)."""
        return None

    # -- columns -------------------------------------------------------------------------
    # The columns of each transport table kind, in DDL order (see shapes.Column): the one source
    # of `expected`, of expected_shape's columns and of the pipeline's layouts; a unit test holds
    # the CREATE templates to it.
    COLUMNS: dict[Kind, tuple[Column, ...]] = {}

    @functools.cached_property
    def expected(self) -> dict[str, frozenset[str]]:
        """Columns each table kind must have (lower case), to tell an adoptable table from a stranger."""
        return {kind.value: frozenset(c.name.lower() for c in columns) for kind, columns in self.COLUMNS.items()}

    def column_names(self, kind: Kind) -> tuple[str, ...]:
        """The columns of a table kind as the DDL spells them, in DDL order."""
        return tuple(c.name for c in self.COLUMNS[Kind(kind)])

    def expected_columns(self, spec: TableSpec) -> frozenset[str]:
        if spec.kind is Kind.SAGA:
            return self.SAGA_COLUMNS | {self.correlation_column(c.name).lower() for c in spec.correlations}
        if spec.kind is Kind.OUTBOX:
            return frozenset(c.name.lower() for c in self.OUTBOX_COLUMNS)
        return self.expected[spec.kind.value]

    def expected_shape(self, spec: TableSpec, profile: Profile) -> TableShape:
        """The columns and indexes our DDL gives this table (for `check`).

        It stays on the dialect, not in the catalog section: it is the expected side, derived from
        COLUMNS and the DDL's indexes, and reads no database; `catalog.read_shapes` is the live side."""
        raise errors.Unsupported(f"check does not support {self.name} yet")

    def unsupported(self, profile: Profile) -> str | None:
        """Why this engine cannot host the given transport version, or None."""
        return None

    def body_string_unsupported(self, profile: Profile) -> str | None:
        """Why this engine's tables of the given transport version cannot have BodyString, or None."""
        return None

    @staticmethod
    def has_body_string(spec: TableSpec, profile: Profile) -> bool:
        """Whether this engine's queue or delayed table of `spec` has a BodyString column."""
        return spec.body_string

    # -- DDL -------------------------------------------------------------------------
    def create_table(self, spec: TableSpec, profile: Profile) -> list[str]:
        builder = {
            Kind.QUEUE: self.create_queue,
            Kind.DELAYED: self.create_delayed,
            Kind.SUBSCRIPTIONS: self.create_subscriptions,
            Kind.SAGA: self.create_saga,
            Kind.OUTBOX: self.create_outbox,
            Kind.ARCHIVE: self.create_archive,
            Kind.ACTION_LOG: self.create_action_log,
        }[spec.kind]
        return builder(spec, profile)

    def create_queue(self, spec: TableSpec, profile: Profile) -> list[str]:
        raise NotImplementedError

    def create_delayed(self, spec: TableSpec, profile: Profile) -> list[str]:
        raise NotImplementedError

    def create_subscriptions(self, spec: TableSpec, profile: Profile) -> list[str]:
        raise NotImplementedError

    def create_archive(self, spec: TableSpec, profile: Profile) -> list[str]:
        """A queue's archive: the queue's message columns, the engine's own ordering column as its key,
        and ArchivedAt (indexed: purges go by age), ArchivedWhy and ArchivedBy."""
        raise errors.Unsupported(f"{self.name} has no archive tables yet")

    def create_action_log(self, spec: TableSpec, profile: Profile) -> list[str]:
        """The console's action log: Id (ascending), At, Who, Action, Target, Messages."""
        raise errors.Unsupported(f"{self.name} has no console action log yet")

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

    def rename_index(self, table: TableName, old: str, new: str) -> list[str] | None:
        """Statements that give an index of `table` another name (adopt: an index under an
        earlier name); None where the engine cannot rename an index in place."""
        return None

    def create_schema(self, schema: SchemaName) -> list[str]:
        return []

    def drop_schema(self, schema: SchemaName) -> list[str]:
        return []

    # -- subscriptions that follow their queues (a migration that drops a queue) -----------
    # DELETE_SUBSCRIBERS_OF deletes the rows of the subscription table ({subscriptions}) whose
    # QueueAddress names the dropped queue; subscriber_parameters gives its values. HAS_TABLE
    # (one row, true when the table @Name exists) guards it where the table may be gone.
    DELETE_SUBSCRIBERS_OF: str | None = None
    HAS_TABLE: str | None = None

    @staticmethod
    def address_part(name: str) -> str:
        """A schema or catalog as a canonical address brackets it (`]` doubled, transport-facts §5)."""
        return "[" + name.replace("]", "]]") + "]"

    def schema_spellings(self, queue: TableName) -> list[str]:
        """The schema parts of the addresses that name the queue's schema: bracketed, bare where that
        parses the same, and none at all ('' or '[]') for the engine's default schema."""
        schema = queue.schema if queue.schema is not None else self.default_schema
        if schema is None:
            return ["", "[]"]
        parts = [self.address_part(schema)]
        if not any(ch in schema for ch in "@[]"):
            parts.append(schema)
        fold = str.casefold if self.case_insensitive_names else str
        if self.default_schema is not None and fold(schema) == fold(self.default_schema):
            parts += ["", "[]"]
        return parts

    def subscriber_parameters(self, queue: TableName) -> dict[str, Any]:
        """The values of DELETE_SUBSCRIBERS_OF for a queue: its table (@Table) and the schema parts
        naming its schema (@Schemas); engines whose template reads other parameters add them."""
        return {"Table": queue.table, "Schemas": self.list_parameter(self.schema_spellings(queue))}

    def delete_subscribers_of(self, subscriptions: TableName, queue: TableName) -> tuple[Statement, dict[str, Any]] | None:
        """The DELETE of the subscription rows naming the queue, and its values (None: the engine has
        no subscription table)."""
        if self.DELETE_SUBSCRIBERS_OF is None:
            return None
        template = self.DELETE_SUBSCRIBERS_OF
        statement = Statement("delete_subscribers_of", template, {"subscriptions": self.qualified(subscriptions)}, parameters_of(template))
        values = self.subscriber_parameters(queue)
        return statement, {name: values[name] for name in statement.params}

    def table_exists(self, connection: Connection, name: TableName) -> bool:
        """Whether the table exists now (one catalog lookup)."""
        template = self.HAS_TABLE
        statement = Statement("table_exists", template, {}, parameters_of(template))
        return bool(run_on(connection, statement, {"Name": self.qualified(name) if self.has_schemas else name.table}).scalar())

    def script_value(self, value: Any) -> str:
        """A parameter's value as an offline script writes it (no driver binds it there)."""
        if value is None:
            return "NULL"
        if isinstance(value, list):
            value = json.dumps(value, ensure_ascii=False)
        return self.literal(value)

    def script_delete_subscribers_of(self, subscriptions: TableName, queue: TableName) -> list[str]:
        """DELETE_SUBSCRIBERS_OF as an offline script runs it: its values written in, guarded so that
        it does nothing where the subscription table does not exist."""
        found = self.delete_subscribers_of(subscriptions, queue)
        if found is None:
            return []
        statement, values = found
        return [statement.written({name: self.script_value(value) for name, value in values.items()})]

    # -- runtime statements -------------------------------------------------------------
    # name -> (class attribute holding the template, what it does). Engines whose statements
    # do not vary by version only write the templates; where releases differ, the attribute names a
    # method choosing the release's template (runtime_template), and the hooks below say the rest.
    QUEUE_STATEMENTS = {
        "send": ("SEND", "place a message on the queue"),
        "receive": ("RECEIVE", "take the oldest unlocked message, flagging it if expired"),
        "receive_batch": ("RECEIVE_BATCH", "take up to @BatchSize oldest unlocked messages, flagging expired ones"),
        "lock_batch": ("LOCK_BATCH", "lock up to @BatchSize oldest unlocked messages for this transaction, flagging expired ones"),
        "delete_locked": ("DELETE_LOCKED", "take the messages this transaction locked at the positions @Orders"),
        "savepoint": ("SAVEPOINT", "mark a savepoint before one message of a batch is handled"),
        "rollback_to_savepoint": ("ROLLBACK_TO_SAVEPOINT", "undo what one message's handler wrote since its savepoint"),
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
    RESULT_COLUMNS = {
        "receive": MESSAGE,
        "receive_batch": MESSAGE + ("Order",),
        "lock_batch": MESSAGE + ("Order",),
        "next_due": ("NextDue",),
    }
    TOPIC_PARAMETER = "Topic{i}"  # find_subscribers' parameters, i = 0, 1, ...

    def list_parameter(self, values: list) -> Any:
        """A list of values as this engine's statements take one parameter of many (@Orders): JSON
        text, which the statement unpacks (json_each, OPENJSON); engines with arrays override it."""
        return json.dumps(values)

    def now_parameter(self) -> Any:
        """The current UTC time as this engine's statements compare it (@Now), where they take one."""
        return None

    def runtime_cursor(self, dbapi_connection: Any) -> Any:
        """The one cursor the runtime keeps per DBAPI connection for its statements."""
        return dbapi_connection.cursor()

    @contextlib.contextmanager
    def committing_together(self, dbapi_connection: Any, cursor: Any, durable: bool = True) -> Iterator[Callable[[], None] | None]:
        """The statements of the block and the commit of the caller's transaction sent at once, where
        the driver can (a transaction's last writes, whose answers nobody reads: the outbox's store,
        its dispatch); here the block runs as it stands and the caller's own commit follows.
        durable=False: the commit need not wait for its flush to disk, where the engine can say so (a
        transaction whose loss in a crash of the server a durable one already redoes: the outbox's dispatch).

        Yields `begin_next` where the driver can also begin the next transaction in that round trip
        (None here): called in the block, it commits there and begins a new transaction, which the
        block's later statements run in and whose answers are read once the block has ended; the
        caller then ends that transaction itself (the outbox's take, begun with the store's commit)."""
        yield None

    checks_server_version = False  # whether refuse_older_server reads the server's version

    def refuse_older_server(self, sqlalchemy_dialect: Any, command: str) -> None:
        """errors.Unsupported when the server (SQLAlchemy's `server_version_info`) is older than `command` needs; any will do here."""

    def bind_runtime_connection(self, dbapi_connection: Any) -> None:
        """Set up a caller's driver connection once, when the runtime binds it (nothing to do here)."""

    def runtime_options(
        self, profile: Profile, *, delayed: TableName | None, subscriptions: TableName | None, topics: int, **options: Any
    ) -> dict[str, Any]:
        """runtime_statements' options checked (a UsageError says which is wrong), as the templates'
        methods read them; engines with options of their own add them."""
        if isinstance(topics, bool) or not isinstance(topics, int) or topics < 1:
            raise errors.UsageError(f"topics must be a positive integer, not {topics!r}")
        return options

    def runtime_identifiers(self, profile: Profile, queue: TableName) -> dict[str, str]:
        """The quoted names of the queue the templates place ({table}); engines add other forms."""
        return {"table": self.qualified(queue, profile)}

    def runtime_template(self, attribute: str, profile: Profile, options: dict[str, Any]) -> str | None:
        """The template a statement table's row names: a constant, or a method choosing the release's
        from the profile and options (None: the release has no such statement)."""
        found = getattr(self, attribute)
        return found(profile, options) if callable(found) else found

    def runtime_doc(self, name: str, doc: str, profile: Profile) -> str:
        """What a statement does, as `statements` prints it; engines whose releases differ say how."""
        return doc

    def runtime_columns(self, name: str, profile: Profile) -> tuple[str, ...]:
        """What each result column of a statement is; engines whose releases differ override it."""
        return self.RESULT_COLUMNS.get(name, ())

    def runtime_statements(
        self,
        profile: Profile,
        queue: TableName,
        *,
        delayed: TableName | None = None,
        subscriptions: TableName | None = None,
        topics: int = 1,
        **options: Any,
    ) -> dict[str, Statement]:
        """Every runtime statement for a queue (and its delayed table, and the subscription table): each
        row of the statement tables the release has, with the identifiers its template places."""
        options = self.runtime_options(profile, delayed=delayed, subscriptions=subscriptions, topics=topics, **options)
        names = self.runtime_identifiers(profile, queue)
        tables = [self.QUEUE_STATEMENTS]
        if delayed is not None:
            names["delayed"] = self.qualified(delayed, profile)
            tables.append(self.DELAYED_STATEMENTS)
        if subscriptions is not None:
            names["subscriptions"] = self.qualified(subscriptions, profile)
            tables.append(self.SUBSCRIPTION_STATEMENTS)
        lists = {"topics": [self.TOPIC_PARAMETER.format(i=i) for i in range(topics)]}
        out = {}
        for statements in tables:
            for name, (attribute, doc) in statements.items():
                template = self.runtime_template(attribute, profile, options)
                if template is None:
                    continue
                template = fill(template, lists=lists)
                identifiers = {key: value for key, value in names.items() if "{" + key + "}" in template}
                doc, columns = self.runtime_doc(name, doc, profile), self.runtime_columns(name, profile)
                binds = self.runtime_binds(params := parameters_of(template), profile)
                out[name] = Statement(name, template, identifiers, params, doc, columns, binds)
        return out

    def runtime_binds(self, params: tuple[str, ...], profile: Profile) -> tuple[tuple[str, Any], ...]:
        """How the driver binds parameters where its default will not do (Statement.binds); here each value binds by its type."""
        return ()

    # -- saga tables (SQL persistence; upstream-conformance §7) ------------------------------
    # Engines that hold saga tables only (no transport layout): queue, delayed and subscription operations emit nothing on them.
    saga_only = False
    # Correlation type -> column type; a type missing here cannot be held by this engine.
    CORRELATION_TYPES: dict[str, str] = {}
    # Lower-case names of the fixed saga columns (to tell an adoptable table from a stranger).
    SAGA_COLUMNS = frozenset({"id", "metadata", "data", "persistenceversion", "sagatypeversion", "concurrency"})
    # What a migration says where SQL persistence's installer stops with "Incorrect data type":
    # an existing correlation column of another type is never converted or used.
    SAGA_WRONG_TYPE = (
        "saga table {table}: column {column} exists with type {{found}}, not {expected}. SQL persistence's installer "
        "stops on this column too; give the property a new name (a transitional property) instead of a new type"
    )

    def holds(self, kind: Kind) -> bool:
        """Whether this engine deploys tables of this kind (SQL persistence's on every engine)."""
        return kind in PERSISTENCE_KINDS or not self.saga_only

    @staticmethod
    def saga_suffix(spec: TableSpec) -> str:
        """The saga's table suffix: the table name without the endpoint's prefix (upstream hashes it)."""
        prefix = spec.saga_prefix or ""
        return spec.name.table[len(prefix) :] if spec.name.table.startswith(prefix) else spec.name.table

    def persistence_table(self, spec: TableSpec) -> TableName:
        """The table SQL persistence reads this saga or outbox from (Oracle names them apart)."""
        return spec.name

    def correlation_column(self, prop: str) -> str:
        return "Correlation_" + prop

    def correlation_index(self, spec: TableSpec, prop: str) -> str:
        return "Index_Correlation_" + prop

    def saga_index_names(self, spec: TableSpec) -> list[TableName]:
        """A saga's correlation (or an outbox's) index names that share the schema's namespace with tables (collision checks)."""
        return []

    def saga_name_problems(self, spec: TableSpec) -> list[str]:
        """What this engine cannot hold of a saga table (its name, a column or index name too long)."""
        return [f"table name {problem}" for _part, problem in self.name_problems(spec.name) if _part == "table"]

    def _saga_fields(self, spec: TableSpec, correlation: Correlation | None = None) -> dict:
        """The names a saga template fills in: table, and for a correlation column, index, type."""
        raise errors.Unsupported(f"{self.name} has no saga DDL")

    def create_saga(self, spec: TableSpec, profile: Profile | None = None) -> list[str]:
        """The saga table with its correlation columns and their unique indexes (which ignore NULLs)."""
        batches = [self.CREATE_SAGA.format(**self._saga_fields(spec))]
        for correlation in spec.correlations:
            batches += self.add_saga_correlation(spec, correlation)
        return batches

    def add_saga_correlation(self, spec: TableSpec, correlation: Correlation) -> list[str]:
        """Add a Correlation_<prop> column and its unique index to an existing saga table."""
        fields = self._saga_fields(spec, correlation)
        return [self.ADD_CORRELATION.format(**fields), self.CREATE_CORRELATION_INDEX.format(**fields)]

    def wrong_type_message(self, spec: TableSpec, correlation: Correlation, expected: str) -> str:
        """The refusal of an existing correlation column of another type ({found} left to the database)."""
        return self.SAGA_WRONG_TYPE.format(
            table=self.display(self.persistence_table(spec)), column=self.correlation_column(correlation.name), expected=expected
        )

    def drop_saga_correlation(self, spec: TableSpec, correlation: Correlation, require: Correlation | None) -> list[str]:
        """Drop a correlation column and its index; with require, the database refuses while
        any row has Correlation_<require> NULL (the promotion's backfill is not done)."""
        raise errors.Unsupported(f"{self.name} has no saga DDL")

    def backfill_refusal(self, spec: TableSpec, old: Correlation, new: Correlation) -> str:
        new_column = self.correlation_column(new.name)
        return BACKFILL_REFUSED.format(
            old=self.correlation_column(old.name),
            new=new_column,
            new_quoted=self.quote(new_column),
            prop=new.name,
            name=self.display(self.persistence_table(spec)),
        )

    # Runtime statements of a saga table, as SQL persistence's runtime writes them: the select
    # list in its order (read by position), its parameter names, the correlation column never
    # updated. {table} is the saga table, {correlation} and {transitional} the quoted correlation
    # columns. Column names are unquoted where the engine folds them to the DDL's case. These
    # defaults take no row lock (SQLite locks the database on write); the other engines lock
    # as upstream does.
    SAGA_GET_BY_ID = """\
SELECT Id, SagaTypeVersion, Concurrency, Metadata, Data
FROM {table}
WHERE Id = @Id"""
    SAGA_FIND = """\
SELECT Id, SagaTypeVersion, Concurrency, Metadata, Data
FROM {table}
WHERE {correlation} = @propertyValue"""
    # This project's addition (upstream looks sagas up by the correlation property only): the
    # saga by its transitional value, for a caller that finds none by the correlation value.
    SAGA_FIND_BY_TRANSITIONAL = """\
SELECT Id, SagaTypeVersion, Concurrency, Metadata, Data
FROM {table}
WHERE {transitional} = @TransitionalCorrelationId"""
    SAGA_INSERT = """\
INSERT INTO {table} (Id, Metadata, Data, PersistenceVersion, SagaTypeVersion, Concurrency{columns})
VALUES (@Id, @Metadata, @Data, @PersistenceVersion, @SagaTypeVersion, 1{values})"""
    # Optimistic concurrency: 0 rows affected = another update or completion won the race.
    SAGA_UPDATE = """\
UPDATE {table}
SET Data = @Data, PersistenceVersion = @PersistenceVersion, SagaTypeVersion = @SagaTypeVersion,
    Concurrency = @Concurrency + 1{set_transitional}
WHERE Id = @Id AND Concurrency = @Concurrency"""
    SAGA_COMPLETE = """\
DELETE FROM {table}
WHERE Id = @Id AND Concurrency = @Concurrency"""
    SAGA_STATEMENTS = {
        "get_saga_by_id": ("SAGA_GET_BY_ID", "read a saga by its Id, locking its row"),
        "find_saga": ("SAGA_FIND", "find a saga by its correlation value, locking its row"),
        "find_saga_by_transitional": (
            "SAGA_FIND_BY_TRANSITIONAL",
            "this project's addition: find a saga by its transitional correlation value",
        ),
        "insert_saga": ("SAGA_INSERT", "store a new saga (Concurrency 1)"),
        "update_saga": ("SAGA_UPDATE", "update a saga if Concurrency is unchanged (0 rows: lost the race)"),
        "complete_saga": ("SAGA_COMPLETE", "delete a completed saga if Concurrency is unchanged (0 rows: lost the race)"),
    }
    SAGA_RESULT = ("Id", "SagaTypeVersion", "Concurrency", "Metadata", "Data")

    def saga_statements(self, spec: TableSpec, profile: Profile | None = None) -> dict[str, Statement]:
        """Every runtime statement of one saga table; find_saga only with a correlation property,
        find_saga_by_transitional only with a transitional one."""
        identifiers = {"table": self.qualified(self.persistence_table(spec), profile)}
        # the optional parts of insert and update, as template text: parameters stay in the template
        parts = {"columns": "", "values": "", "set_transitional": ""}
        if spec.correlation is not None:
            identifiers["correlation"] = self.quote(self.correlation_column(spec.correlation.name))
            parts["columns"] += ", {correlation}"
            parts["values"] += ", @CorrelationId"
        if spec.transitional is not None:
            identifiers["transitional"] = self.quote(self.correlation_column(spec.transitional.name))
            parts["columns"] += ", {transitional}"
            parts["values"] += ", @TransitionalCorrelationId"
            parts["set_transitional"] = ",\n    {transitional} = @TransitionalCorrelationId"
        skip = {"find_saga"} if spec.correlation is None else set()
        skip |= {"find_saga_by_transitional"} if spec.transitional is None else set()
        return self.persistence_statements(self.SAGA_STATEMENTS, identifiers, self.SAGA_RESULT, parts, skip)

    def persistence_statements(
        self,
        rows: dict[str, tuple[str, str]],
        identifiers: dict[str, str],
        result: tuple[str, ...],
        parts: dict[str, str] | None = None,
        skip: set[str] | tuple = (),
    ) -> dict[str, Statement]:
        """The statements of one SQL persistence table (saga or outbox): each row's template with its
        optional parts in (identifiers stay slots until run), and what a SELECT returns."""
        keep = {name: "{" + name + "}" for name in ("table", "correlation", "transitional")}
        out = {}
        for name, (attribute, doc) in rows.items():
            if name in skip:
                continue
            template = getattr(self, attribute).format(**keep, **(parts or {}))
            columns = result if template.startswith("SELECT") else ()
            out[name] = Statement(name, template, identifiers, parameters_of(template), doc, columns)
        return out

    # -- outbox tables (SQL persistence, upstream-conformance §8; docs/outbox.md) -------------
    # <prefix>OutboxData as the installer leaves it: OUTBOX_COLUMNS (name, type as the catalog
    # reads it back, nullable) in DDL order, CREATE_OUTBOX and each index's CREATE_OUTBOX_INDEXES
    # step (each skipped where it exists, so an installer-made table gains no second index),
    # filled from _saga_fields. A drop is refused while a row is not dispatched.
    OUTBOX_COLUMNS: tuple[Column, ...] = ()
    # index -> column, as the installer names them on PostgreSQL and MySQL (SQL Server: one, filtered)
    OUTBOX_INDEXES = {"Index_DispatchedAt": "DispatchedAt", "Index_Dispatched": "Dispatched"}
    CREATE_OUTBOX: str | None = None
    CREATE_OUTBOX_INDEXES: tuple[str, ...] = ()
    OUTBOX_UNDISPATCHED = "Dispatched = 0"

    # Runtime statements of an outbox table, as SQL persistence's outbox runs them (its parameter
    # names; the upstream's optimistic store: Dispatched takes its default, false). The DispatchedAt
    # written and the bound of the cleanup are parameters (the caller's UTC now), as upstream's.
    # These defaults are SQLite's (cleanup: one batch by key, SQLite's DELETE takes no LIMIT).
    OUTBOX_STORE = """\
INSERT INTO {table} (MessageId, Operations, PersistenceVersion)
VALUES (@MessageId, @Operations, @PersistenceVersion)"""
    OUTBOX_GET = """\
SELECT Dispatched, Operations
FROM {table}
WHERE MessageId = @MessageId"""
    OUTBOX_SET_AS_DISPATCHED = """\
UPDATE {table}
SET Dispatched = 1, DispatchedAt = @DispatchedAt, Operations = '[]'
WHERE MessageId = @MessageId"""
    OUTBOX_CLEANUP = """\
DELETE FROM {table}
WHERE MessageId IN (
    SELECT MessageId FROM {table}
    WHERE Dispatched = 1 AND DispatchedAt < @DispatchedBefore
    LIMIT @BatchSize
)"""
    OUTBOX_STATEMENTS = {
        "store_outbox": ("OUTBOX_STORE", "store a handled message's outgoing operations, not dispatched yet"),
        "get_outbox": ("OUTBOX_GET", "read a message's outbox row: whether it was dispatched, and its operations"),
        "set_outbox_dispatched": (
            "OUTBOX_SET_AS_DISPATCHED",
            "mark a message's operations dispatched at @DispatchedAt, emptying them to '[]'",
        ),
        "cleanup_outbox": ("OUTBOX_CLEANUP", "delete up to @BatchSize rows dispatched before @DispatchedBefore"),
    }
    OUTBOX_RESULT = ("Dispatched", "Operations")
    # The pump's batch forms of get and set as dispatched (not SQL persistence's: the runtime's own,
    # one statement for a batch's rows, @MessageIds a list parameter as `list_parameter` binds it).
    # None where an engine has none: the pump then runs get and set as dispatched once per message.
    OUTBOX_GET_BATCH: str | None = None
    OUTBOX_SET_AS_DISPATCHED_BATCH: str | None = None
    OUTBOX_BATCH_STATEMENTS = {
        "get_outbox_batch": ("OUTBOX_GET_BATCH", "read the outbox rows of the messages @MessageIds: their id, dispatched, operations"),
        "set_outbox_batch_dispatched": (
            "OUTBOX_SET_AS_DISPATCHED_BATCH",
            "mark the operations of the messages @MessageIds dispatched at @DispatchedAt, emptying them to '[]'",
        ),
    }
    OUTBOX_BATCH_RESULT = ("MessageId", "Dispatched", "Operations")
    # The pump's lock of a batch with the outbox rows of the messages it locks, in one statement:
    # {lock} is the queue's lock_batch ({queue} its table), each row its columns then the row's
    # Dispatched and Operations (NULL: never handled). None: the lock and get_outbox_batch apart.
    OUTBOX_LOCK_BATCH: str | None = None
    OUTBOX_LOCK_RESULT = ("Dispatched", "Operations")
    # The dispatch's take of a batch with its outbox rows set as dispatched, in one statement:
    # {take} is the queue's delete_locked ({queue} its table), whose row count stays the statement's.
    # None: the take, then set_outbox_batch_dispatched.
    OUTBOX_TAKE_BATCH: str | None = None

    def outbox_time(self, moment: datetime) -> Any:
        """A UTC time as the outbox's DispatchedAt column holds it (@DispatchedAt, @DispatchedBefore):
        a naive UTC datetime, as upstream binds DateTime.UtcNow."""
        return moment.astimezone(timezone.utc).replace(tzinfo=None)

    def outbox_statements(self, spec: TableSpec, profile: Profile | None = None) -> dict[str, Statement]:
        """Every runtime statement of one outbox table: store, get, set as dispatched, cleanup."""
        identifiers = {"table": self.qualified(self.persistence_table(spec), profile)}
        return self.persistence_statements(self.OUTBOX_STATEMENTS, identifiers, self.OUTBOX_RESULT)

    def outbox_batch_statements(self, spec: TableSpec, profile: Profile | None = None) -> dict[str, Statement]:
        """The pump's batch statements of one outbox table this engine has (OUTBOX_BATCH_STATEMENTS)."""
        identifiers = {"table": self.qualified(self.persistence_table(spec), profile)}
        missing = {name for name, (attribute, _) in self.OUTBOX_BATCH_STATEMENTS.items() if getattr(self, attribute) is None}
        return self.persistence_statements(self.OUTBOX_BATCH_STATEMENTS, identifiers, self.OUTBOX_BATCH_RESULT, skip=missing)

    def outbox_lock_batch(self, spec: TableSpec, lock: Statement) -> Statement | None:
        """The queue's `lock` statement joined with the outbox table's rows of the messages it locks
        (OUTBOX_LOCK_BATCH), None where this engine has no such form."""
        if self.OUTBOX_LOCK_BATCH is None:
            return None
        template = self.OUTBOX_LOCK_BATCH.replace("{lock}", lock.template.replace("{table}", "{queue}"))
        identifiers = {"table": self.qualified(self.persistence_table(spec)), "queue": lock.identifiers["table"]}
        doc = "lock up to @BatchSize oldest unlocked messages with their outbox rows (Dispatched, Operations; NULL: none)"
        return Statement("lock_outbox_batch", template, identifiers, parameters_of(template), doc, lock.columns + self.OUTBOX_LOCK_RESULT)

    def outbox_take_batch(self, spec: TableSpec, take: Statement) -> Statement | None:
        """The queue's `take` (delete_locked) with the outbox table's rows of the messages it takes set
        as dispatched (OUTBOX_TAKE_BATCH), None where this engine has no such form."""
        if self.OUTBOX_TAKE_BATCH is None:
            return None
        template = self.OUTBOX_TAKE_BATCH.replace("{take}", take.template.replace("{table}", "{queue}"))
        identifiers = {"table": self.qualified(self.persistence_table(spec)), "queue": take.identifiers["table"]}
        doc = "take the locked messages at @Orders and set their outbox rows @MessageIds dispatched at @DispatchedAt"
        return Statement("take_outbox_batch", template, identifiers, parameters_of(template), doc, ())

    def create_outbox(self, spec: TableSpec, profile: Profile | None = None) -> list[str]:
        """The outbox table and its indexes, as SQL persistence's installer creates them."""
        if self.CREATE_OUTBOX is None:
            raise errors.Unsupported(f"{self.name} has no outbox DDL")
        fields = self._outbox_fields(spec, profile)
        return [self.CREATE_OUTBOX.format(**fields)] + [index.format(**fields) for index in self.CREATE_OUTBOX_INDEXES]

    def _outbox_fields(self, spec: TableSpec, profile: Profile | None = None) -> dict:
        """The names an outbox template fills in (the saga tables' fields; an engine whose names depend
        on the transport version takes the profile, as its saga tables do)."""
        return self._saga_fields(spec)

    def outbox_name_problems(self, spec: TableSpec) -> list[str]:
        """What this engine cannot hold of an outbox table's name."""
        return [f"table name {problem}" for _part, problem in self.name_problems(self.persistence_table(spec)) if _part == "table"]

    def drop_guard_where(self, spec: TableSpec) -> str:
        """The rows a guarded drop refuses to lose, as a WHERE clause ('' for every row): an outbox's
        undispatched rows only (dispatched rows wait for cleanup and may go)."""
        return " WHERE " + self.OUTBOX_UNDISPATCHED if spec.kind is Kind.OUTBOX else ""

    # -- nested sections: catalog reads, grants, deployment scripts, the pipeline (engines/pipeline.py),
    # status and retry (engines/live_bus.py), online rewrites of queue tables (engines/online.py).
    # Each engine nests subclasses of these classes; the instances, made on first use, reach back to
    # the dialect for quoting and names.
    Catalog = catalog_section.Catalog
    Grants = grants_section.Grants
    Script = script_section.Script
    Pipeline = pipeline_section.Pipeline
    LiveBus = live_bus_section.LiveBus
    Online = online_section.Online
    catalog = _Section[catalog_section.Catalog]("Catalog", "This engine's catalog reads: existing columns, live shapes, start-up warnings.")
    grants = _Section[grants_section.Grants]("Grants", "This engine's GRANT statements for `sqltransport-schema grants`.")
    script = _Section[script_section.Script]("Script", "This engine's offline-script writing and repeatable version stamping.")
    pipeline = _Section[pipeline_section.Pipeline](
        "Pipeline", "This engine's pipeline section: connections, layout, ledger and partition statements."
    )
    live_bus = _Section[live_bus_section.LiveBus](
        "LiveBus", "This engine's statements of the live bus: status figures, the error queue's reads, retry batches, archive, action log."
    )
    online = _Section[online_section.Online]("Online", "This engine's statements for rewriting a queue table beside the live one.")

    # -- helpers shared by engines ---------------------------------------------------
    def display(self, name: TableName, profile: Profile | None = None) -> str:
        return self.qualified(name, profile)

    def refusal(self, spec: TableSpec, profile: Profile | None = None) -> str:
        if spec.kind is Kind.SAGA:
            return SAGA_DROP_REFUSED.format(name=self.display(self.persistence_table(spec), profile))
        if spec.kind is Kind.OUTBOX:
            return OUTBOX_DROP_REFUSED.format(name=self.display(self.persistence_table(spec), profile))
        return DROP_REFUSED.format(name=self.display(spec.name, profile))


_NATIVE_ERROR = re.compile(r"\((-?\d+)\) \(SQL\w+\)")  # pyodbc: "... (50000) (SQLExecDirectW)"


def driver_error_codes(error: BaseException) -> set[str | int]:
    """The codes a DB-API driver's error carries, whichever driver raised it: psycopg's sqlstate,
    psycopg2's pgcode, sqlite3's sqlite_errorcode, pymysql/MySQLdb's errno and pymssql's number
    (args[0]), pyodbc's SQLSTATE (args[0]) and native error (after the message), oracledb's code."""
    codes: set[str | int] = set()
    for attribute in ("sqlstate", "pgcode", "sqlite_errorcode", "errno"):
        value = getattr(error, attribute, None)
        if value is not None:
            codes.add(value)
    args = getattr(error, "args", ())
    if args and isinstance(args[0], (int, str)):
        codes.add(args[0])
    for arg in args:
        code = getattr(arg, "code", None)  # oracledb/cx_Oracle: args[0] is an _Error with .code
        if isinstance(code, int):
            codes.add(code)
        if isinstance(arg, str):
            codes.update(int(found) for found in _NATIVE_ERROR.findall(arg))
    return codes
