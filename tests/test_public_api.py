"""The public API is one list, held three ways: the modules the API reference documents
(docs/reference/*.md, `::: module`) are those mypy checks ([tool.mypy] files in pyproject.toml), each
names its public API in `__all__`, and every name there can be imported."""

from __future__ import annotations

import importlib
import re

from .support.projects import REPO

DOCUMENTED = sorted(
    {match for page in (REPO / "docs" / "reference").glob("*.md") for match in re.findall(r"^::: ([\w.]+)$", page.read_text(), re.M)}
)


def _module_path(module: str) -> str:
    path = module.replace(".", "/")
    return f"{path}/__init__.py" if (REPO / path).is_dir() else f"{path}.py"


def _checked() -> set[str]:
    """The files mypy checks, a folder standing for every module in it."""
    mypy = (REPO / "pyproject.toml").read_text(encoding="utf-8").split("\n[tool.mypy]\n", 1)[1]
    files = re.findall(r'^    "([^"]+)",$', mypy.split("\n]\n", 1)[0], re.M)  # the `files = [...]` list, one a line
    found = set()
    for entry in files:
        path = REPO / entry
        found.update(p.relative_to(REPO).as_posix() for p in path.rglob("*.py")) if path.is_dir() else found.add(entry)
    return found


def test_every_documented_module_is_type_checked():
    assert DOCUMENTED, "docs/reference/ documents no module"
    assert [m for m in DOCUMENTED if _module_path(m) not in _checked()] == []


def test_every_documented_module_names_its_public_api():
    for name in [*DOCUMENTED, "sqltransport_schema", "sqltransport_schema.runtime"]:
        module = importlib.import_module(name)
        assert isinstance(getattr(module, "__all__", None), list), f"{name} has no __all__"
        missing = [attr for attr in module.__all__ if not hasattr(module, attr) and not _submodule(name, attr)]
        assert missing == [], f"{name}.__all__ names what it does not hold"


def _submodule(package: str, name: str) -> bool:
    try:
        importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError:
        return False
    return True


def test_keyword_settings_are_declared_once_and_refuse_unknown_names():
    """The public calls that take their options as **keywords (issue 57: no function over seven
    parameters) type them by one TypedDict each: its names are those the call passes on, and a name
    it does not declare is refused as a keyword argument of a plain signature would be."""
    import inspect

    import pytest

    from sqltransport_schema import wire
    from sqltransport_schema.errorqueue import RetryOptions
    from sqltransport_schema.errorqueue.retrying import retry_selected
    from sqltransport_schema.runtime.sagas import SagaVersions

    keywords = [p.name for p in inspect.signature(retry_selected).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert list(RetryOptions.__annotations__) == keywords
    assert list(SagaVersions.__annotations__) == ["metadata", "persistence_version", "saga_type_version"]
    given = {"message_id": "m", "enclosed_types": "T", "reply_to": None}
    headers = wire.standard_headers(**given, correlation_id="c", conversation_id="v", originating_endpoint="Sales", machine="h")
    assert [headers[name] for name in (wire.CORRELATION_ID, wire.CONVERSATION_ID, wire.ORIGINATING_ENDPOINT, wire.ORIGINATING_MACHINE)] == [
        "c",
        "v",
        "Sales",
        "h",
    ]
    with pytest.raises(TypeError, match="unexpected keyword argument 'machines'"):
        wire.standard_headers(**given, machines="h")
