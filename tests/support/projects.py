"""Throwaway migration projects: alembic.ini, migrations/ and topology.yaml in a temporary folder."""

from __future__ import annotations

import argparse
import importlib.util
import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config

from sqltransport_schema import cli

REPO = Path(__file__).resolve().parents[2]


def copy_tracked(root: Path, bytecode: bool = True) -> Path:
    """The repository's files as a fresh clone has them (those git tracks, as they are now), under root,
    with the package's bytecode beside its sources unless `bytecode` is false (support/bytecode.py: a
    process importing the copy reads it rather than compiling the package)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.splitlines()
    for name in tracked:
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
            if bytecode and name.startswith("sqltransport_schema/") and name.endswith(".py"):
                _copy_bytecode(REPO / name, root / name)
    return root


def _copy_bytecode(source: Path, copy: Path) -> None:
    compiled = Path(importlib.util.cache_from_source(str(source)))
    if compiled.is_file():
        target = Path(importlib.util.cache_from_source(str(copy)))
        target.parent.mkdir(exist_ok=True)
        shutil.copy2(compiled, target)


@dataclass
class Project:
    """A migration project in a temporary folder: alembic.ini, migrations/, topology.yaml."""

    root: Path

    @property
    def ini(self) -> Path:
        return self.root / "alembic.ini"

    @property
    def topology(self) -> Path:
        return self.root / "topology.yaml"

    @property
    def versions(self) -> Path:
        return self.root / "migrations" / "versions"

    def write_topology(self, text: str) -> None:
        self.topology.write_text(text, encoding="utf-8")

    def compile(self, message: str = "change", *extra: str) -> int:
        return cli.main(["compile", "-m", message, "-c", str(self.ini), "--topology", str(self.topology), *extra])

    def revisions(self) -> list[Path]:
        return sorted(self.versions.glob("*.py"), key=lambda p: p.stat().st_mtime_ns)

    def config(self, url: str, *x: str, stdout=None) -> Config:
        cfg = Config(str(self.ini), stdout=stdout) if stdout is not None else Config(str(self.ini))
        cfg.cmd_opts = argparse.Namespace(x=[f"url={url}", *x])
        cfg.attributes["configure_logging"] = False
        return cfg

    def upgrade(self, url: str, revision: str = "head", *x: str) -> None:
        command.upgrade(self.config(url, *x), revision)

    def downgrade(self, url: str, revision: str = "base", *x: str) -> None:
        command.downgrade(self.config(url, *x), revision)

    def offline(self, url: str, revision: str = "head") -> str:
        buffer = io.StringIO()
        cfg = self.config(url, stdout=buffer)
        cfg.output_buffer = buffer
        command.upgrade(cfg, revision, sql=True)
        return buffer.getvalue()

    def head(self) -> str | None:
        from alembic.script import ScriptDirectory

        return ScriptDirectory.from_config(Config(str(self.ini))).get_current_head()

    def deploy(self, url: str, topology: str, message: str = "initial") -> str:
        """Write the topology, compile one revision and upgrade `url` to it (the common first step); returns `url`."""
        self.write_topology(topology)
        assert self.compile(message) == 0
        self.upgrade(url)
        return url


def new_project(root: Path) -> Project:
    """A project at `root` with the repository's alembic.ini, env.py and script template."""
    (root / "migrations" / "versions").mkdir(parents=True)
    shutil.copy(REPO / "alembic.ini", root / "alembic.ini")
    for name in ("env.py", "script.py.mako"):
        shutil.copy(REPO / "migrations" / name, root / "migrations" / name)
    return Project(root)
