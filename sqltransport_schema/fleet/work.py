"""What is done to one target, the same in a worker process (pool.py) and in a Spark task
(spark.py): read its stamp (one connection, one read of alembic_version: a target already at the
revision costs nothing more), upgrade it through the project's own migrations/env.py (the same
locks, refusals and consent -x options as `alembic upgrade`), or read its status.

Migrations are loaded once per process (Alembic's context is process-global, so one process runs
one target at a time); a Result is plain data, sent back to the runner, which journals it.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..defaults import DEFAULT_READ_TIMEOUT  # noqa: F401 - seconds a target's read may wait; cli/fleet reads it here
from .file import Target, scrub

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory

# Outcomes of an upgrade attempt
UPGRADED, AT_REVISION, WOULD_UPGRADE, FAILED, BUSY, LOST = "upgraded", "at_revision", "would_upgrade", "failed", "busy", "lost"
PAST = "past"  # already past the revision asked for (--to an older one): left there, never downgraded
DONE = frozenset({UPGRADED, AT_REVISION, WOULD_UPGRADE, PAST})
VERSION_TABLE = "alembic_version"
# What a fleet read of a SQLite target whose file is not there says to do.
TARGET_FIX = "check the target's URL in the fleet file, or build it with `sqltransport-schema fleet upgrade`"


@dataclass(frozen=True)
class Settings:
    """What a worker needs to load the migrations and run a target's work (picklable)."""

    config: str  # alembic.ini
    to_rev: str = "head"
    x: tuple[str, ...] = ()  # -x options for every target (consent, lock waits), url excepted
    dry_run: bool = False
    create_missing: bool = False  # upgrade: a target's database made first when it is not there
    read_timeout: float = DEFAULT_READ_TIMEOUT  # seconds a target's connection and version read (and check) may take
    rerun: tuple[str, ...] = ("sqltransport-schema", "fleet", "upgrade")  # the command a refusal names, before --only
    check: bool = False  # status: add check's drift summary
    # a failure as one line (the command line's own, cli/output.describe); a module-level function, so it pickles
    describe: Callable[[BaseException], str] | None = None


@dataclass
class Result:
    target: str
    outcome: str  # upgrade: UPGRADED, AT_REVISION, WOULD_UPGRADE, FAILED, BUSY; status: "read" / FAILED
    from_revision: str | None = None
    to_revision: str | None = None
    error: str | None = None
    seconds: float = 0.0
    reachable: bool = True
    pending: int | None = None  # revisions the target is behind the destination
    drift: dict | None = None  # status --check: {"in_sync": bool, "counts": {...}}
    pid: int = 0
    extra: dict = field(default_factory=dict)
    read: bool = False  # its alembic_version was read: no from_revision then means none yet (<base>)

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def revision_shown(self) -> str:
        """The revision as reports show it: <base> for a database read and not built yet, unknown for
        one that could not be read (never <base> for a target that was not reached)."""
        return self.from_revision or ("<base>" if self.read else "unknown")


def _named(name: str, work: Callable[..., Any], *args: Any) -> Any:
    """work(*args) with each log line of the migrations (a lock wait, a part-way commit) starting with
    the target's name: a worker runs one target at a time, so the process's record factory is its."""
    previous = logging.getLogRecordFactory()

    def factory(*parts: Any, **named: Any) -> logging.LogRecord:
        record = previous(*parts, **named)
        if record.name.startswith("sqltransport_schema.migrate"):
            record.msg = f"{name.replace('%', '%%')}: {record.msg}"
        return record

    logging.setLogRecordFactory(factory)
    try:
        return work(*args)
    finally:
        logging.setLogRecordFactory(previous)


def _revisions(ids: tuple[str, ...]) -> str | None:
    return ",".join(ids) if ids else None


class Migrations:
    """The project's migrations, loaded once in this process."""

    def __init__(self, settings: Settings):
        from alembic.config import Config
        from alembic.script import ScriptDirectory

        self.settings = settings
        self.config = Config(settings.config, cmd_opts=argparse.Namespace(quiet=True, x=None))
        self.config.attributes["configure_logging"] = False  # a fleet's report is its output, not each target's log lines
        logging.getLogger("sqltransport_schema.migrate").setLevel(logging.WARNING)
        self.script: ScriptDirectory = ScriptDirectory.from_config(self.config)
        self.destination = self._resolve(settings.to_rev)
        self.behind = self._behind()
        self.version_table = self.config.get_main_option("version_table") or VERSION_TABLE
        self._readers: dict[str, tuple[Any, str]] = {}
        self._references: dict[str, Any] = {}  # status --check: check.Reference per role
        self._adopters: dict[str, Any] = {}  # status --check: an engine per server (_adopt)
        self._handed: list[Any] = []
        self._history: Any = None  # revisions.History, made when a target is past the destination
        self._known = {revision.revision for revision in self.script.walk_revisions()}

    def _resolve(self, to_rev: str) -> tuple[str, ...]:
        """The revision ids the database holds once upgraded to to_rev (head: every head)."""
        revisions = self.script.get_revisions(to_rev if to_rev != "head" else "heads")
        return tuple(sorted(r.revision for r in revisions if r is not None))

    def _behind(self) -> dict[tuple[str, ...], int]:
        """For each revision the history holds (and none): how many revisions upgrade runs to the
        destination. Computed once, so a target's status is a dictionary lookup."""
        from ..revisions import History

        history = History(self.script)
        wanted: set[str] = set()
        for head in self.destination:
            wanted |= history.ancestors(head)
        out = {(): len(wanted)}
        for revision in self.script.walk_revisions():
            below = history.ancestors(revision.revision)
            if below <= wanted:
                out[(revision.revision,)] = len(wanted - below)
        return out

    def is_past(self, stamps: tuple[str, ...]) -> bool:
        """Whether the stamps are past the destination: every destination revision below them, and
        they are not it (upgrade would run nothing: a downgrade is what reaches it)."""
        if not stamps or not self.destination or stamps == self.destination:
            return False
        from ..revisions import History

        if self._history is None:
            self._history = History(self.script)
        below: set[str] = set()
        for stamp in stamps:
            if stamp not in self._known:
                return False
            below |= self._history.ancestors(stamp)
        return set(self.destination) <= below

    def pending(self, stamps: tuple[str, ...]) -> int | None:
        """Revisions from stamps to the destination (None: not on the way to it: ahead, or unknown)."""
        if stamps == self.destination:
            return 0
        return self.behind.get(stamps)

    def prepare(self, targets: Iterable[Target]) -> None:
        """Before the workers fork: each driver the targets use imported and its version read
        compiled (and for status --check, check's Reference of each role made) once, in the runner,
        not once in each worker. A failure here is left to the target's own read to report."""
        from sqlalchemy.engine import make_url

        from ..db import normalise_url
        from ..schema import SHARED

        schemes: set[str] = set()
        roles: set[str] = set()
        for target in targets:
            scheme = target.url.partition(":")[0]
            if scheme not in schemes:
                schemes.add(scheme)
                try:
                    self._reader(make_url(normalise_url(target.url)).drivername, target.url)
                except Exception:  # noqa: BLE001, S112 - reported by the target's read
                    continue
            roles.add(target.role or SHARED)
        for role in roles if self.settings.check else ():
            try:
                self._reference(role)
            except Exception:  # noqa: BLE001, S112 - reported by the target's check
                continue

    # ----------------------------------------------------------------------------- one target
    def stamps(self, url: str) -> tuple[str, ...]:
        """The revisions the target's version table holds: one connection and one read (none when
        the table is not there yet), through the driver itself: a target at the revision costs no
        engine, no pool and no statement compilation (made once per driver, _reader). A SQLite
        file that is not there holds none and is not opened: upgrade builds it, a dry run and a
        script plan from <base> and leave no empty file behind."""
        from ..db import missing_sqlite_file

        if missing_sqlite_file(url) is not None:
            return ()
        dialect, sql, connection = self._connect(url)
        try:
            return self._read_stamps(url, dialect, sql, connection)
        finally:
            connection.close()

    def _connect(self, url: str, must_exist: bool = False) -> tuple[Any, str, Any]:
        """(the driver's SQLAlchemy dialect, the version read, a DBAPI connection to the target).
        must_exist: for a read (status), which refuses a SQLite file that is not there (NoDatabase),
        as db.make_engine(must_exist=True) does, instead of creating it."""
        from sqlalchemy.engine import make_url

        from ..db import driver_connection, normalise_url

        dialect, sql = self._reader(make_url(normalise_url(url)).drivername, url)
        connection = driver_connection(url, dialect, self.settings.read_timeout, must_exist=must_exist, fix=TARGET_FIX)
        return dialect, sql, connection

    def _read_stamps(self, url: str, dialect: Any, sql: str, connection: Any) -> tuple[str, ...]:
        from sqlalchemy import exc

        from .. import engines

        dbapi = dialect.loaded_dbapi
        cursor = connection.cursor()
        try:
            cursor.execute(sql)
        except dbapi.Error as error:
            if engines.for_sqlalchemy(dialect.name).undefined_table(error) or not self._has_version_table(url):
                return ()
            raise exc.DBAPIError.instance(sql, None, error, dbapi.Error, dialect=dialect) from None
        stamps = tuple(sorted(row[0] for row in cursor.fetchall()))
        cursor.close()
        return stamps

    def _has_version_table(self, url: str) -> bool:
        """Asked of the catalog, for engines that do not say which driver error is "no such table"."""
        from sqlalchemy import inspect, pool

        from ..db import make_engine

        engine = make_engine(url, poolclass=pool.NullPool, sqlite_writers=False)
        try:
            with engine.connect() as connection:
                return inspect(connection).has_table(self.version_table)
        finally:
            engine.dispose()

    def _reader(self, driver: str, url: str) -> tuple[Any, str]:
        """(the driver's SQLAlchemy dialect, the version read compiled for it), made once per driver."""
        if driver not in self._readers:
            from sqlalchemy import column, pool, select, table

            from ..db import make_engine

            engine = make_engine(url, poolclass=pool.NullPool, sqlite_writers=False)  # imports the driver; connects nowhere
            statement = select(column("version_num")).select_from(table(self.version_table))
            self._readers[driver] = (engine.dialect, str(statement.compile(dialect=engine.dialect)))
            engine.dispose()
        return self._readers[driver]

    def upgrade(self, target: Target) -> Result:
        """Bring the target to the destination: nothing past the read when it is there already."""
        started = time.perf_counter()
        result = Result(target.name, FAILED)
        try:
            if self.settings.create_missing and not self.settings.dry_run:
                from ..db import create_missing_database

                if create_missing_database(target.url):
                    result.extra["created"] = True
            before = self.stamps(target.url)
            result.from_revision, result.read = _revisions(before), True
            result.pending = self.pending(before)
            if before == self.destination:
                result.outcome, result.to_revision = AT_REVISION, result.from_revision
            elif self.is_past(before):
                result.outcome, result.to_revision = PAST, result.from_revision
            elif self.settings.dry_run:
                result.outcome, result.to_revision = WOULD_UPGRADE, _revisions(self.destination)
            elif _named(target.name, self._run_upgrade, target):
                result.outcome, result.to_revision = UPGRADED, _revisions(self.destination)
            else:  # another run took it there while this one waited for the database's migration lock
                result.outcome = AT_REVISION
                result.from_revision = result.to_revision = _revisions(self.destination)
        except Exception as error:  # noqa: BLE001 - one target's failure is its result, never another's
            from ..migrate.locks import SkippedBusy

            result.outcome = BUSY if isinstance(error, SkippedBusy) else FAILED
            result.error = describe(error, target, self.settings.describe)
            if not result.read:  # its version read (bounded) is what failed
                result.error = self._waited(started, result.error, result)
            result.reachable = _unreachable(error) is None
        result.seconds = time.perf_counter() - started
        return result

    def _run_upgrade(self, target: Target) -> int:
        """Run `alembic upgrade` on the target, in this process; the number of steps it took."""
        from ..migrate import in_process

        role = [f"role={target.role}"] if target.role else []  # tenant placement: the fleet file's, per target
        return in_process.upgrade(
            self.config,
            self.script,
            target.url,
            self.settings.to_rev,
            x=[*role, *self.settings.x],
            rerun=lambda added: self.rerun(target, added),
        )

    def rerun(self, target: Target, added: list[str]) -> str:
        """The fleet command that runs this one target again with more -x options (a refusal's consent)."""
        keys = {option.split("=")[0] for option in added}
        x = [item for item in self.settings.x if item.split("=")[0] not in keys]
        words = [*self.settings.rerun, "--only", target.name, *(f"-x {shlex.quote(item)}" for item in [*x, *added])]
        return " ".join(shlex.quote(w) if not w.startswith("-x ") else w for w in words)

    def status(self, target: Target) -> Result:
        """The target's revision and how far behind it is; with check, its drift summary."""
        from pathlib import Path

        from ..db import missing_sqlite_file

        started = time.perf_counter()
        result = Result(target.name, "read")
        try:
            missing = missing_sqlite_file(target.url)
            if missing is not None and Path(missing).parent.is_dir():
                # not built yet: at <base>, as the upgrade that builds it finds it, read without
                # creating the file (no database, no drift summary); in a folder that is not there
                # the upgrade could not build it either: unreachable (below)
                result.from_revision, result.pending, result.read = _revisions(()), self.pending(()), True
                result.seconds = time.perf_counter() - started
                return result
            dialect, sql, connection = self._connect(target.url, must_exist=True)
            try:
                stamps = self._read_stamps(target.url, dialect, sql, connection)
                result.from_revision, result.read = _revisions(stamps), True
                result.pending = self.pending(stamps)
                if self.settings.check:
                    result.drift = self._drift(target, dialect, connection, stamps)
            finally:
                with suppress(Exception):  # closed already when the check adopted it (some drivers refuse a second close)
                    connection.close()
        except Exception as error:  # noqa: BLE001 - an unreachable target is a row of the report
            result.outcome, result.error, result.reachable = (
                FAILED,
                self._waited(started, describe(error, target, self.settings.describe), result),
                _unreachable(error) is None,
            )
        result.seconds = time.perf_counter() - started
        return result

    def _waited(self, started: float, error: str, result: Result | None = None) -> str:
        """A failure's line, saying so when it came as the read timeout ran out (db.timed_out: the time
        waited and the setting that bounds it), the result then marked timed out with the seconds waited."""
        from ..db import timed_out

        waited = time.perf_counter() - started
        line = timed_out(waited, self.settings.read_timeout, error, "--read-timeout or read_timeout:")
        if line != error and result is not None:
            result.extra["timed_out"] = round(waited, 3)
        return line

    def _drift(self, target: Target, dialect: Any, connection: Any, stamps: tuple[str, ...]) -> dict:
        """check's drift summary, on the connection the stamps were read on: what does not depend on
        the target (the expected blueprint per revision and role, the revisions after it) is the
        worker's Reference, computed once; the target costs its catalog and subscriptions reads."""
        from sqlalchemy.exc import SQLAlchemyError

        from .. import check, engines, revisions
        from ..db import failure
        from ..schema import SHARED
        from ..urls import upgrade_command

        try:
            try:
                deployed = revisions.only_revision(stamps, upgrade_command(target.url))
                engine = engines.for_sqlalchemy(dialect.name)
                reference = self._reference(target.role or SHARED)
                with self._adopt(target.url, connection) as adopted:
                    report = check.compare(adopted, engine, deployed, reference)
            except (revisions.SnapshotError, engines.UnsupportedEngine, NotImplementedError) as problem:
                raise check.CheckError(str(problem)) from None
            except SQLAlchemyError as problem:
                raise check.CheckError(failure(problem)) from None
        except check.CheckError as error:
            return {"in_sync": False, "error": scrub(str(error), target.url), "counts": {}}
        # revisions not applied yet are the row's "behind"; the drift is what differs from the stamped revision
        counts = {c: n for c, n in report.counts().items() if c not in check.INFO_CATEGORIES and c != "unapplied_revisions"}
        return {"in_sync": not counts, "counts": counts}

    def _reference(self, role: str) -> Any:
        """check's Reference for the role, made once per worker."""
        from .. import check

        if role not in self._references:
            self._references[role] = check.Reference(self.script, role, self.version_table)
        return self._references[role]

    @contextmanager
    def _adopt(self, url: str, dbapi_connection: Any) -> Iterator[Any]:
        """A SQLAlchemy connection over the DBAPI connection already open to the target: one engine
        per server for the worker's life (its dialect initialised on its first connection, not per
        target), which takes the connection given instead of opening one."""
        from sqlalchemy import pool
        from sqlalchemy.engine import make_url

        from ..db import make_engine, normalise_url

        # the URL but its database: one server and login share what the dialect learns on first connect
        key = make_url(normalise_url(url)).set(database=None).render_as_string(hide_password=False)
        if key not in self._adopters:
            self._adopters[key] = make_engine(url, poolclass=pool.NullPool, sqlite_writers=False, creator=lambda: self._handed.pop())
        self._handed = [dbapi_connection]
        with self._adopters[key].connect() as connection:
            yield connection


def _unreachable(error: BaseException) -> BaseException | None:
    """The driver's error when the database could not be reached (no statement was run), else None;
    a SQLite file that is not there (db.NoDatabase) is unreachable too."""
    from sqlalchemy import exc

    from ..db import NoDatabase

    if isinstance(error, NoDatabase):
        return error
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, (exc.OperationalError, exc.InterfaceError)) and getattr(cause, "statement", None) is None:
            return getattr(cause, "orig", None) or cause
        cause = cause.__cause__ or cause.__context__
    return None


def describe(error: BaseException, target: Target, one_line: Callable[[BaseException], str] | None = None) -> str:
    """The error as the report's one line, the target's password masked wherever a driver quoted it."""
    from ..db import NoDatabase

    one_line = one_line or first_line
    unreachable = _unreachable(error)
    if isinstance(unreachable, NoDatabase):
        return scrub(str(unreachable), target.url)  # says itself what is wrong and what to do
    if unreachable is not None:
        said = (str(unreachable).strip().splitlines() or [type(unreachable).__name__])[0]
        return scrub(f"cannot reach the database: {said}; is the server up, and is the target's URL right?", target.url)
    return scrub(one_line(error), target.url)


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
