"""What migrations/env.py runs: pick the URL, configure Alembic, run online or offline."""

from __future__ import annotations

import functools
import logging
import shlex
import sys
import time
from logging.config import fileConfig
from typing import TYPE_CHECKING

from alembic import context as alembic_context
from alembic.util import CommandError
from sqlalchemy import MetaData, exc, pool

from .. import engines, errors
from ..db import DatabaseURLError, NoDatabase, failure, make_engine, normalise_url
from ..revisions import SnapshotError, head_blueprint, record_blueprint
from ..schema import ROLES, SHARED
from ..urls import database_url, display_url
from . import in_process, refusals
from .autogen import TARGET_OPTION, model_tables_only
from .compile import uncompiled
from .execution import DISCARD_OPTION, LOCK_TIMEOUT_OPTION, OFFLINE_HOOK_OPTION, ROLE_OPTION
from .locks import (
    RETRY_OPTION,
    LockPolicy,
    LockWait,
    LockWaitsSpent,
    MigrationRunning,
    SkippedBusy,
    describe_holders,
    format_duration,
    retry_while_blocked,
)
from .offline import RepeatableStamps, ScriptError
from .online import BATCH_OPTION, ONLINE_OPTION, POLICY_OPTION, parse_batch, parse_online
from .refusals import DISCARD_TABLES_OPTION, PROTECTED_OPTION, RERUN_OPTION, refusal
from .write import REVISION_OPTION

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.runtime.environment import EnvironmentContext
    from alembic.runtime.migration import MigrationContext, MigrationInfo
    from sqlalchemy.engine import Engine

    from ..schema import Blueprint, TableName

log = logging.getLogger("sqltransport_schema.migrate")
# config.attributes[UNCOMPILED_CHECKED]: topology.yaml was compared with the migrations' head already (or must not be)
UNCOMPILED_CHECKED = "sqltransport_uncompiled_checked"
MIGRATION_LOGGER = "alembic.runtime.migration"  # where Alembic says which revision it runs
TRUE = ("1", "true", "yes", "on")


def run(context: EnvironmentContext = alembic_context, target_metadata: MetaData | None = None) -> None:
    """target_metadata: the project's own SQLAlchemy models, if Alembic also manages those;
    transport tables are compared with the topology by migrate.autogen either way."""
    config = context.config
    revision = config.attributes.get(REVISION_OPTION)
    if revision is not None:
        # `compile` writing a revision (migrate.write): its operations come from topology.yaml;
        # no database is read, so any dialect does, and logging stays as the caller set it.
        context.configure(dialect_name="sqlite", **revision(context.script))
        context.run_migrations()
        return
    if config.config_file_name and config.attributes.get("configure_logging", True):
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    _failed_once()
    _warn_uncompiled(context)
    x_args = context.get_x_argument(as_dictionary=True)
    if x_args.get("verbose", "").lower() in TRUE:  # Alembic's own INFO lines, which alembic.ini keeps quiet
        logging.getLogger("alembic").setLevel(logging.INFO)
    try:
        url = normalise_url(database_url(x_args.get("url"), config))
    except DatabaseURLError as error:
        raise CommandError(str(error)) from None
    role = x_args.get("role", SHARED)
    if role not in ROLES:
        raise CommandError(f"-x role={role}: a database's role is {' or '.join(ROLES)} (docs/tenants.md)")
    options = {
        ROLE_OPTION: role,
        DISCARD_OPTION: x_args.get("discard_messages", "").lower() in TRUE,
        DISCARD_TABLES_OPTION: _names(x_args.get("discard", "")),
        PROTECTED_OPTION: _names(x_args.get("drop_protected", "")),
        # the command a refusal names: `alembic ... -x discard=...`, or the caller's own (a fleet's)
        RERUN_OPTION: config.attributes.get(RERUN_OPTION) or (lambda added, opts: _rerun(config, opts, added)),
        "on_version_apply": [_log_step, *config.attributes.get(in_process.STEP_HOOKS, ())],
    }
    try:
        policy = LockPolicy.from_x(x_args)
        options[BATCH_OPTION] = parse_batch(x_args.get("online_batch"))
    except errors.UsageError as error:
        raise CommandError(str(error)) from None
    options[ONLINE_OPTION] = parse_online(x_args.get("online", ""))
    options[POLICY_OPTION] = policy
    if context.is_offline_mode():
        options[OFFLINE_HOOK_OPTION] = config.attributes.get(OFFLINE_HOOK_OPTION)
        options[LOCK_TIMEOUT_OPTION] = policy.timeout_ms
        output = RepeatableStamps(config.output_buffer or sys.stdout)
        context.configure(url=url, literal_binds=True, transactional_ddl=True, output_buffer=output, **options)
        migration = context.get_context()
        script = engines.for_sqlalchemy(migration.dialect.name).script
        repeatable = _repeatable(migration)
        if repeatable:
            output.rewrite_for(script.dialect.name)
            if script.OPENING:  # how it stops at an error under any client
                migration.impl.static_output(script.OPENING)
        with context.begin_transaction():
            # the script's statements wait for locks as long as an online run's (docs/live-migrations.md)
            prologue = script.lock_timeout(policy.timeout_ms)
            if prologue:
                migration.impl.static_output(prologue)
            try:
                context.run_migrations()
            except ScriptError as error:  # a stamp the repeatable output does not know (offline.make_idempotent)
                raise CommandError(str(error)) from None
            _refuse(migration)
        if repeatable and script.CLOSING:
            output.write(script.CLOSING)
        return
    try:
        engine = make_engine(url, poolclass=pool.NullPool)
    except (DatabaseURLError, NoDatabase) as error:  # NoDatabase: a SQLite file in a folder that is not there
        raise CommandError(str(error)) from None
    compare = {
        "target_metadata": target_metadata if target_metadata is not None else MetaData(),
        "include_name": model_tables_only(target_metadata),
        TARGET_OPTION: lambda: _for_role(head_blueprint(context.script)[1], role),
    }
    try:
        _run_with_lock_retries(context, engine, policy, {**compare, **options})
    finally:
        engine.dispose()


def _warn_uncompiled(context: EnvironmentContext) -> None:
    """An upgrade goes on, after a warning, when topology.yaml differs from the migrations' head (changes
    not compiled: they are not in what it runs); once per configuration (a fleet's runs share one)."""
    config = context.config
    if not in_process.is_upgrade(context) or config.attributes.get(UNCOMPILED_CHECKED):
        return
    config.attributes[UNCOMPILED_CHECKED] = True
    notice = uncompiled(config)
    if notice is not None:
        notice.warn()


def _for_role(found: Blueprint | None, role: str) -> Blueprint | None:
    return found.for_role(role) if found is not None else None


def _log_step(ctx: MigrationContext, step: MigrationInfo, heads: object, run_args: object) -> None:
    """The revision a step ran, as one line of ours after its tables' lines: alembic.ini keeps
    Alembic's INFO lines (its "Running upgrade", "Context impl ...") quiet unless -x verbose=true."""
    if refusals.any_refused(ctx):
        return  # after a refusal the run only looks for other refusals: this step did nothing
    verb = "stamp" if step.is_stamp else ("upgrade" if step.is_upgrade else "downgrade")
    source, destination = (",".join(ids) or "<base>" for ids in (step.source_revision_ids, step.destination_revision_ids))
    if not ctx.as_sql:
        refusals.step_logged(ctx, f"{verb} {source} -> {destination}")
    if logging.getLogger(MIGRATION_LOGGER).isEnabledFor(logging.INFO):
        return  # Alembic said "Running ..." itself
    log.info("%s %s -> %s, %s", verb, source, destination, (step.up_revision.doc if step.up_revision else None) or "")


def _repeatable(migration: MigrationContext) -> bool:
    """An offline upgrade on an engine whose scripts are repeatable (SQL Server, PostgreSQL): its
    output is written through offline.RepeatableStamps (alembic_version created only when missing,
    stamped once; on SQL Server, stopped at the first error), so the script a DBA reviews is safe to
    run again. Downgrade scripts stay as Alembic writes them."""
    from .offline import ENGINES

    fn = migration.opts.get("fn")
    engine = engines.for_sqlalchemy(migration.dialect.name).name
    return engine in ENGINES and fn is not None and fn.__name__ == "upgrade"


LOCK_TABLE_FULL = (
    "The server's lock table is full (this run's share and other sessions' locks). The upgrade commits part-way "
    "as its operations fill a share of that table, so what it committed stays: run it again to go on from there. "
    "If it stops again, raise {setting} (postgresql.conf, then restart the server), or split the change: "
    "apply part of it to topology.yaml (e.g. half the endpoints), compile and upgrade, then the rest"
)


class Lines(logging.Formatter):
    """How alembic.ini prints sqltransport-schema's lines (its [formatter_lines]): the message as it is,
    each table as it changes and then the revision, with no level or logger before it; a warning (or an
    error) after `warning: ` (`error: `), as every command's."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if record.levelno < logging.WARNING else f"{record.levelname.lower()}: {text}"


class _LoggedAsFailed(logging.Filter):
    """Alembic logs a failed command's message (`ERROR [alembic.util.messaging] ...`) and then prints
    it as its `FAILED: ...` line; only the FAILED line is kept, so the message is printed once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


def _failed_once() -> None:
    messaging = logging.getLogger("alembic.util.messaging")
    if not any(isinstance(f, _LoggedAsFailed) for f in messaging.filters):
        messaging.addFilter(_LoggedAsFailed())


def _run_online(context: EnvironmentContext, engine: Engine, policy: LockPolicy, options: dict) -> None:
    """One attempt: the whole upgrade in one transaction, each statement waiting at most
    policy.timeout_ms for a lock (a longer wait raises LockWait and rolls everything back)."""
    dialect = engines.for_sqlalchemy(engine.dialect.name)
    try:
        with engine.connect() as connection:
            dialect.new_database_in_wal(connection.connection.dbapi_connection)  # a database the migrations create (docs/runtime.md)
            dialect.set_lock_timeout(connection, policy.timeout_ms)
            try:
                dialect.one_migration_at_a_time(connection)
            except exc.DBAPIError as error:
                if dialect.lock_timed_out(error.orig):
                    raise MigrationRunning("waiting for another migration of this database to finish") from None
                raise
            connection.commit()  # the setting (and the lock) stay for the session, whatever the migration's transaction does
            context.configure(connection=connection, transactional_ddl=True, **options)
            with context.begin_transaction():
                context.run_migrations()
                _refuse(context.get_context())  # before anything is committed
                try:
                    record_blueprint(connection, context.script, options[ROLE_OPTION])  # what Transport.from_database reads
                except SnapshotError as error:  # e.g. a merge of branches that clash: roll it all back
                    raise CommandError(str(error)) from None
    except exc.DBAPIError as error:
        if dialect.lock_timed_out(error.orig):  # a statement outside the transport's operations
            raise LockWait() from None
        setting = dialect.lock_table_full(error.orig)
        if setting is not None:
            raise CommandError(f"{failure(error)}. {LOCK_TABLE_FULL.format(setting=setting)}") from None
        raise CommandError(failure(error)) from None
    except exc.SQLAlchemyError as error:  # unreachable, or a statement failed: Alembic's one FAILED line
        raise CommandError(failure(error)) from None


def _refuse(migration: MigrationContext) -> None:
    """End the run with every refusal it met (the transaction, if any, rolls back), after a line
    naming the steps logged as run that the rollback undoes."""
    refused = refusal(migration)
    if refused is not None:
        if not migration.as_sql:
            log.warning("%s", refusals.rolled_back(migration))
        raise refused


def _run_with_lock_retries(context: EnvironmentContext, engine: Engine, policy: LockPolicy, options: dict) -> None:
    """Run the upgrade; while a statement gives up waiting for a lock, roll back, log who holds
    it, pause (1 s, 2 s, 4 s ... 30 s) and run it again, for at most policy.retry_for_ms.

    The rollback releases every lock the attempt took, so between attempts no sender of any
    table waits on the migration (migrate/locks.py says why the step alone is not retried)."""
    dialect = engines.for_sqlalchemy(engine.dialect.name)

    def waited(wait: LockWait, attempt: int, pause: float, left: float) -> None:
        on = f" on {dialect.display(wait.table)}" if wait.table is not None else ""
        found = _holders(engine, dialect, wait.table) if wait.table is not None else None
        holders = f": {describe_holders(found, policy.timeout_ms)}" if found is not None else ""
        each = format_duration(policy.timeout_ms)
        if isinstance(wait, MigrationRunning) and policy.if_busy == "skip":
            raise SkippedBusy("another migration of this database is running; skipped (-x if_busy=skip), nothing was changed") from None
        if left <= 0:
            spent = format_duration(policy.retry_for_ms)
            longer = format_duration(max(policy.retry_for_ms * 3, 600_000))
            try:
                opts = context.get_context().opts  # the run's own: fn, destination_rev
            except Exception:  # noqa: BLE001 - Alembic's "no context configured yet": every attempt waited before it
                opts = options
            rerun = options[RERUN_OPTION]([f"{RETRY_OPTION}={longer}"], opts)
            raise LockWaitsSpent(
                f"gave up waiting for a lock{on} after {attempt} attempt(s) in {spent} "
                f"(each waiting {each}; {wait}){holders}. Nothing was changed (the upgrade rolled back). "
                f"Run it again once the holder is done, or wait longer: {rerun}"
            ) from None
        log.warning("attempt %d waited %s for a lock%s (%s)%s; rolled back, retrying in %.1f s", attempt, each, on, wait, holders, pause)

    deadline = time.monotonic() + policy.retry_for_ms / 1000
    run_once = functools.partial(_run_online, context, engine, policy, options)
    _, attempt = retry_while_blocked(run_once, lambda error: isinstance(error, LockWait), policy.pauses(), deadline, waited)
    if attempt > 1:
        log.info("upgrade done on attempt %d", attempt)


def _holders(engine: Engine, dialect: engines.Dialect, table: TableName) -> list | None:
    """Who holds the table now, read on a connection of its own (None if the engine or the read cannot tell)."""
    try:
        with engine.connect() as connection:
            return dialect.lock_holders(connection, table)
    except exc.SQLAlchemyError:
        return None


def _names(value: str) -> frozenset[str]:
    """A comma-separated -x value as a set of table names."""
    return frozenset(name.strip() for name in value.split(",") if name.strip())


def _rerun(config: Config, opts: dict, options: list[str]) -> str:
    """The `alembic` command being run (opts: the migration context's), with `-x option`s added (or
    replacing the run's own): the recovery command. A URL given as `-x url=` is shown with its
    password masked (the user fills it in again); one from SQLTRANSPORT_URL or alembic.ini is not
    repeated, as the rerun reads it from there."""
    keys = {option.split("=")[0] for option in options}
    x = [_shown(item) for item in (getattr(config.cmd_opts, "x", None) or []) if item.split("=")[0] not in keys]
    fn = opts.get("fn")
    command = fn.__name__ if fn is not None and fn.__name__ in ("upgrade", "downgrade") else "upgrade"
    revision = opts.get("destination_rev") or "head"
    words = ["alembic", *(f"-x {shlex.quote(item)}" for item in [*x, *options] if item), command, str(revision)]
    if config.config_file_name and config.config_file_name != "alembic.ini":
        words[1:1] = ["-c", config.config_file_name]
    return " ".join(words)


def _shown(item: str) -> str:
    """An `-x key=value` argument as output shows it: a URL's password masked."""
    key, _, value = item.partition("=")
    return f"{key}={display_url(value)}" if key == "url" else item
