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
