"""Connecting: the one place URLs become SQLAlchemy engines (migrations and runtime alike)."""

from __future__ import annotations

import re
import shlex
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import create_engine, event, exc, pool
from sqlalchemy.engine import Engine, make_url

from . import errors
from .urls import display_url, upgrade_command

__all__ = ["make_engine", "sqlite_transactions", "DatabaseURLError", "NoDatabase"]

SCHEMES = "sqlite:///FILE, postgresql://USER@HOST/DB, mssql://USER:PASSWORD@DSN or mysql://USER@HOST/DB"
# The extra of this package that installs each backend's driver.
DRIVER_EXTRAS = {"postgresql": "postgresql", "mssql": "mssql", "mysql": "mysql", "mariadb": "mysql"}
# Another spelling of a scheme: libpq and hosting providers write postgres://.
SCHEME_ALIASES = {"postgres": "postgresql"}
# The driver a URL without one means: the one this package installs (else SQLAlchemy's default).
DEFAULT_DRIVERS = {"postgresql": "psycopg", "mysql": "pymysql", "mariadb": "pymysql"}
# The DBAPI modules whose errors are a database's answer (answered_within).
DRIVER_MODULES = frozenset({"sqlite3", "psycopg", "psycopg2", "pyodbc", "pymysql", "MySQLdb"})
# The URL each engine make_engine made was given, as the user wrote it (its scheme, no driver added).
_GIVEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# The read timeout each engine make_engine made bounds its reads by (read_timeout_of).
_BOUNDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class DatabaseURLError(errors.UsageError):
    """A URL no engine can be made from (unknown scheme, driver not installed), said in one line
    that names the fix."""


if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from .engines import Dialect
    from .engines.sqlite import SQLite


@lru_cache(maxsize=4096)
def normalise_url(url: str) -> str:
    """A bare postgresql:// (or postgres://, as libpq and hosting providers write it) URL means
    psycopg 3, the driver this package installs; mysql:// and mariadb:// mean PyMySQL. Kept per URL
    (a fleet's target is asked several times on the way to its one read)."""
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        raise DatabaseURLError(f"{display_url(url)!r} is not a database URL; expected one of {SCHEMES}") from None
    backend = SCHEME_ALIASES.get(parsed.get_backend_name(), parsed.get_backend_name())
    driver = parsed.get_driver_name() if "+" in parsed.drivername else DEFAULT_DRIVERS.get(backend)
    parsed = parsed.set(drivername=backend + (f"+{driver}" if driver else ""))
    return parsed.render_as_string(hide_password=False)


def _dialect(backend: str) -> Dialect | None:
    """The engine of a SQLAlchemy backend name, None for one the project has no engine for (its
    error comes from connecting, which names the schemes)."""
    from . import engines

    try:
        return engines.for_sqlalchemy(backend)
    except engines.UnsupportedEngine:
        return None


class NoDatabase(errors.NotFound):
    """A SQLite URL names a file that is not there, for a command that needs a deployed database:
    connecting would have created it empty, so nothing was opened (refuse_missing_sqlite_file)."""


class NoAnswer(errors.Unavailable):
    """A database gave no answer within the read timeout (a held lock, a server that does not
    answer): the message says how long was waited and the setting that bounds it (timed_out)."""


# What a refusal says to do when its caller names nothing better ({upgrade}: urls.upgrade_command of the URL).
BUILD_IT = "check the URL, or build the database there with `{upgrade}`"


def url_engine(url: str) -> Dialect | None:
    """The engine a URL names, read from the URL alone (nothing is opened); None for one the project
    has no engine for."""
    return _dialect(make_url(normalise_url(url)).get_backend_name())


def missing_sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names when it does not exist (connecting would create it empty); else
    None, also for :memory: and a URI form (file:...?mode=..., whose mode the URL says itself)."""
    from pathlib import Path

    parsed = make_url(normalise_url(url))
    dialect = _dialect(parsed.get_backend_name())
    if dialect is None or not dialect.database_file or parsed.database in (None, "", ":memory:") or parsed.database.startswith("file:"):
        return None
    return None if Path(parsed.database).exists() else parsed.database


def refuse_missing_sqlite_folder(url: str, named_by: str = "") -> None:
    """NoDatabase naming the folder when a SQLite URL names a file in a folder that is not there: nothing
    can open or build it (SQLite says only "unable to open database file"). Nothing is created: a folder
    the URL got wrong would otherwise appear silently."""
    from pathlib import Path

    missing = missing_sqlite_file(url)
    folder = Path(missing).parent if missing is not None else None
    if folder is not None and not folder.is_dir():
        where = f" ({named_by})" if named_by else ""
        raise NoDatabase(
            f"no folder {folder} for the SQLite database {missing}{where}; nothing was created: "
            f"check the URL, or create the folder first (mkdir -p {shlex.quote(str(folder))})"
        )


def refuse_missing_sqlite_file(url: str, named_by: str = "", fix: str = BUILD_IT) -> None:
    """NoDatabase when a SQLite URL names a file that does not exist: connecting would create it
    empty, and an empty file is no deployed database. `named_by` says where the URL came from, `fix` what to do
    (a folder that is not there either is named as such: refuse_missing_sqlite_folder)."""
    refuse_missing_sqlite_folder(url, named_by)
    missing = missing_sqlite_file(url)
    if missing is not None:
        where = f" ({named_by})" if named_by else ""
        fix = fix.format(upgrade=upgrade_command(url)) if fix else fix
        raise NoDatabase(f"no SQLite database at {missing}{where}; nothing was created" + (f": {fix}" if fix else ""))


def existing_only(url: str, cargs: list, cparams: dict) -> None:
    """Connect arguments (a SQLAlchemy dialect's create_connect_args, changed in place) that open a
    SQLite file only if it exists (URI mode=rw): a file removed after refuse_missing_sqlite_file's
    look is still not created. :memory: and a URL's own URI form are left as they are."""
    from pathlib import Path

    dialect = _dialect(make_url(normalise_url(url)).get_backend_name())
    if dialect is None or not dialect.database_file or cparams.get("uri") or not cargs or cargs[0] in ("", ":memory:"):
        return
    cargs[0] = Path(cargs[0]).absolute().as_uri() + "?mode=rw"
    cparams["uri"] = True


def make_engine(
    url: str,
    *,
    sqlite_writers: bool = True,
    must_exist: bool = False,
    read_timeout: float | None = None,
    named_by: str = "",
    fix: str = BUILD_IT,
    **kwargs: Any,
) -> Engine:
    """An engine whose transactions are real on every backend, SQLite included: the one way a
    command reaches a database.

    On SQLite its transactions begin as writers and wait for the lock (sqlite_transactions);
    sqlite_writers=False for an engine that only reads (a catalog, a stamped revision).
    must_exist: the caller works on a deployed database (reads it, or changes its rows) and never
    builds one: a SQLite file that is not there is refused (NoDatabase, saying where the URL came
    from, named_by, and what to do, fix), never created empty. Only what builds a database (alembic
    upgrade, fleet upgrade) leaves it False.
    read_timeout: seconds each connection may take to open, and each statement and lock wait on it
    (the engine's bounds: bounded_connect, bound_session), for a read that must report a database
    that does not answer rather than wait for it (status, check, the exporters; timed_out says so)."""
    given, url = url, normalise_url(url)
    if must_exist:
        refuse_missing_sqlite_file(given, named_by, fix)
    else:  # a database this engine may build: in a folder that is there
        refuse_missing_sqlite_folder(given)
    backend = make_url(url).get_backend_name()
    dialect = _dialect(backend)
    if dialect is not None and dialect.database_file:
        kwargs.setdefault("poolclass", pool.NullPool)
    try:
        engine = create_engine(url, **kwargs)
    except exc.NoSuchModuleError:
        raise DatabaseURLError(f"unknown database scheme {backend}://; use {SCHEMES}") from None
    except ImportError as missing:
        extra = DRIVER_EXTRAS.get(backend)
        fix = f"pip install 'sqltransport-schema[{extra}]'" if extra else "install its DBAPI driver"
        raise DatabaseURLError(f"the {backend} driver cannot be imported ({missing}); {fix}") from None
    if dialect is not None and dialect.explicit_begin:
        sqlite_transactions(engine, writers=sqlite_writers)
    if must_exist and dialect is not None and dialect.database_file:

        @event.listens_for(engine, "do_connect")
        def _existing_only(_dialect: Any, _record: Any, cargs: list, cparams: dict) -> None:
            existing_only(url, cargs, cparams)

    if read_timeout is not None and dialect is not None:
        _bounded(engine, dialect, read_timeout)
        _BOUNDS[engine] = read_timeout
    _GIVEN[engine] = given
    return engine


def _bounded(engine: Engine, dialect: Dialect, seconds: float) -> None:
    """Every connection of the engine opened, and its statements and lock waits bounded, within seconds."""

    @event.listens_for(engine, "do_connect")
    def _connect_within(_dialect: Any, _record: Any, _cargs: list, cparams: dict) -> None:
        dialect.bounded_connect(cparams, seconds)

    @event.listens_for(engine, "connect")
    def _session_within(dbapi_connection: Any, _record: Any) -> None:
        dialect.bound_session(dbapi_connection, seconds)


@contextmanager
def answered_within(seconds: float | None, setting: str = "--read-timeout") -> Iterator[None]:
    """A read on an engine bounded by read_timeout: a database error that came as the bound ran out
    raised as NoAnswer, saying so (timed_out); any other as it was."""
    import time

    started = time.perf_counter()
    try:
        yield
    except Exception as problem:
        said = database_problem(problem)
        if said is None:
            raise
        line = timed_out(time.perf_counter() - started, seconds, said, setting) if seconds else said
        if line == said:
            raise
        raise NoAnswer(line) from None


def database_problem(problem: BaseException) -> str | None:
    """The one line of a database's error (SQLAlchemy's, or a driver's own from a read on its cursor,
    as the runtime's are: failure); None for an error that is not a database's."""
    if isinstance(problem, exc.SQLAlchemyError):
        return failure(problem)
    if type(problem).__module__.split(".")[0] in DRIVER_MODULES:
        return "the database refused: " + ((str(problem).strip().splitlines() or [type(problem).__name__])[0])
    return None


def read_timeout_of(engine: Engine) -> float | None:
    """The seconds make_engine bounds the engine's connections, statements and lock waits by (None: unbounded)."""
    return _BOUNDS.get(engine)


def timed_out(waited: float, seconds: float, line: str, setting: str = "--read-timeout") -> str:
    """A failure's line as a read past its bound says it (a held lock, a server that does not answer):
    the time waited and the setting that bounds it; the line as it was when it came sooner."""
    if waited < seconds * 0.9:
        return line
    return f"no answer within {waited:.1f} s (read timeout {seconds:g} s; {setting}): {line}"


def driver_connection(url: str, dialect: Any, read_timeout: float, *, must_exist: bool = False, fix: str = BUILD_IT) -> Any:
    """A DBAPI connection straight from the driver (a fleet's version read: no engine, no pool, no
    compilation per target), reached as make_engine reaches a database: a SQLite file that is not
    there refused with must_exist (and never created: existing_only), in a folder that is not there
    always; opened, and its statements and lock waits bounded, within read_timeout. dialect: the
    driver's SQLAlchemy dialect; a driver's error comes back as SQLAlchemy's (statement None: unreachable)."""
    if must_exist:
        refuse_missing_sqlite_file(url, fix=fix)
    refuse_missing_sqlite_folder(url)  # nothing could build it there: named, not "unable to open database file"
    dbapi = dialect.loaded_dbapi
    cargs, cparams = dialect.create_connect_args(make_url(normalise_url(url)))
    if must_exist:
        cargs = list(cargs)
        existing_only(url, cargs, cparams)
    engine = _dialect(dialect.name)
    if engine is not None:
        engine.bounded_connect(cparams, read_timeout)
    try:
        connection = dbapi.connect(*cargs, **cparams)
    except dbapi.Error as error:
        raise exc.DBAPIError.instance(None, None, error, dbapi.Error, dialect=dialect) from None
    try:
        if engine is not None:
            engine.bound_session(connection, read_timeout)
    except dbapi.Error as error:
        connection.close()
        raise exc.DBAPIError.instance(None, None, error, dbapi.Error, dialect=dialect) from None
    return connection


def pipeline_connection(url: str, *, must_exist: bool = False, timeout: float | None = None) -> Any:
    """A DBAPI connection for the pipeline's own statements (explicit transaction control; the engine's
    `pipeline.connect_arguments`), reached as make_engine reaches a database: a SQLite file that is not
    there refused with must_exist (and never created: existing_only), in a folder that is not there
    always; opened within `timeout` seconds (DEFAULT_READ_TIMEOUT), its statements unbounded (a move's
    are as long as its partitions). An engine with no pipeline connection is a UsageError."""
    from .defaults import DEFAULT_READ_TIMEOUT

    if must_exist:
        refuse_missing_sqlite_file(url)
    refuse_missing_sqlite_folder(url)
    parsed = make_url(url)
    dialect = _dialect(parsed.get_backend_name())
    if dialect is None:
        raise errors.UsageError(f"no pipeline connection for {parsed.get_backend_name()!r}")
    driver, cargs, cparams = dialect.pipeline.connect_arguments(parsed, timeout or DEFAULT_READ_TIMEOUT)
    if must_exist:
        existing_only(url, cargs, cparams)
    connection = driver.connect(*cargs, **cparams)
    dialect.pipeline.opened(connection)
    return connection


def given_url(engine: Engine) -> str:
    """The URL of an engine as the user gave it to make_engine (`postgresql://`, `postgres://`), for
    output (through urls.display_url, which masks the password); the engine's own for another engine."""
    return _GIVEN.get(engine) or engine.url.render_as_string(hide_password=False)


def upgrade_command_for(engine: Engine) -> str:
    """The `alembic upgrade head` a message about this engine's database suggests: urls.upgrade_command of
    its URL as the user gave it (given_url), so that the advice reaches that database."""
    return upgrade_command(given_url(engine))


def sqlite_transactions(engine: Engine, writers: bool = True) -> Engine:
    """Take transaction control of a SQLite engine (before its first connection) so competing
    processes wait instead of failing with "database is locked": every transaction begins with
    BEGIN IMMEDIATE (BEGIN when not writers), every connection has a 30 s busy timeout.

    sqlite3 would commit before each DDL statement and begin lazily, as a reader; ours begins at once."""
    from . import engines

    sqlite = cast("SQLite", engines.get("sqlite"))
    begin = sqlite.BEGIN_WRITER if writers else sqlite.BEGIN_READER

    @event.listens_for(engine, "connect")
    def _no_implicit_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        sqlite.wait_for_locks(dbapi_connection)

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql(begin)

    return engine


# What a lost connection leaves: every step is idempotent and what was not committed rolled back.
CONNECTION_LOST = (
    "what it had not committed rolled back. Once the server is back, run the same command again: it goes on from where it stopped"
)


def failure(problem: exc.SQLAlchemyError) -> str:
    """A database error as one line that says where to look: the server and URL, or the statement
    (with the server's hint, if it gave one)."""
    lines = str(getattr(problem, "orig", None) or problem).strip().splitlines()
    first = lines[0] if lines else type(problem).__name__
    if isinstance(problem, (exc.OperationalError, exc.InterfaceError)) and getattr(problem, "statement", None) is None:
        missing = _missing_database(first)
        if missing:
            return missing
        return (
            f"cannot reach the database: {first}; is the server up, and is the URL right "
            "(--url, -x url=, SQLTRANSPORT_URL or sqlalchemy.url in alembic.ini)?"
        )
    if getattr(problem, "connection_invalidated", False):  # the server went away mid-statement: nothing refused anything
        return f"the connection to the server was lost ({first}); {CONNECTION_LOST}"
    hint = next((line.split(":", 1)[1].strip() for line in lines[1:] if line.startswith("HINT:")), None)
    return f"the database refused: {first}" + (f" (hint: {hint})" if hint else "")


# The server's words for a database that is not there, when connecting: PostgreSQL's and MariaDB's.
_NO_DATABASE = (re.compile(r'database "(?P<name>[^"]+)" does not exist'), re.compile(r"Unknown database '(?P<name>[^']+)'"))


def _missing_database(message: str) -> str | None:
    """The one line for a server whose database the URL names is not there: the command that creates it."""
    postgresql, mariadb = (pattern.search(message) for pattern in _NO_DATABASE)
    if postgresql:
        name = postgresql.group("name")
        make = f"`createdb {shlex.quote(name)}` (with the -h, -p and -U of the URL)"
    elif mariadb:
        name = mariadb.group("name")
        make = f"`mysql -e 'CREATE DATABASE {name}'` (with the -h, -P and -u of the URL)"
    else:
        return None
    return (
        f"cannot reach the database: the server has no database {name!r}; create it first: {make}, "
        "or correct the URL (--url, -x url=, SQLTRANSPORT_URL or sqlalchemy.url in alembic.ini)"
    )


@contextmanager
def catalog_connection(url: str, error: type[Exception], read_timeout: float | None = None) -> Iterator[tuple[Dialect, Connection]]:
    """(engine class, connection) for reading a database's catalog; an unsupported engine or a
    failure to reach or read the database is raised as `error` with one clear line (past read_timeout:
    the time waited, timed_out), a SQLite file that is not there as NoDatabase (check, adopt and
    script --url read a deployed database: none is created)."""
    import time

    from . import engines

    db = make_engine(url, sqlite_writers=False, must_exist=True, read_timeout=read_timeout)
    started = time.perf_counter()
    try:
        engine = engines.for_sqlalchemy(db.dialect.name)
        with db.connect() as connection:
            yield engine, connection
    except (engines.UnsupportedEngine, NotImplementedError) as problem:
        raise error(str(problem)) from None
    except exc.SQLAlchemyError as problem:
        waited = time.perf_counter() - started
        raise error(timed_out(waited, read_timeout, failure(problem)) if read_timeout else failure(problem)) from None
    finally:
        db.dispose()


def create_missing_database(url: str) -> bool:
    """Make the database `url` names when it is not there (fleet upgrade --create-missing): a SQLite
    file's folder (the upgrade creates the file), or a server's database, made from its maintenance
    database. True when something was made; a CREATE another session won counts as made by it."""
    from sqlalchemy import text

    from .statements import Statement, parameters_of, run_on

    given = url
    url = normalise_url(url)
    parsed = make_url(url)
    dialect = _dialect(parsed.get_backend_name())
    if dialect is None:
        raise DatabaseURLError(f"unknown database scheme {parsed.get_backend_name()}://; use {SCHEMES}")
    if dialect.database_file:
        folder = Path(parsed.database or "").expanduser().parent
        if parsed.database and not folder.exists():
            folder.mkdir(parents=True)
            return True
        return False
    if dialect.CREATE_DATABASE is None or dialect.MAINTENANCE_DATABASE is None or dialect.DATABASE_EXISTS is None:
        raise errors.UsageError(f"--create-missing: {dialect.name} databases are not made here; create {display_url(given)} first")
    name = parsed.database or ""
    engine = create_engine(parsed.set(database=dialect.MAINTENANCE_DATABASE), poolclass=pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            exists = Statement("database_exists", dialect.DATABASE_EXISTS, {}, parameters_of(dialect.DATABASE_EXISTS))
            if run_on(connection, exists, {"Name": name}).fetchone() is not None:
                return False
            try:
                connection.execute(text(dialect.CREATE_DATABASE.format(name=dialect.quote(name))))
            except exc.DBAPIError as error:
                if error.orig is None or not dialect.duplicate_database(error.orig):
                    raise
            return True
    finally:
        engine.dispose()
