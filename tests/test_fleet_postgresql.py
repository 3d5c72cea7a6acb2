"""fleet upgrade and fleet status on real PostgreSQL: many databases on the local server, at mixed
revisions, in stages and in parallel worker processes; every database records each stamp and DDL
command its migrations write (tests/support/fleets.py), so a revision run twice would show."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from .support.fleets import SECRET, example_project, journal_rows, pg_databases, pg_url, recorded, revisions, run_fleet, stamps

pytestmark = [pytest.mark.postgresql, pytest.mark.slow]
PASSWORD = {"FLEET_PG_PASSWORD": SECRET}


@pytest.fixture
def example(tmp_path):
    return example_project(tmp_path)


def write_fleet(root, names: list[str], stages: str = "", password: bool = True, extra: str = "") -> None:
    """A fleet of the databases named (their URLs from url_template, the password from the environment)."""
    prefix = names[0].rsplit("_", 1)[0]
    secret = ":${FLEET_PG_PASSWORD}" if password else ""
    template = pg_url(f"{prefix}_{{name}}").replace("postgres@", f"postgres{secret}@", 1)
    listed = ", ".join(n.rsplit("_", 1)[1] for n in names)
    (root / "fleet.yaml").write_text(f"url_template: {template}\nnames: [{listed}]\n{extra}{stages}", encoding="utf-8")


def no_secret(*texts: str, journal=None) -> None:
    for text in texts:
        assert SECRET not in text
    if journal is not None and journal.exists():
        for suffix in ("", "-wal"):
            path = journal.with_name(journal.name + suffix)
            if path.exists():
                assert SECRET.encode() not in path.read_bytes()


def test_fifty_databases_at_mixed_revisions_in_two_stages(example):
    revs = revisions(example)
    with pg_databases(50, record=True) as names:
        stages = "stages:\n  - name: canary\n    targets: [t000, t001]\n  - name: rest\n    parallel: 4\n    on_error: continue\n"
        write_fleet(example, names, stages)
        short = [n.rsplit("_", 1)[1] for n in names]
        # mixed revisions: 10 at base, 10 at each of the first three revisions, 10 at the head already
        starts = revs[:3] + revs[-1:]
        for index, revision in enumerate(starts):
            group = short[10 * (index + 1) : 10 * (index + 2)]
            if group:
                only = [word for n in group for word in ("--only", n)]
                setup = run_fleet(example, "upgrade", "--to", revision, *only, "--parallel", "4", **PASSWORD)
                assert setup.returncode == 0, setup.stdout + setup.stderr
        before = Counter(tuple(stamps(pg_url(n))) for n in names)
        assert before == {(): 10, **{(r,): 10 for r in starts}}

        dry = run_fleet(example, "upgrade", "--dry-run", "--format", "json", **PASSWORD)
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        assert Counter(t["outcome"] for t in planned["targets"]) == {"would_upgrade": 40, "at_revision": 10}
        assert Counter(tuple(stamps(pg_url(n))) for n in names) == before  # a dry run changes nothing

        result = run_fleet(example, "upgrade", "--format", "json", **PASSWORD)
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["status"] == "complete" and report["revision"] == revs[-1]
        assert [(s["name"], s["status"], s["targets"]) for s in report["stages"]] == [("canary", "complete", 2), ("rest", "complete", 48)]
        assert Counter(t["outcome"] for t in report["targets"]) == {"upgraded": 40, "at_revision": 10}
        for name in names:
            assert stamps(pg_url(name)) == [revs[-1]]
            stamped, ddl = recorded(name)
            assert sorted(stamped) == sorted(revs), name  # each revision stamped once: run once
            created = [identity for tag, identity in ddl if tag == "CREATE TABLE"]
            assert len(created) == len(set(created)), name
        journal = example / "fleet.journal.sqlite"
        last = [row for row in journal_rows(journal) if row["run"] == max(r["run"] for r in journal_rows(journal))]
        assert len(last) == 50 and {r["outcome"] for r in last} == {"upgraded", "at_revision"}
        assert all(r["started"] and r["ended"] and r["to_revision"] == revs[-1] for r in last)

        status = run_fleet(example, "status", "--check", "--format", "json", "--parallel", "4", **PASSWORD)
        assert status.returncode == 0, status.stdout + status.stderr
        rows = json.loads(status.stdout)
        assert rows["status"] == "ok" and rows["counts"] == {"at_head": 50} and rows["revisions"] == {revs[-1]: 50}
        assert all(t["drift"]["in_sync"] for t in rows["targets"])
        markdown = run_fleet(example, "status", "--format", "markdown", **PASSWORD)
        assert markdown.returncode == 0 and "```mermaid" in markdown.stdout and f'"{revs[-1]} (head)" : 50' in markdown.stdout
        no_secret(dry.stdout, dry.stderr, result.stdout, result.stderr, status.stdout, markdown.stdout, journal=journal)


def test_status_names_the_behind_the_drifted_and_the_unreachable(example):
    revs = revisions(example)
    with pg_databases(3) as names:
        write_fleet(
            example,
            names,
            extra="targets:\n  - name: gone\n    url: postgresql://postgres:${FLEET_PG_PASSWORD}@127.0.0.1:1/nowhere\n",
        )
        short = [n.rsplit("_", 1)[1] for n in names]
        assert run_fleet(example, "upgrade", "--only", short[0], "--only", short[1], **PASSWORD).returncode == 0
        assert run_fleet(example, "upgrade", "--only", short[2], "--to", revs[1], **PASSWORD).returncode == 0
        import psycopg

        with psycopg.connect(pg_url(names[1]), autocommit=True) as connection:
            connection.execute('DROP TABLE "public"."error"')

        result = run_fleet(example, "status", "--check", **PASSWORD)
        assert result.returncode == 1, result.stdout + result.stderr
        lines = result.stdout.splitlines()
        assert f"{short[0]}: at {revs[-1]} (head); in sync" in lines
        assert f"{short[1]}: at {revs[-1]} (head); 1 missing table" in lines
        assert f"{short[2]}: at {revs[1]}, {len(revs) - 2} behind; in sync" in lines, "\n".join(lines)
        gone = next(line for line in lines if line.startswith("gone: "))
        assert gone.startswith("gone: unreachable: cannot reach the database")
        assert lines[-1].endswith("not every target at the head")
        as_json = json.loads(run_fleet(example, "status", "--format", "json", **PASSWORD).stdout)
        states = {t["name"]: t["state"] for t in as_json["targets"]}
        assert states == {short[0]: "at_head", short[1]: "at_head", short[2]: "behind", "gone": "unreachable"}
        assert {t["name"]: t["url"] for t in as_json["targets"]}["gone"] == "postgresql://postgres:***@127.0.0.1:1/nowhere"
        no_secret(result.stdout, result.stderr, json.dumps(as_json))


def test_an_unreachable_target_fails_alone_and_the_rerun_command_is_printed(example):
    revs = revisions(example)
    with pg_databases(4) as names:
        write_fleet(
            example,
            names,
            "stages:\n  - name: all\n    parallel: 2\n    on_error: continue\n",
            extra="targets:\n  - name: gone\n    url: postgresql://postgres:${FLEET_PG_PASSWORD}@127.0.0.1:1/nowhere\n",
        )
        result = run_fleet(example, "upgrade", **PASSWORD)
        assert result.returncode == 1, result.stdout + result.stderr
        assert all(stamps(pg_url(n)) == [revs[-1]] for n in names)
        out = result.stdout.splitlines()
        assert "stage all: complete, 5 target(s): 4 upgraded, 1 failed" in out[0]
        failed = next(line for line in out if line.startswith("  failed gone"))
        assert "cannot reach the database" in failed
        assert out[-1] == "resume: sqltransport-schema fleet upgrade"
        rows = [r for r in journal_rows(example / "fleet.journal.sqlite") if r["target"] == "gone"]
        assert rows[-1]["outcome"] == "failed" and "cannot reach the database" in rows[-1]["error"]
        no_secret(result.stdout, result.stderr, journal=example / "fleet.journal.sqlite")


def test_fleet_script_writes_each_targets_script_naming_it(example, tmp_path):
    revs = revisions(example)
    with pg_databases(3) as names:
        write_fleet(example, names)
        short = [n.rsplit("_", 1)[1] for n in names]
        assert run_fleet(example, "upgrade", "--only", short[2], **PASSWORD).returncode == 0
        assert run_fleet(example, "upgrade", "--only", short[1], "--to", revs[1], **PASSWORD).returncode == 0
        out = tmp_path / "scripts"
        result = run_fleet(example, "script", "--out-dir", str(out), **PASSWORD)
        assert result.returncode == 0, result.stdout + result.stderr
        assert sorted(p.name for p in out.iterdir()) == [f"{short[0]}.sql", f"{short[1]}.sql"]
        assert f"at revision {short[2]}: no script" in result.stderr  # status lines on stderr: stdout holds products alone
        first = (out / f"{short[0]}.sql").read_text()
        assert first.splitlines()[0] == (
            f"-- target: {short[0]} (postgresql://postgres:***@127.0.0.1:5432/{names[0]}), from <base> to {revs[-1]}"
        )
        assert f"-- Running upgrade  -> {revs[0]}" in first
        second = (out / f"{short[1]}.sql").read_text()
        assert second.splitlines()[0].endswith(f"from {revs[1]} to {revs[-1]}")
        assert f"-- Running upgrade {revs[0]} -> {revs[1]}" not in second  # what it holds already
        assert f"-- Running upgrade {revs[1]} -> {revs[2]}" in second
        no_secret(result.stdout, result.stderr, first, second)


def test_create_missing_makes_each_database_before_building_it(example, tmp_path):
    """fleet upgrade --create-missing on targets whose databases are not there yet: two PostgreSQL
    databases made (CREATE DATABASE from the server's postgres database) and a SQLite file in a
    folder that did not exist, each then built to the head; without the flag the run fails there."""
    import uuid

    import psycopg

    names = [f"sqlts_created_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    sqlite_file = tmp_path / "new" / "folder" / "t.db"
    listed = "".join(f"  - name: {name}\n    url: {pg_url(name)}\n" for name in names)
    (example / "fleet.yaml").write_text(f"targets:\n{listed}  - name: file\n    url: sqlite:///{sqlite_file}\n")
    try:
        refused = run_fleet(example, "upgrade")
        assert refused.returncode == 1 and "does not exist" in refused.stdout, refused.stdout + refused.stderr
        made = run_fleet(example, "upgrade", "--create-missing")
        assert made.returncode == 0, made.stdout + made.stderr
        head = revisions(example)[-1]
        assert all(stamps(pg_url(name)) == [head] for name in names)
        assert stamps(f"sqlite:///{sqlite_file}") == [head]
        again = run_fleet(example, "upgrade", "--create-missing")  # there now: nothing made, nothing run
        assert again.returncode == 0 and f"every target reached {head} (3 target(s))" in again.stdout, again.stdout
    finally:
        with psycopg.connect(pg_url("postgres"), autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_locked_version_table_is_a_timed_out_row_not_a_stuck_run(example):
    """One target's alembic_version held by another session's exclusive lock: fleet status (and
    upgrade's first read) ends within twice --read-timeout, that target reported with the time it
    waited, the others read as ever."""
    import time

    import psycopg

    with pg_databases(3) as names:
        write_fleet(example, names)
        assert run_fleet(example, "upgrade", **PASSWORD).returncode == 0
        short = [n.rsplit("_", 1)[1] for n in names]
        started = time.monotonic()
        assert run_fleet(example, "status", "--read-timeout", "1s", **PASSWORD).returncode == 0
        unlocked = time.monotonic() - started  # the command's own cost on this machine now (a loaded one's too)
        holder = psycopg.connect(pg_url(names[1]))
        holder.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")  # an ALTER of it in flight, as it were
        try:
            started = time.monotonic()
            status = run_fleet(example, "status", "--read-timeout", "1s", **PASSWORD)
            took = time.monotonic() - started
            upgrade = run_fleet(example, "upgrade", "--read-timeout", "1s", **PASSWORD)
        finally:
            holder.close()
        assert took < unlocked + 2 * 1, (took, unlocked)  # within twice the bound of the same command unlocked
        assert status.returncode == 1, status.stdout + status.stderr
        lines = {line.split(":", 1)[0]: line for line in status.stdout.splitlines()}
        assert lines[short[1]].startswith(f"{short[1]}: timed out: no answer within 1."), lines[short[1]]
        assert "(read timeout 1 s;" in lines[short[1]], lines[short[1]]
        assert all("(head)" in lines[name] for name in (short[0], short[2]))
        assert upgrade.returncode == 1 and f"failed {short[1]} (all, at unknown): no answer within 1." in upgrade.stdout, upgrade.stdout
