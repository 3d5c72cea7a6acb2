"""The facts the tests compare with are copies in the repository (tests/fixtures/manifest.json lists
each with its source and digests), never read from the workplace folder beside a clone. A copy
changed by hand fails here; tools/sync_fixtures.py --check (run by .ci/run when the folder is there)
fails when a copy and its source differ."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text(encoding="utf-8"))["fixtures"]
TOOL = REPO / "tools" / "sync_fixtures.py"


def test_every_fixture_has_the_digest_the_manifest_records():
    changed = [e["fixture"] for e in MANIFEST if hashlib.sha256((REPO / e["fixture"]).read_bytes()).hexdigest() != e["fixture_sha256"]]
    assert changed == [], f"changed since they were copied (copy them again with tools/sync_fixtures.py): {changed}"


def test_the_manifest_names_every_fixture_and_its_source():
    listed = {e["fixture"] for e in MANIFEST}
    on_disk = {str(p.relative_to(REPO)) for p in FIXTURES.iterdir() if p.name != "manifest.json"}
    assert on_disk <= listed, f"in tests/fixtures/ but not in its manifest: {sorted(on_disk - listed)}"
    for entry in MANIFEST:
        assert entry["source"] and entry["part"] and entry["what"], entry
        assert len(entry["source_sha256"]) == 64 and len(entry["fixture_sha256"]) == 64, entry


def test_no_test_reads_the_folder_beside_the_clone():
    def reads_it(path: Path) -> bool:
        text = path.read_text(encoding="utf-8")
        return "SQLTRANSPORT_SHARED" in text or '/ "shared"' in text or "../shared" in text or "/work/shared" in text

    mine = Path(__file__).resolve()
    tests = [p for p in (REPO / "tests").rglob("*.py") if p.parent.name != "conformance" and p != mine]
    readers = [str(p.relative_to(REPO)) for p in tests if reads_it(p)]
    assert readers == []


def workplace_like(folder: Path) -> Path:
    """A folder shaped as the workplace's, rebuilt from the fixtures: each document holds its fixture's part where
    tools/sync_fixtures.py cuts it out (so --check finds them equal)."""
    part = {e["fixture"]: (REPO / e["fixture"]).read_text(encoding="utf-8") for e in MANIFEST}
    (folder / "seeds").mkdir(parents=True)
    (folder / "reference").mkdir()
    (folder / "conformance").mkdir()
    (folder / "seeds" / "003_7a6ac8b7339ec90b.txt").write_text(
        "Intro\nAt installation time the queue creation script is executed\n" + part["tests/fixtures/mssql_seed003_queue.sql"]
        + "The subscriptions table is also created:\n" + part["tests/fixtures/mssql_seed003_subscriptions.sql"]
        + "Creating table structure in production\nprose\n" + part["tests/fixtures/mssql_seed003_runtime.txt"],
        encoding="utf-8",
    )  # fmt: skip
    (folder / "reference" / "transport-facts.md").write_text(
        "# Facts\n\n## 1. Versions\n\nVersion 1 DDL (tag 1.2.5):\n\n```sql\n" + part["tests/fixtures/mssql_v1_transport_facts.sql"]
        + "```\n\n" + part["tests/fixtures/mssql_transport_facts_s4.md"] + "\n## 5. Addressing\n",
        encoding="utf-8",
    )  # fmt: skip
    (folder / "reference" / "upstream-conformance.md").write_text(
        "# Conformance\n\n## 1. Names\n\n" + part["tests/fixtures/upstream_conformance_s2.md"] + "\n## 3. Statements\n", encoding="utf-8"
    )
    for name in ("check.py", "digests.json", "README.md"):
        (folder / "conformance" / name).write_text(part[f"tests/conformance/{name}"], encoding="utf-8")
    return folder


def check(shared: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--check", "--shared", str(shared)], capture_output=True, text=True, timeout=60)


def test_the_sync_tool_fails_when_a_source_and_its_copy_differ(tmp_path):
    shared = workplace_like(tmp_path / "shared")
    done = check(shared)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 of 10 equal" in done.stdout
    seed = shared / "seeds" / "003_7a6ac8b7339ec90b.txt"
    seed.write_text(seed.read_text(encoding="utf-8").replace("@LockMode = 'Exclusive'", "@LockMode = 'Shared'", 1), encoding="utf-8")
    done = check(shared)
    assert done.returncode == 1 and "differs: tests/fixtures/mssql_seed003_queue.sql" in done.stdout, done.stdout
    assert done.stdout.count("differs:") == 1


def test_the_sync_tool_without_the_folder_says_so(tmp_path):
    done = check(tmp_path / "absent")
    assert done.returncode == 0 and "is absent: nothing to compare" in done.stdout
