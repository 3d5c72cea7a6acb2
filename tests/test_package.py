"""The package as people install it, not as a checkout: the install section of docs/workflow.md (README's
"project of your own", moved there with the reference sections; still named README's below) builds the sdist and,
from it, the wheel in a clone (so a file the sdist leaves out breaks the wheel too); the wheel
installs into a fresh virtual environment outside the checkout as README's install blocks write it,
the sdist as pip installs any file, and README's workflow for a project of one's own runs there as
written (init, compile, alembic upgrade head, on SQLite) with nothing of the repository in reach. Also what
the index and a type checker read: the licence, the project URLs, the classifiers, py.typed, the
version; and that the changelog has a section for that version.

Marked `package` (the installs `slow` too): about a minute with pip's cache; the dependencies come
from the package index as a user's would."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from .support import catalog
from .support.databases import under_ci
from .support.projects import REPO, copy_tracked
from .support.spark import demanded
from .test_docs import FENCE

VERSION = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE).group(1)
SITE_URL = re.search(r"^site_url: (\S+)$", (REPO / "mkdocs.yml").read_text(encoding="utf-8"), re.MULTILINE).group(1)
# The tables the commented topology.yaml of `init` declares.
INIT_TABLES = {"Sales", "Sales.Delayed", "error", "SubscriptionRouting"}
# The page whose "A project of your own" installs the tool (README links it).
INSTALL_PAGE = REPO / "docs" / "workflow.md"


def readme_workflow() -> str:
    """README's shell block that starts a project of one's own (`sqltransport-schema init shop`)."""
    text = INSTALL_PAGE.read_text(encoding="utf-8")
    found = [m.group("body") for m in FENCE.finditer(text) if m.group("info").split()[:1] == ["sh"] and "init shop" in m.group("body")]
    assert len(found) == 1, "docs/workflow.md has no (or several) ```sh block with `sqltransport-schema init shop`"
    return found[0]


def readme_install() -> tuple[str, str]:
    """README's two ```sh install blocks: the build in the clone, and the install into a project's own venv."""
    text = INSTALL_PAGE.read_text(encoding="utf-8")
    found = [m.group("body") for m in FENCE.finditer(text) if m.group("info").split() == ["sh", "install"]]
    assert len(found) == 2, "docs/workflow.md has no two ```sh install blocks (the build in the clone, the install in a project)"
    build, install = found
    assert "python -m build" in build and CLONE in install and "activate" in install, found
    return build, install


# In README's install block, the folder of the clone the wheel was built in.
CLONE = "~/src/sqltransport-schema"
# The one change to README's install block a test makes: this interpreter's pip installs into the new venv (`pip
# --python`) rather than a pip bootstrapped into it, which costs 3.6 s of CPU a venv; the same files get installed.
OWN_PIP = ("python3 -m venv .venv && .venv/bin/pip install ", "{python} -m venv --without-pip .venv && {pip} install --quiet ")


def _quiet_env() -> dict[str, str]:
    """The environment without a way back to the checkout: no PYTHONPATH, no virtual environment of ours."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "SQLTRANSPORT_URL")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env or _quiet_env(), capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, f"{' '.join(args)}: exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _installed(python: Path, artifact: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh venv of that Python with the artifact installed, and the environment of a shell that activated it.
    This interpreter's pip installs into it (`pip --python`): bootstrapping a pip of its own into every venv
    cost 3.6 s of CPU each, and the workflow needs no pip."""
    venv = tmp_path / "venv"
    _run([str(python), "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", str(artifact)], cwd=tmp_path)
    env = _quiet_env()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"  # as `. .venv/bin/activate` leaves it
    return venv, env


def _readme_workflow_tables(env: dict[str, str], tmp_path: Path) -> set[str]:
    """README's workflow run as written in an empty folder; the tables of the database it upgraded."""
    work = tmp_path / "work"
    work.mkdir()
    _run(["bash", "-e", "-o", "pipefail", "-c", readme_workflow()], work, env)
    return {name for _, name in catalog.read(f"sqlite:///{work / 'shop' / 'sqltransport.db'}")}


def _readme_install_and_workflow(python: Path, clone: Path, tmp_path: Path) -> tuple[Path, dict[str, str], set[str]]:
    """README's install block (the wheel built in `clone`, into a fresh venv of that Python) and then its
    workflow, run as written in one shell in a folder outside the checkout and outside the clone; the venv,
    the environment of a shell that activated it, and the tables of the database the workflow upgraded."""
    _, install = readme_install()
    assert OWN_PIP[0] in install, f"README's install block no longer says {OWN_PIP[0]!r}"
    install = install.replace(CLONE, str(clone)).replace(
        OWN_PIP[0], OWN_PIP[1].format(python=python, pip=f"{sys.executable} -m pip --python .venv/bin/python")
    )
    project = tmp_path / "my-app"
    project.mkdir()
    assert not project.is_relative_to(REPO) and not project.is_relative_to(clone)
    _run(["bash", "-e", "-o", "pipefail", "-c", install + readme_workflow()], project, _quiet_env())
    venv = project / ".venv"
    env = _quiet_env()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"  # as `. .venv/bin/activate` leaves it
    return venv, env, {name for _, name in catalog.read(f"sqlite:///{project / 'shop' / 'sqltransport.db'}")}


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel README's build block makes in a clone (the repository's tracked files, and the
    `.venv` README's first command made there: this interpreter's), as it writes it; and that clone."""
    root = tmp_path_factory.mktemp("package")
    source = copy_tracked(root / "source", bytecode=False)  # what a clone holds: no __pycache__
    (source / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    build, _ = readme_install()
    _run(["bash", "-e", "-o", "pipefail", "-c", build], cwd=source)
    built = {path.suffix if path.suffix == ".whl" else ".tar.gz": path for path in (source / "dist").iterdir()}
    assert sorted(built) == [".tar.gz", ".whl"], sorted(built)
    return {"sdist": built[".tar.gz"], "wheel": built[".whl"], "clone": source}


@pytest.mark.package
@pytest.mark.slow  # builds the sdist and the wheel (the module's `dist`, shared: counted against no test)
def test_the_wheel_carries_the_licence_the_metadata_and_py_typed(dist):
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        info = f"sqltransport_schema-{VERSION}.dist-info"
        metadata = Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
    assert "sqltransport_schema/py.typed" in names
    assert f"{info}/licenses/LICENSE" in names
    assert {"sqltransport_schema/templates/alembic.ini", "sqltransport_schema/templates/migrations/env.py"} <= names
    assert metadata["Version"] == VERSION
    assert metadata["License-Expression"] == "MIT"
    urls = dict(value.split(", ", 1) for value in metadata.get_all("Project-URL"))
    assert urls["Documentation"] == SITE_URL  # the documentation site's address, as mkdocs.yml builds it
    assert urls["Changelog"] == f"{SITE_URL}changelog/"
    classifiers = metadata.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    assert f"Programming Language :: Python :: {sys.version_info.major}.{sys.version_info.minor}" in classifiers  # the tested one
    assert metadata.get_all("Keywords")


@pytest.mark.package
@pytest.mark.slow  # builds the sdist and the wheel (the module's `dist`, shared: counted against no test)
def test_the_sdist_carries_the_licence_the_changelog_and_py_typed(dist):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "sqltransport_schema/py.typed"} <= names


@pytest.mark.package
@pytest.mark.slow
@pytest.mark.parametrize("artifact", ["wheel", "sdist"])
def test_installed_into_a_fresh_venv_the_readme_workflow_runs(artifact, dist, tmp_path):
    """The wheel as README's install section installs it (its blocks as written, outside the checkout), then
    README's workflow there; the sdist installed by pip, then the same workflow."""
    if artifact == "wheel":
        venv, env, tables = _readme_install_and_workflow(Path(sys.executable), dist["clone"], tmp_path)
    else:
        venv, env = _installed(Path(sys.executable), dist[artifact], tmp_path)
        tables = _readme_workflow_tables(env, tmp_path)
    assert tables == INIT_TABLES
    bin_dir = venv / "bin"
    where = _run([str(bin_dir / "python"), "-c", "import sqltransport_schema; print(sqltransport_schema.__file__)"], tmp_path, env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # the installed copy, not the checkout
    version = _run(["sqltransport-schema", "--version"], tmp_path, env)
    assert version.stdout == f"sqltransport-schema {VERSION}\n"
    if artifact == "wheel":
        _a_type_checker_reads_the_hints(bin_dir / "python", tmp_path)


PYPROJECT = (REPO / "pyproject.toml").read_text(encoding="utf-8")
MINIMUM = re.search(r'^requires-python = ">=(\d+\.\d+)"', PYPROJECT, re.MULTILINE).group(1)
# The Python versions the classifiers name: each one is tested (README's test command on the machine's Python
# and on 3.13 in .ci/run; README's workflow from the wheel on each of the others, below).
NAMED = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', PYPROJECT)


def _python(version: str) -> Path | None:
    """An interpreter of that Python (on PATH, or pyenv's), if this machine has one."""
    found = shutil.which(f"python{version}")
    candidates = [Path(found)] if found else []
    candidates += sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    for python in candidates:
        said = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True)
        if said.returncode == 0 and said.stdout.strip() == version:
            return python
    return None


def test_the_classifiers_name_each_python_from_the_oldest_admitted_on():
    """From requires-python's minimum, no version left out between the oldest and the newest named."""
    minor = [int(version.split(".")[1]) for version in NAMED]
    assert NAMED[0] == MINIMUM and minor == list(range(minor[0], minor[-1] + 1)), NAMED
    assert "3.13" in NAMED  # .ci/run's second Python


@pytest.mark.package
@pytest.mark.slow
@pytest.mark.parametrize("version", [v for v in NAMED if v != "%d.%d" % sys.version_info[:2]])
def test_the_wheel_runs_the_readme_workflow_on_every_python_the_classifiers_name(dist, tmp_path, version):
    """Each Python the classifiers name: the wheel installs and works there too (the running one runs every test)."""
    python = _python(version)
    if python is None:
        if under_ci():
            pytest.fail(f"no python{version} on PATH or in pyenv: the classifiers name it, so CI tests it")
        pytest.skip(f"no python{version} on PATH or in pyenv (the classifiers name it)")
    _venv, _env, tables = _readme_install_and_workflow(python, dist["clone"], tmp_path)
    assert tables == INIT_TABLES


# A service's code with one mistake: only a type checker that reads the package's hints (py.typed) finds it.
SERVICE = """\
from sqltransport_schema import Transport
from sqltransport_schema.runtime.pump import MessagePump

transport = Transport.from_database("sqlite:///sqltransport.db")
queue = transport.queue("Sales")
pump = MessagePump(transport, queue, lambda message, context: None)
waiting: int = queue
"""


def _a_type_checker_reads_the_hints(python: Path, tmp_path: Path) -> None:
    """mypy (the typecheck extra), run on a service's code against the installed package, as a user's CI runs it."""
    try:
        import mypy  # noqa: F401
    except ImportError:
        if demanded("typecheck"):
            pytest.fail("mypy is missing though SQLTRANSPORT_TEST_EXTRAS names typecheck (.ci/run installs it first)")
        pytest.skip("needs the typecheck extra (mypy): pip install -e '.[test,typecheck]'")
    (tmp_path / "service.py").write_text(SERVICE, encoding="utf-8")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(python), "--cache-dir", str(tmp_path / ".mypy_cache"), "service.py"],
        cwd=tmp_path,
        env=_quiet_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert errors == [
        'service.py:7: error: Incompatible types in assignment (expression has type "Queue", variable has type "int")  [assignment]'
    ], checked.stdout + checked.stderr


def test_the_changelog_has_a_section_for_the_version():
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.MULTILINE), (
        f"CHANGELOG.md has no `## [{VERSION}] - YYYY-MM-DD` section for pyproject.toml's version"
    )
