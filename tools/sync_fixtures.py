"""Copy the facts the tests compare with from the workplace folder beside the clone into the repository.

The tests never read that folder (a contributor's clone has nothing beside it): they read the copies
listed in tests/fixtures/manifest.json, each with its source (a file under the folder, and the part
of it cut out) and the sha256 of the source at copy time and of the copy. tests/test_fixtures.py holds
every copy to its recorded digest. This tool is how a copy is made or checked:

    python3 tools/sync_fixtures.py --check   # exit 1 when a copy differs from its source (.ci/run)
    python3 tools/sync_fixtures.py           # rewrite the copies and the manifest from the source

`--shared PATH` names the folder (default: `shared` beside the repository). Standard library only.
Exit status: 0 equal (or no folder to compare with, said so), 1 a copy differs, 2 a source or its
part is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "fixtures" / "manifest.json"
SEED_003 = "seeds/003_7a6ac8b7339ec90b.txt"
FACTS = "reference/transport-facts.md"
CONFORMANCE = "reference/upstream-conformance.md"

# fixture (repository path) -> (source under the shared folder, how the part is cut out, what it is)
FIXTURES: dict[str, tuple[str, dict, str]] = {
    "tests/fixtures/mssql_seed003_queue.sql": (
        SEED_003,
        {"between": ["At installation time the queue creation script is executed", "The subscriptions table is also created:"]},
        "seed 003: the queue creation script",
    ),
    "tests/fixtures/mssql_seed003_subscriptions.sql": (
        SEED_003,
        {"between": ["The subscriptions table is also created:", "Creating table structure in production"]},
        "seed 003: the subscription table creation script",
    ),
    "tests/fixtures/mssql_seed003_delayed.sql": (
        SEED_003,
        {"between": ["Performs delayed queue creation.", "Move Due Delayed Messages"]},
        "seed 003: the delayed table creation script",
    ),
    "tests/fixtures/mssql_seed003_runtime.txt": (
        SEED_003,
        {"from_line": "Runtime"},
        "seed 003: its Runtime part (the runtime statements), to the end",
    ),
    "tests/fixtures/mssql_v1_transport_facts.sql": (
        FACTS,
        {"sql_block_after": "Version 1 DDL (tag 1.2.5)"},
        "transport-facts.md §1: the version-1 DDL",
    ),
    "tests/fixtures/mssql_transport_facts_s4.md": (
        FACTS,
        {"section": "4"},
        "transport-facts.md §4: runtime statement history",
    ),
    "tests/fixtures/upstream_conformance_s2.md": (
        CONFORMANCE,
        {"section": "2"},
        "upstream-conformance.md §2: the SQL Server release matrix",
    ),
    "tests/conformance/check.py": ("conformance/check.py", {"whole": True}, "the upstream conformance checker"),
    "tests/conformance/digests.json": (
        "conformance/digests.json",
        {"whole": True},
        "sha256 digests of upstream's statements per release",
    ),
    "tests/conformance/README.md": ("conformance/README.md", {"whole": True}, "the checker's README"),
}


class Missing(Exception):
    """A source file, or the part of it a fixture is cut from, is not there."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cut(text: str, how: dict) -> str:
    """The part of a source document a fixture holds."""
    if how.get("whole"):
        return text
    lines = [line.rstrip() for line in text.splitlines()]
    if "between" in how:
        before, after = how["between"]
        if lines.count(before) != 1 or after not in lines[lines.index(before) + 1 :]:
            raise Missing(f"expected the line {before!r} once, then {after!r}")
        start = lines.index(before) + 1
        return "\n".join(lines[start : lines.index(after, start)]).strip() + "\n"
    if "from_line" in how:
        if lines.count(how["from_line"]) != 1:
            raise Missing(f"expected the line {how['from_line']!r} once")
        return "\n".join(text.splitlines()[lines.index(how["from_line"]) :]) + "\n"
    if "section" in how:
        heading = f"## {how['section']}. "
        starts = [i for i, line in enumerate(lines) if line.startswith(heading)]
        if len(starts) != 1:
            raise Missing(f"expected one heading starting {heading!r}")
        end = next((i for i in range(starts[0] + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        return "\n".join(text.splitlines()[starts[0] : end]).strip() + "\n"
    if "sql_block_after" in how:
        marker = next((i for i, line in enumerate(lines) if line.startswith(how["sql_block_after"])), None)
        if marker is None:
            raise Missing(f"no line starting {how['sql_block_after']!r}")
        opening = next(i for i in range(marker + 1, len(lines)) if lines[i].strip() == "```sql")
        closing = next(i for i in range(opening + 1, len(lines)) if lines[i].strip() == "```")
        return "\n".join(lines[opening + 1 : closing]).strip() + "\n"
    raise ValueError(f"unknown extraction {how}")


def from_source(shared: Path, fixture: str) -> tuple[bytes, bytes]:
    """(the source file's bytes, the fixture's text as cut from it)."""
    source, how, _ = FIXTURES[fixture]
    path = shared / source
    if not path.is_file():
        raise Missing(f"{path} is not there")
    data = path.read_bytes()
    try:
        return data, cut(data.decode("utf-8"), how).encode("utf-8")
    except Missing as exc:
        raise Missing(f"{path}: {exc}") from None


def manifest_entry(fixture: str, source_bytes: bytes, fixture_bytes: bytes) -> dict:
    source, how, what = FIXTURES[fixture]
    return {"fixture": fixture, "source": source, "part": how, "what": what,
            "source_sha256": sha256(source_bytes), "fixture_sha256": sha256(fixture_bytes)}  # fmt: skip


def check(shared: Path, root: Path = ROOT) -> int:
    manifest = {e["fixture"]: e for e in json.loads((root / MANIFEST.relative_to(ROOT)).read_text(encoding="utf-8"))["fixtures"]}
    status = 0
    for fixture in FIXTURES:
        try:
            source_bytes, wanted = from_source(shared, fixture)
        except Missing as exc:
            print(f"missing: {fixture}: {exc}")
            status = max(status, 2)
            continue
        have = (root / fixture).read_bytes() if (root / fixture).is_file() else b""
        if have != wanted:
            print(f"differs: {fixture} from {shared / FIXTURES[fixture][0]} ({FIXTURES[fixture][2]}): run tools/sync_fixtures.py")
            status = max(status, 1)
        elif manifest.get(fixture, {}).get("source_sha256") != sha256(source_bytes):
            print(f"note: {FIXTURES[fixture][0]} changed since {fixture} was copied, not the part it holds: "
                  "tools/sync_fixtures.py records the new digest")  # fmt: skip
    if status == 0:
        print(f"fixtures: {len(FIXTURES)} of {len(FIXTURES)} equal to {shared}")
    return status


def write(shared: Path, root: Path = ROOT) -> int:
    entries = []
    for fixture in FIXTURES:
        try:
            source_bytes, text = from_source(shared, fixture)
        except Missing as exc:
            print(f"missing: {fixture}: {exc}")
            return 2
        target = root / fixture
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_bytes() != text:
            target.write_bytes(text)
            print(f"wrote {fixture}")
        entries.append(manifest_entry(fixture, source_bytes, text))
    (root / MANIFEST.relative_to(ROOT)).write_text(json.dumps({"fixtures": entries}, indent=2) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a copy differs")
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared", help="the workplace folder (default: ../shared)")
    args = parser.parse_args(argv)
    if not args.shared.is_dir():
        print(f"{args.shared} is absent: nothing to compare the fixtures with")
        return 2 if not args.check else 0
    return check(args.shared) if args.check else write(args.shared)


if __name__ == "__main__":
    sys.exit(main())
