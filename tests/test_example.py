"""The repository's own topology.yaml and migrations, driven through the real command lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqltransport_schema import cli, schema, topology

from .support import catalog, warm
from .support.projects import REPO

BIN = Path(sys.executable).parent


def run(*args: str, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300)


def test_example_topology_exercises_every_feature():
    topo = topology.load(REPO / "topology.yaml")
    kinds = {spec.kind for spec in schema.blueprint(topo).tables}
    assert kinds == set(schema.Kind)
    assert any(ep.instances for ep in topo.endpoints)
    assert any(ep.send_only for ep in topo.endpoints)
    assert any(ep.body_string for ep in topo.endpoints)
    assert any(ep.delayed_delivery is False for ep in topo.endpoints)
    assert any(ep.schema for ep in topo.endpoints) and any(ep.catalog for ep in topo.endpoints)
    assert {q.name for q in topo.queues} >= {"error", "audit"}


def test_committed_migrations_match_the_example_topology():
    """CI fails when topology.yaml changed without a compiled revision."""
    assert cli.main(["compile", "--check", "-c", str(REPO / "alembic.ini")]) == 0


def test_alembic_command_line_upgrades_and_downgrades_the_example(tmp_path):
    url = f"sqlite:///{tmp_path / 'example.db'}"
    upgraded = run(warm.program("alembic"), "upgrade", "head", env={"SQLTRANSPORT_URL": url})
    assert upgraded.returncode == 0, upgraded.stderr
    assert 'create queue "Sales" (transport 9.1)' in upgraded.stderr  # progress, per table
    tables = catalog.read(url)
    blueprint = schema.blueprint(topology.load(REPO / "topology.yaml"))
    assert {name for _, name in tables} == {spec.name.table for spec in blueprint.tables}

    refused = run(warm.program("alembic"), "-x", f"url={url}", "downgrade", "base")
    failed = refused.stdout  # Alembic prints its one FAILED line on stdout (the ERROR log line repeating it is dropped)
    assert refused.returncode != 0 and 'refusing to drop protected queues "audit", "error"' in failed
    assert "-x drop_protected=audit,error downgrade base" in failed and "refusing" not in refused.stderr
    assert {name for _, name in catalog.read(url)} >= {"error", "audit"}  # rolled back: nothing dropped

    downgraded = run(warm.program("alembic"), "-x", f"url={url}", "-x", "drop_protected=error,audit", "downgrade", "base")
    assert downgraded.returncode == 0, downgraded.stderr
    assert catalog.read(url) == {}


def test_offline_scripts_for_both_server_engines_name_every_table():
    blueprint = schema.blueprint(topology.load(REPO / "topology.yaml"))
    for url, quote in (("mssql://", lambda n: "[" + n + "]"), ("postgresql://", lambda n: '"' + n + '"')):
        result = run(warm.program("alembic"), "-x", f"url={url}", "upgrade", "head", "--sql")
        assert result.returncode == 0, result.stderr
        assert "CREATE TABLE" in result.stdout
        for spec in blueprint.tables:
            assert quote(spec.name.table) in result.stdout, (url, spec.name)
    assert "sp_getapplock" in run(warm.program("alembic"), "-x", "url=mssql://", "upgrade", "head", "--sql").stdout


def test_format_reference_documents_every_key():
    text = (REPO / "docs" / "topology.md").read_text()

    def keys(field, prefix=""):
        for name, sub in (field.fields or {}).items():
            yield name
            target = sub.items if sub.type == "list" and sub.items and sub.items.fields else sub
            if target.fields:
                yield from keys(target)

    missing = [k for k in keys(topology.FORMAT) if f"`{k}`" not in text]
    assert missing == []
