"""fleet upgrade on SQLite tenant files: on_error stop and continue around a refused drop (a queue
that still holds messages), the refusal's own fleet command that lets it through for that one
target, and targets read from a control database's query."""

from __future__ import annotations

import json
import shlex
import sqlite3

import pytest

from .support.fleets import journal_rows, run_fleet, stamps
from .support.messages import insert_message
from .support.topology import TENANT_PLACEMENT, TWO_INSTANCES

TENANTS = ["t01", "t02", "t03", "t04", "t05", "t06"]


@pytest.fixture
def retiring(project):
    """Six tenants at the initial revision; t03's Sales.host-b holds a message; the next revision drops that queue."""
    project.write_topology(TWO_INSTANCES)
    assert project.compile("initial") == 0
    (project.root / "tenants").mkdir()
    (project.root / "fleet.yaml").write_text(f"url_template: sqlite:///tenants/{{name}}.db\nnames: [{', '.join(TENANTS)}]\n")
    first = run_fleet(project.root, "upgrade")
    assert first.returncode == 0, first.stdout + first.stderr
    insert_message(url("t03", project), "Sales.host-b")
    project.write_topology(TWO_INSTANCES.replace("[host-a, host-b]", "[host-a]"))
    assert project.compile("retire host-b") == 0
    return project


def url(name, project) -> str:
    return f"sqlite:///{project.root / 'tenants' / f'{name}.db'}"


def stages(on_error: str) -> str:
    return f"stages:\n  - name: first\n    targets: [t01, t02, t03, t04]\n    on_error: {on_error}\n  - name: second\n"


def test_on_error_stop_stops_the_stage_at_a_refused_drop(retiring):
    fleet = retiring.root / "fleet.yaml"
    fleet.write_text(fleet.read_text() + stages("stop"))
    initial, head = initial_of(retiring), retiring.head()
    result = run_fleet(retiring.root, "upgrade")
    assert result.returncode == 1, result.stdout + result.stderr
    at = {name: stamps(url(name, retiring)) for name in TENANTS}
    assert at == {"t01": [head], "t02": [head], **dict.fromkeys(["t03", "t04", "t05", "t06"], [initial])}
    out = result.stdout.splitlines()
    assert out[0] == f"stage first: stopped, 4 target(s): 2 upgraded, 1 failed, 1 not attempted ({out[0].rsplit('(', 1)[1]}"
    assert out[1] == "  stopped: 1 target(s) failed (the stage tolerates 0); first: t03"
    failed = out[2]
    assert failed.startswith(f"  failed t03 (first, at {initial_of(retiring)}): refusing to drop queue")
    assert "it still holds messages" in failed
    assert failed.endswith(": sqltransport-schema fleet upgrade --only t03 -x discard=Sales.host-b")
    assert out[3] == "  not attempted: t04"
    assert out[4] == "stage second: not started, 2 target(s): 2 not attempted"
    assert out[-1] == "resume: sqltransport-schema fleet upgrade"
    rows = journal_rows(retiring.root / "fleet.journal.sqlite")
    last = [r for r in rows if r["run"] == 2]
    assert {r["target"]: r["outcome"] for r in last} == {"t01": "upgraded", "t02": "upgraded", "t03": "failed"}
    assert "refusing to drop queue" in next(r["error"] for r in last if r["target"] == "t03")

    as_json = json.loads(run_fleet(retiring.root, "upgrade", "--format", "json").stdout)
    assert {t["name"]: t["outcome"] for t in as_json["targets"]}["t04"] == "not_attempted"
    assert as_json["status"] == "incomplete" and as_json["resume"] == "sqltransport-schema fleet upgrade"


def initial_of(project) -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    return [r.revision for r in ScriptDirectory.from_config(Config(str(project.ini))).walk_revisions()][-1]


def test_on_error_continue_goes_on_and_the_refusal_names_the_one_target_consent(retiring):
    fleet = retiring.root / "fleet.yaml"
    fleet.write_text(fleet.read_text() + stages("continue"))
    head = retiring.head()
    result = run_fleet(retiring.root, "upgrade", "--parallel", "2")
    assert result.returncode == 1, result.stdout + result.stderr
    assert {name: stamps(url(name, retiring)) for name in TENANTS if name != "t03"} == dict.fromkeys(
        ["t01", "t02", "t04", "t05", "t06"], [head]
    )
    assert stamps(url("t03", retiring)) == [initial_of(retiring)]
    assert result.stdout.splitlines()[0].startswith("stage first: complete, 4 target(s): 3 upgraded, 1 failed")
    assert result.stdout.splitlines()[2].startswith("stage second: complete, 2 target(s): 2 upgraded")
    failed = next(line for line in result.stdout.splitlines() if "failed t03" in line)
    rerun = shlex.split(failed.rsplit(": ", 1)[1])
    assert rerun[:3] == ["sqltransport-schema", "fleet", "upgrade"]

    consented = run_fleet(retiring.root, *rerun[2:])
    assert consented.returncode == 0, consented.stdout + consented.stderr
    assert stamps(url("t03", retiring)) == [head]
    again = run_fleet(retiring.root, "upgrade")
    assert again.returncode == 0 and f"every target reached {head} (6 target(s))" in again.stdout


def test_targets_from_a_query_are_upgraded(project, tmp_path):
    project.write_topology(TWO_INSTANCES)
    assert project.compile("initial") == 0
    control = tmp_path / "control.db"
    with sqlite3.connect(control) as db:
        db.execute("CREATE TABLE tenants (name TEXT, active INTEGER)")
        db.executemany("INSERT INTO tenants VALUES (?, ?)", [("acme", 1), ("globex", 1), ("gone", 0)])
    (project.root / "fleet.yaml").write_text(
        f"url_template: sqlite:///{tmp_path}/{{name}}.db\n"
        f"query:\n  url: sqlite:///{control}\n  sql: SELECT name FROM tenants WHERE active = 1\n"
    )
    result = run_fleet(project.root, "upgrade", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(t["name"] for t in json.loads(result.stdout)["targets"]) == ["acme", "globex"]
    assert stamps(f"sqlite:///{tmp_path}/acme.db") == [project.head()]
    assert not (tmp_path / "gone.db").exists()


def test_a_terminal_gets_a_live_progress_line_and_ci_plain_lines(project):
    import os
    import pty
    import subprocess

    from .support.fleets import fleet_command, fleet_env

    project.write_topology(TWO_INSTANCES)
    assert project.compile("initial") == 0
    (project.root / "tenants").mkdir()
    (project.root / "fleet.yaml").write_text("url_template: sqlite:///tenants/{name}.db\nnames: [a1, a2, a3]\n")
    leader, follower = pty.openpty()
    runner = subprocess.Popen(fleet_command("upgrade"), cwd=project.root, env=fleet_env(), stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    runner.wait(timeout=120)
    os.close(leader)
    assert runner.returncode == 0
    assert b"\r\x1b[K[fleet] 3 done, 0 failed, 0 running, 0 left, " in seen  # redrawn in place
    assert b"\n" not in seen.replace(b"\r\n", b"")  # no line of its own on a terminal

    plain = run_fleet(project.root, "upgrade")  # stderr a pipe, as in CI
    assert plain.returncode == 0
    assert plain.stderr.splitlines()[-1].startswith("[fleet] 3 done, 0 failed, 0 running, 0 left, ")
    assert "\r" not in plain.stderr


def test_each_target_runs_its_role_under_tenant_placement(project):
    import sqlite3 as sqlite

    project.write_topology(TENANT_PLACEMENT)
    assert project.compile("initial") == 0
    (project.root / "fleet.yaml").write_text(
        "targets:\n  - name: shared\n    url: sqlite:///shared.db\n"
        + "".join(f"  - name: tenant-{t}\n    url: sqlite:///tenant-{t}.db\n    role: tenant\n" for t in "abc")
        + "stages:\n  - name: shared\n    targets: [shared]\n  - name: tenants\n    parallel: 3\n"
    )
    result = run_fleet(project.root, "upgrade", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert {t["name"]: t["role"] for t in json.loads(result.stdout)["targets"]}["tenant-a"] == "tenant"

    def tables(name):
        with sqlite.connect(project.root / f"{name}.db") as db:
            return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    assert "Sales" in tables("shared") and "Sales_OrderSaga" not in tables("shared")
    for tenant in "abc":
        assert {"Sales_OrderSaga", "Sales_OutboxData"} <= tables(f"tenant-{tenant}") and "Sales" not in tables(f"tenant-{tenant}")
    status = run_fleet(project.root, "status", "--check", "--format", "json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert {t["name"]: t["drift"]["in_sync"] for t in json.loads(status.stdout)["targets"]} == dict.fromkeys(
        ["shared", "tenant-a", "tenant-b", "tenant-c"], True
    )
    refused = run_fleet(project.root, "upgrade", "-x", "role=tenant")
    assert refused.returncode == 2 and refused.stderr.startswith("error: -x role=...: a target's role is the fleet file's")


def test_to_an_older_revision_never_reports_a_target_past_it_as_reaching_it(retiring):
    """`--to <older>` on targets already at the head: each is said to be past it, left there (no
    downgrade), and the last line never says every target reached the older revision."""
    initial, head = initial_of(retiring), retiring.head()
    result = run_fleet(retiring.root, "upgrade", "--only", "t01", "-x", "discard=Sales.host-b")
    assert result.returncode == 0, result.stdout + result.stderr
    result = run_fleet(retiring.root, "upgrade", "--only", "t01", "--to", initial)
    assert result.returncode == 0, result.stdout + result.stderr
    assert stamps(url("t01", retiring)) == [head]  # not downgraded
    out = result.stdout.splitlines()
    assert f"  past t01 (all): at {head}, past the revision asked for; left there, not downgraded" in out
    assert out[-1] == f"every target reached {initial} or is past it (1 target(s), 1 past it, not downgraded)"
    assert f"every target reached {initial} (" not in result.stdout


def test_a_target_that_cannot_be_reached_is_at_an_unknown_revision_not_base(retiring):
    """A target whose database cannot be opened was never read: its failure line says its revision is
    unknown (a database read and not built yet is the one at <base>)."""
    fleet = retiring.root / "fleet.yaml"
    fleet.write_text("targets:\n  - name: lost\n    url: postgresql+psycopg://app@127.0.0.1:1/lost\n")  # nothing listens there
    result = run_fleet(retiring.root, "upgrade")
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("  failed lost")]
    assert failed and failed[0].startswith("  failed lost (all, at unknown): "), failed


def test_fleet_status_lists_a_target_removed_from_the_fleet_file(retiring):
    """A target the journal has upgraded and the fleet file no longer names is listed by fleet status,
    with its last attempt, in text and JSON; the exit code stays the current targets'."""
    initial = initial_of(retiring)
    fleet = retiring.root / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace(", t06", ""))
    result = run_fleet(retiring.root, "status", "--format", "json")
    assert result.returncode == 1, result.stderr  # the five are behind the head: that, not the removed one, sets it
    report = json.loads(result.stdout)
    assert [(r["name"], r["last_outcome"], r["last_revision"]) for r in report["removed"]] == [("t06", "upgraded", initial)]
    assert all(target["name"] != "t06" for target in report["targets"])
    text = run_fleet(retiring.root, "status")
    assert f"t06: removed from the fleet file (last attempt upgraded to {initial}, " in text.stdout, text.stdout


def test_a_failing_target_set_aside_by_exclude_or_skip_lets_the_rest_through(retiring):
    """t03 refuses its drop (a queue with a message): --exclude t03 upgrades the others and says t03 is
    set aside; a skip: list in the fleet file does the same on every run; --exclude of no target is
    a usage error."""
    initial, head = initial_of(retiring), retiring.head()
    result = run_fleet(retiring.root, "upgrade", "--exclude", "t03", "--exclude", "t0[56]")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "set aside (--exclude, skip:): t03, t05, t06" in result.stderr
    at = {name: stamps(url(name, retiring)) for name in TENANTS}
    assert at == {**dict.fromkeys(["t01", "t02", "t04"], [head]), **dict.fromkeys(["t03", "t05", "t06"], [initial])}
    fleet = retiring.root / "fleet.yaml"
    fleet.write_text(fleet.read_text() + "skip: [t03]\n")
    result = run_fleet(retiring.root, "upgrade")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "set aside (--exclude, skip:): t03" in result.stderr
    assert stamps(url("t03", retiring)) == [initial] and stamps(url("t06", retiring)) == [head]
    wrong = run_fleet(retiring.root, "upgrade", "--exclude", "nobody")
    assert wrong.returncode == 2 and wrong.stderr.splitlines() == ["error: --exclude nobody: no target of the fleet matches"], wrong.stderr


def test_a_stage_bakes_then_pauses_for_approval_and_the_same_command_goes_on(project):
    """canary bakes 1 s and pauses: the run stops after it (exit 1, the rest not started, the resume
    command printed); the same command again finds canary done, so it goes on through the rest."""
    import time

    project.write_topology(TWO_INSTANCES)
    assert project.compile("initial") == 0
    (project.root / "tenants").mkdir()
    (project.root / "fleet.yaml").write_text(
        "url_template: sqlite:///tenants/{name}.db\nnames: [t01, t02, t03]\n"
        "stages:\n  - name: canary\n    targets: [t01]\n    bake: 1s\n    pause_after: true\n  - name: rest\n"
    )
    started = time.monotonic()
    first = run_fleet(project.root, "upgrade")
    assert time.monotonic() - started >= 1.0  # the bake
    assert first.returncode == 1, first.stdout + first.stderr
    assert "stage canary: baking 1 s before the next stage" in first.stderr
    out = first.stdout.splitlines()
    assert out[0].startswith("stage canary: paused, 1 target(s): 1 upgraded") and out[1] == (
        "  stopped: paused after stage canary for approval: run the same command again to go on"
    )
    assert "stage rest: not started, 2 target(s): 2 not attempted" in out and out[-1] == "resume: sqltransport-schema fleet upgrade"
    assert stamps(url("t02", project)) == [] and stamps(url("t01", project)) == [project.head()]
    again = run_fleet(project.root, "upgrade")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "baking" not in again.stderr  # canary had nothing left to do: no bake, no pause
    assert all(stamps(url(name, project)) == [project.head()] for name in ("t02", "t03"))
