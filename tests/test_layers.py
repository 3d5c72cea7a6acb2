"""The package's layers point one way: read every module's imports (module level and inside
functions, not those under `if TYPE_CHECKING:`) with `ast`, then check there is no cycle and
that no layer reaches above itself or sideways.

The layers themselves are stated once, in docs/architecture.md's `layers` block (highest first);
this file reads them from there, so the page and the rule cannot disagree.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

from .support.console import console_missing

PACKAGE = "sqltransport_schema"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"
ROOT_PACKAGE = "__init__"  # the package root's name in the layers block


@functools.cache
def _source(path: Path) -> str:
    """Each module read once a worker: a dozen checks walk the whole package."""
    return path.read_text(encoding="utf-8")


@functools.cache
def _tree(source: str) -> ast.Module:
    """Each source parsed once a worker (the trees are only walked, never changed)."""
    return ast.parse(source)


def _declared_layers() -> list[tuple[str, ...]]:
    """docs/architecture.md's layers, lowest first: each the top-level names (packages without their `/`)
    written before the two spaces of its line."""
    text = _source(ARCHITECTURE)
    block = text.split("```layers\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  ", 1)[0].split() for line in block.splitlines() if line.strip()]
    return [tuple(name.rstrip("/") for name in names) for names in reversed(lines)]


LAYERS = _declared_layers()
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# templates/ holds the files `init` writes into a new project (its migrations/env.py), not modules
MODULES = {_module_name(path): path for path in sorted(ROOT.rglob("*.py")) if "templates" not in path.relative_to(ROOT).parts}


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _import_nodes(node: ast.AST):
    """Every import statement under node, at any depth, except those only type checkers run."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif not _is_type_checking(child):
            yield from _import_nodes(child)


def _imports(name: str) -> set[str]:
    """The package's modules `name` imports (a package when no submodule is named)."""
    found = set()
    for node in _import_nodes(_tree(_source(MODULES[name]))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _resolve(name, node)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


ENTRY_POINTS = {f"{PACKAGE}.pipeline.job": "cli"}  # spark-submit's entry point runs the command line

# Modules that import an extra's packages at the top (the rest import them where they are used):
# each is imported only where its extra is installed; why not, when it is not.
NEEDS_EXTRA = {f"{PACKAGE}.console.app": console_missing}


def _importable() -> list[str]:
    return sorted(m for m in MODULES if not m.endswith(".__main__") and not (m in NEEDS_EXTRA and NEEDS_EXTRA[m]()))


def _layer(module: str) -> str:
    """The top-level name a module is ranked by: its package, or itself (ROOT_PACKAGE for the root)."""
    return ENTRY_POINTS.get(module) or (module.split(".")[1] if "." in module else ROOT_PACKAGE)


def test_every_module_is_in_a_declared_layer_and_names_are_real():
    top = {_layer(m) for m in MODULES if m not in ENTRY_POINTS}
    assert sorted(top - set(RANK)) == [], "add these to docs/architecture.md's layers block"
    assert sorted(set(RANK) - top) == [], "docs/architecture.md's layers block names modules that do not exist"
    assert len(RANK) == sum(len(names) for names in LAYERS), "a name is in two layers"


def _against_layers(graph: dict[str, set[str]]) -> list[str]:
    """Imports of another name in the same layer or a higher one."""
    return sorted(
        f"{src} ({_layer(src)}) imports {dst} ({_layer(dst)})"
        for src, targets in graph.items()
        for dst in targets
        if _layer(src) != _layer(dst) and RANK[_layer(dst)] >= RANK[_layer(src)]
    )


def test_no_module_imports_upward_or_sideways():
    """Only the own package or module, and the layers below: two names on one line are independent."""
    assert _against_layers(GRAPH) == []


def test_the_layer_rule_sees_an_upward_and_a_sideways_import():
    upward = {f"{PACKAGE}.engines.postgresql": {f"{PACKAGE}.topology.model"}}
    sideways = {f"{PACKAGE}.pipeline.move": {f"{PACKAGE}.console.app"}}
    assert len(_against_layers(upward)) == 1 and len(_against_layers(sideways)) == 1
    assert _against_layers({f"{PACKAGE}.fleet.work": {f"{PACKAGE}.migrate.env"}}) == []


def _cycle() -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(GRAPH[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(GRAPH):
        if start not in state and (found := visit(start)):
            return found
    return None


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith(".__main__")))  # that one runs the CLI
def test_every_module_imports(module):
    missing = NEEDS_EXTRA[module]() if module in NEEDS_EXTRA else None
    if missing:
        pytest.skip(missing)
    importlib.import_module(module)


def test_no_import_cycle():
    assert _cycle() is None, " -> ".join(_cycle() or ())


def _offences(layers: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{src} imports {dst}" for src, targets in GRAPH.items() if _layer(src) in layers for dst in targets if _layer(dst) in forbidden
    )


def test_revisions_read_only_alembic_and_the_schema():
    # versions: a merge of branches compares queues by the shape of the version that built them;
    # errors: the one root its own errors derive from
    assert GRAPH[f"{PACKAGE}.revisions"] <= {f"{PACKAGE}.schema", f"{PACKAGE}.versions", f"{PACKAGE}.errors"}
    assert GRAPH[f"{PACKAGE}.urls"] == set()


def test_migrations_do_not_reach_into_the_runtime():
    """Beyond the layers: revisions run where no runtime is used; what both need (the wire format) is in the core."""
    assert _offences(("migrate",), ("runtime",)) == []


def test_the_graph_sees_function_level_imports_and_skips_type_checking_ones():
    """check.run imports db inside the function: the walk must find it, or the tests above prove
    nothing; schema names Topology for type checkers only, which is no import at run time."""
    assert f"{PACKAGE}.db" in GRAPH[f"{PACKAGE}.check"]
    assert f"{PACKAGE}.topology" not in GRAPH[f"{PACKAGE}.schema"]


# Exceptions that never leave the function that raises them: control flow, not a message for anyone.
PRIVATE_CONTROL_FLOW = {f"{PACKAGE}.runtime.receiving.RolledBack"}  # raised by the receive, caught by the pump


def _exception_classes(owner: object, module: str):
    """The exception classes defined in module: at its top level and nested in its classes."""
    for value in vars(owner).values():
        if isinstance(value, type) and value.__module__ == module:
            if issubclass(value, BaseException):
                yield value
            yield from _exception_classes(value, module)


def test_every_error_derives_from_the_one_root():
    """A user's error is an errors.SqltransportError (by meaning, a subclass): the command line
    maps it by class, and a caller catches the project's errors with one except."""
    from sqltransport_schema.errors import SqltransportError

    found, strays = [], []
    for module in _importable():
        for cls in _exception_classes(importlib.import_module(module), module):
            name = f"{module}.{cls.__qualname__}"
            found.append(name)
            if not issubclass(cls, SqltransportError) and name not in PRIVATE_CONTROL_FLOW:
                strays.append(name)
    assert f"{PACKAGE}.topology.problems.TopologyError" in found and f"{PACKAGE}.wire.PoisonHeaders" in found  # the walk sees them
    assert strays == []


ENGINE_NAMES = {"postgresql", "postgres", "mssql", "sqlite", "mysql", "mariadb", "oracle"}


def _engine_name_comparisons(path: Path) -> list[int]:
    """Lines of path where a comparison names an engine (`x == "mssql"`, `x in ("mysql", "mariadb")`)."""
    lines = []
    for node in ast.walk(_tree(_source(path))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            names = {c.value for o in operands for c in ast.walk(o) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            if names & ENGINE_NAMES:
                lines.append(node.lineno)
    return lines


def test_no_engine_name_is_compared_outside_the_engines():
    """Above the engines a difference between engines is a capability the Dialect declares
    (`batch_separator`, `database_file`, ...), so a new engine says what it can do in one place."""
    offences = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for name, path in MODULES.items()
        if _layer(name) != "engines"
        for line in _engine_name_comparisons(path)
    ]
    assert offences == [], "engine names compared outside engines/ (ask a Dialect capability instead): " + ", ".join(offences)


# Rooms of a readable size: a module a maintainer can hold in mind, a function that fits on a screen.
MAX_MODULE_LINES = 900
MAX_FUNCTION_LINES = 80


def _long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str, int]]:
    """(line, name, length) of every function or method in source longer than limit lines."""
    return [
        (node.lineno, node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(_tree(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_module_is_longer_than_a_maintainer_can_hold_in_mind():
    lengths = {name: len(_source(path).splitlines()) for name, path in MODULES.items()}
    assert sorted(f"{name}: {n} lines" for name, n in lengths.items() if n > MAX_MODULE_LINES) == []


def test_no_function_is_longer_than_a_screen():
    found = [
        f"{path.relative_to(ROOT.parent)}:{line} {name} ({length} lines)"
        for path in MODULES.values()
        for line, name, length in _long_functions(_source(path))
    ]
    assert found == []


def test_the_length_check_finds_a_long_method():
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = f"class A:\n    def long(self):\n{body}\n    def short(self):\n        return 1\n"
    assert _long_functions(source) == [(2, "long", MAX_FUNCTION_LINES + 1)]


# A call of more than seven parameters asks its reader to hold too much: the parameters that travel
# together belong in a frozen dataclass (runtime.pump.PumpSettings, for one). self and cls do not
# count; *args and **kwargs count one each (one name, however many values: MessagePump's
# **options typed by PumpOptions is how a settings object keeps its old keyword arguments, and a
# public call's fixed set of options behind ** is typed the same way, by one TypedDict).
MAX_PARAMETERS = 7
# Functions allowed more, by "path:name", each with the reason; kept empty or nearly so.
MANY_PARAMETERS: dict[str, str] = {}


def _many_parameters(source: str, limit: int = MAX_PARAMETERS) -> list[tuple[int, str, int]]:
    """(line, name, count) of every function or method in source with more than limit parameters."""
    found = []
    for node in ast.walk(_tree(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args)]
            own = names[1:] if names[:1] in (["self"], ["cls"]) else names
            count = len(own) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)
            if count > limit:
                found.append((node.lineno, node.name, count))
    return found


def test_no_function_takes_more_than_seven_parameters():
    found = {
        f"{path.relative_to(ROOT.parent).as_posix()}:{name}": f"line {line}, {count} parameters"
        for path in MODULES.values()
        for line, name, count in _many_parameters(_source(path))
    }
    assert {where: why for where, why in found.items() if where not in MANY_PARAMETERS} == {}
    assert sorted(set(MANY_PARAMETERS) - set(found)) == [], "allowed more parameters but no longer takes them"


def test_the_parameter_check_counts_keywords_and_stars_not_self():
    source = (
        "class A:\n"
        "    def wide(self, a, b, c, d, e, f, g, *, h): ...\n"
        "    def starred(self, a, b, c, d, e, f, *rest, **options): ...\n"
        "    def seven(self, a, b, c, d, e, f, g): ...\n"
        "    @classmethod\n"
        "    def make(cls, a, b, c, d, e, f, **options): ...\n"
        "def plain(a, b, c, d, e, f, g, h=1): ...\n"
    )
    assert _many_parameters(source) == [(7, "plain", 8), (2, "wide", 8), (3, "starred", 8)]


# The pump's receive exists once (runtime/receiving.py): every function that takes messages off a
# queue for a handler, deletes what a receive locked, or decides a failed message's fate, by name.
# A second copy of the receive (the four the pump once had) shows up here as a new caller.
RECEIVE_CALLS = {
    "receive": {"runtime.receiving.Receiver._take", "runtime.pump.MessagePump._receive"},  # the pump calls the one path
    "take_batch": {"runtime.receiving.Receiver._take", "runtime.transport.Queue.receive_batch"},
    "lock_batch": {"runtime.receiving.Receiver._take", "runtime.outbox.PumpOutbox.lock"},
    "lock_batch_joined": {"runtime.outbox.PumpOutbox.lock"},
    "delete_locked": {"runtime.receiving.Receiver.receive", "runtime.outbox.PumpOutbox.closing"},
    "deleting_locked": {"runtime.outbox.PumpOutbox._taking", "runtime.transport.Queue.delete_locked"},
    "error_headers": {"runtime.recoverability.Recoverability.move"},
    "delayed_retry_headers": {"runtime.recoverability.Recoverability.move"},
    "rollback_to_savepoint": {"runtime.receiving.Receiver._one"},
}


def _callers(names: set[str]) -> dict[str, set[str]]:
    """call name -> the package's functions (module.Class.function) that call it as an attribute."""
    found: dict[str, set[str]] = {name: set() for name in names}

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = f"{where}.{child.name}"
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr in found:
                found[child.func.attr].add(where)
            visit(child, inner)

    for module, path in MODULES.items():
        visit(_tree(_source(path)), module.removeprefix(f"{PACKAGE}."))
    return found


def test_the_receive_path_and_the_recoverability_rule_exist_once():
    assert _callers(set(RECEIVE_CALLS)) == RECEIVE_CALLS


# The error queue has one model (errorqueue/): its headers are read by wire's readers, its statements
# (the engines' `dialect.live_bus.failed_*`, the retry's and the archive's) run there alone. The
# console and the command line call the model; a second reader (the console parsing a header, a
# command running the error queue's SQL) shows up here.
ERROR_QUEUE_HOME = f"{PACKAGE}.errorqueue"
# wire's readers of a message's headers -> the modules besides the model that call them (other queues' headers)
HEADER_READERS = {
    "decode_headers": {"runtime.transport", "pipeline.move"},  # a received message's; the pipeline's moved rows
    "first_values": set(),
    "failed_q_of_unreadable": set(),
    "time_sent_of": {"runtime.status"},  # status: the head of each queue
}
# the headers only a failed message carries -> the modules besides the model and wire that name them
ERROR_HEADERS = {
    # the pipeline's archive of any queue into Parquet: one column per header, in Spark's SQL
    **{name: {"pipeline.archive"} for name in ("FAILED_Q", "TIME_OF_FAILURE", "EXCEPTION_TYPE", "EXCEPTION_MESSAGE")},
    **{name: set() for name in ("EXCEPTION_STACKTRACE", "EXCEPTION_INFO_PREFIX")},
}
# the error queue's statements (dialect.live_bus.NAME) -> the modules besides the model that run them
ERROR_QUEUE_STATEMENTS = {
    **{name: set() for name in ("failed_groups", "failed_count", "failed_page", "failed_message", "error_batch", "delete_retried")},
    **{name: set() for name in ("archive", "write_probe", "action_log")},
    "failed_queue_counts": {"runtime.status"},  # status: the error queue's count by FailedQ, in SQL
}


def _error_queue_readers() -> dict[str, set[str]]:
    """name -> the modules outside errorqueue/ and wire that call a header reader, name an error
    header (wire.X, or its text as a constant), or run an error queue statement (live_bus.X(...))."""
    texts = {getattr(importlib.import_module(f"{PACKAGE}.wire"), name): name for name in ERROR_HEADERS}
    found: dict[str, set[str]] = {name: set() for name in (*HEADER_READERS, *ERROR_HEADERS, *ERROR_QUEUE_STATEMENTS)}
    for module, path in MODULES.items():
        if module.startswith(ERROR_QUEUE_HOME) or module == f"{PACKAGE}.wire" or _layer(module) == "engines":
            continue
        short = module.removeprefix(f"{PACKAGE}.")
        for node in ast.walk(_tree(_source(path))):
            if isinstance(node, ast.Attribute) and node.attr in (*HEADER_READERS, *ERROR_HEADERS):
                found[node.attr].add(short)
            elif isinstance(node, ast.ImportFrom) and any(a.name in (*HEADER_READERS, *ERROR_HEADERS) for a in node.names):
                found.update({a.name: found[a.name] | {short} for a in node.names if a.name in found})
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in texts:
                found[texts[node.value]].add(short)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ERROR_QUEUE_STATEMENTS:
                owner = node.func.value
                if isinstance(owner, ast.Attribute) and owner.attr == "live_bus" or isinstance(owner, ast.Name) and owner.id == "live_bus":
                    found[node.func.attr].add(short)
    return found


def test_the_error_queue_is_read_by_its_model_alone():
    assert _error_queue_readers() == {**HEADER_READERS, **ERROR_HEADERS, **ERROR_QUEUE_STATEMENTS}


STATUS = {f"{PACKAGE}.runtime.status"}  # the overview's figures: status, not the error queue's work


def test_the_console_holds_routes_templates_and_jobs_only():
    """The console reaches the error queue through the model: no wire, no engine, no statement of its own."""
    reached = sorted(
        f"{src} imports {dst}"
        for src, targets in GRAPH.items()
        if _layer(src) == "console"
        for dst in targets
        if dst == f"{PACKAGE}.wire" or _layer(dst) in ("engines", "statements") or _layer(dst) == "runtime" and dst not in STATUS
    )
    assert reached == []
    assert any(dst.startswith(ERROR_QUEUE_HOME) for dst in GRAPH[f"{PACKAGE}.console.app"])  # the walk sees the model


def test_the_readers_check_finds_a_second_reader(monkeypatch, tmp_path):
    """A console module that parses a FailedQ or runs the groups' statement is found."""
    stray = tmp_path / "stray.py"
    stray.write_text(
        "from sqltransport_schema import wire\n"
        "def f(t, raw):\n"
        "    t.dialect.live_bus.failed_groups(None, None, (), ())\n"
        "    return wire.decode_headers(raw)[wire.FAILED_Q], raw.find('NServiceBus.ExceptionInfo.Message')\n"
    )
    monkeypatch.setitem(MODULES, f"{PACKAGE}.console.stray", stray)
    found = _error_queue_readers()
    assert {"console.stray"} <= found["decode_headers"] & found["FAILED_Q"] & found["failed_groups"] & found["EXCEPTION_MESSAGE"]


ALEMBIC_WRAPPER = f"{PACKAGE}.migrate.in_process"  # the one module allowed an Alembic name that is not public


def _alembic_private_names() -> set[str]:
    from alembic import command
    from alembic.config import Config
    from alembic.ddl.impl import DefaultImpl
    from alembic.operations import BatchOperations, Operations
    from alembic.runtime.environment import EnvironmentContext
    from alembic.runtime.migration import MigrationContext
    from alembic.script import Script, ScriptDirectory
    from alembic.util.langhelpers import ModuleClsProxy

    owners = (command, Config, DefaultImpl, BatchOperations, Operations, EnvironmentContext, MigrationContext, Script, ScriptDirectory)
    names = {name for owner in (*owners, ModuleClsProxy) for name in dir(owner) if name.startswith("_") and not name.startswith("__")}
    return names | {"_proxy"}  # set on the alembic.context and alembic.op modules while a command runs


def _private_reaches(tree: ast.AST, private: set[str]) -> list[str]:
    """`x._name` (x not self or cls) and `getattr(x, "_name")` / `hasattr(...)` of Alembic's private names."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr", "setattr"):
            found += [arg.value for arg in node.args[1:2] if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    return sorted(name for name in found if name in private)


def test_alembic_private_names_are_reached_from_one_wrapper_only():
    private = _alembic_private_names()
    assert "_upgrade_revs" in private and "_install_proxy" in private  # the walk knows Alembic's private names
    found = {name: reaches for name in MODULES if (reaches := _private_reaches(_tree(_source(MODULES[name])), private))}
    assert set(found) <= {ALEMBIC_WRAPPER}, found
    assert _private_reaches(_tree("operations._install_proxy()"), private) == ["_install_proxy"]
    assert _private_reaches(_tree("getattr(context, '_proxy', None)"), private) == ["_proxy"]


# The one way to a database (docs/fleets.md, "Reaching a database"): db.make_engine, db.driver_connection
# (a fleet's version read), db.pipeline_connection (the pipeline's statements) and db.catalog_connection.
# Only these modules open a connection themselves, each for a reason:
OWN_CONNECTIONS = {
    f"{PACKAGE}.db": "the one way: the URL's rules, the missing SQLite file, the read timeout",
    f"{PACKAGE}.fleet.journal": "the fleet's journal, the tool's own SQLite file beside the fleet file, not a database of the fleet",
}
ENGINE_MAKERS = {"create_engine", "engine_from_config", "create_async_engine", "create_mock_engine"}
DRIVERS = {"sqlite3", "psycopg", "psycopg2", "pyodbc", "pymysql", "MySQLdb", "dbapi", "loaded_dbapi", "driver"}


def _own_connections(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each engine made, or DBAPI connection opened, in a module: a call of create_engine
    (and its kin), `<driver>.connect(...)` of a DBAPI module (or a dialect's loaded_dbapi), and an import of
    either name on its own (`from sqlite3 import connect`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            owner = func.value if isinstance(func, ast.Attribute) else None
            owner_name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name in ENGINE_MAKERS or (name == "connect" and owner_name in DRIVERS):
                found.append((node.lineno, f"{owner_name + '.' if owner_name else ''}{name}()"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in DRIVERS | {"sqlalchemy"}:
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if a.name in ENGINE_MAKERS | {"connect"}]
    return found


def _connections_outside_db() -> list[str]:
    return [
        f"{name}:{line}: {what}"
        for name, path in MODULES.items()
        if name not in OWN_CONNECTIONS
        for line, what in _own_connections(_tree(_source(path)))
    ]


def test_databases_are_reached_through_db_alone():
    """Every connection to a database is opened by db.py, so that each gets the URL's rules, the missing
    SQLite file refused, and the read timeout; OWN_CONNECTIONS names the exceptions and why."""
    offences = _connections_outside_db()
    assert offences == [], "a database opened outside db.py (use db.make_engine, db.driver_connection or db.pipeline_connection): " + (
        ", ".join(offences)
    )


def test_the_connection_check_finds_an_engine_and_a_driver_connection(monkeypatch, tmp_path):
    stray = tmp_path / "stray.py"
    stray.write_text(
        "import sqlalchemy as sa\n"
        "from sqlalchemy import create_engine\n"
        "def f(url, dialect):\n"
        "    import psycopg, sqlite3\n"
        "    sa.create_engine(url)\n"
        "    psycopg.connect(url)\n"
        "    dialect.loaded_dbapi.connect(url)\n"
        "    return sqlite3.connect(':memory:')\n"
    )
    monkeypatch.setitem(MODULES, f"{PACKAGE}.console.stray", stray)
    found = [line.split(":", 1)[1] for line in _connections_outside_db() if line.startswith(f"{PACKAGE}.console.stray:")]
    assert sorted(found) == sorted(
        [
            "2: from sqlalchemy import create_engine",
            "5: sa.create_engine()",
            "6: psycopg.connect()",
            "7: loaded_dbapi.connect()",
            "8: sqlite3.connect()",
        ]
    ), found
