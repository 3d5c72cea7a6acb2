"""Stages as a graph (depends_on: stages with no dependency between them at the same time), targets
with labels and stages that select by them, and the check between stages (`check: true`,
--check-between-stages: `fleet status --check` of the stage just done clean, else the run stops),
on real PostgreSQL databases (docs/fleets.md)."""

from __future__ import annotations

import json
import shutil

import pytest

from sqltransport_schema import cli

from .support.fleets import example_project, journal_rows, pg_databases, pg_url, run_fleet
from .support.projects import REPO


@pytest.fixture
def example(tmp_path):
    return example_project(tmp_path)


def listed(names: list[str], labels: dict[int, str]) -> str:
    """A fleet file's targets: t000, t001, ... by their URLs, each with its labels."""
    lines = ["targets:"]
    for index, name in enumerate(names):
        lines.append(f"  - name: {name.rsplit('_', 1)[1]}\n    url: {pg_url(name)}")
        if index in labels:
            lines.append(f"    labels: [{labels[index]}]")
    return "\n".join(lines) + "\n"


GRAPH = """\
stages:
  - name: canary
    targets: [t000]
  - name: eu
    select: [region-eu]
    depends_on: [canary]
  - name: us
    select: [region-us]
    depends_on: [canary]
  - name: rest
    depends_on: [eu, us]
"""


@pytest.mark.postgresql
def test_two_stages_with_no_dependency_between_them_run_at_the_same_time(example):
    with pg_databases(4) as names:
        (example / "fleet.yaml").write_text(listed(names, {1: "region-eu", 2: "region-us"}) + GRAPH, encoding="utf-8")
        result = run_fleet(example, "upgrade", "--format", "json")
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        stages = {t["name"]: t["stage"] for t in report["targets"]}
        assert stages == {"t000": "canary", "t001": "eu", "t002": "us", "t003": "rest"}  # by label; rest: the others
        assert {t["outcome"] for t in report["targets"]} == {"upgraded"}
        rows = {row["target"]: row for row in journal_rows(example / "fleet.journal.sqlite")}
        eu, us, canary, rest = rows["t001"], rows["t002"], rows["t000"], rows["t003"]
        assert eu["started"] < us["ended"] and us["started"] < eu["ended"], (eu, us)  # eu and us at once
        assert canary["ended"] <= min(eu["started"], us["started"])  # both after the canary
        assert rest["started"] >= max(eu["ended"], us["ended"])  # rest after both


@pytest.mark.postgresql
def test_a_stage_that_is_not_clean_stops_the_run_at_its_check(example):
    import psycopg

    with pg_databases(3) as names:
        stages = "stages:\n  - name: canary\n    targets: [t000]\n    check: true\n  - name: rest\n"
        (example / "fleet.yaml").write_text(listed(names, {}) + stages, encoding="utf-8")
        assert run_fleet(example, "upgrade", "--stage", "canary").returncode == 0
        with psycopg.connect(pg_url(names[0]), autocommit=True) as connection:
            connection.execute('DROP TABLE "public"."error"')  # the canary drifted

        stopped = run_fleet(example, "upgrade")
        assert stopped.returncode == 1, stopped.stdout + stopped.stderr
        assert "stage canary: checking its 1 target(s) before the next stage" in stopped.stderr
        lines = stopped.stdout.splitlines()
        assert "  stopped: the check after stage canary found 1 target(s) not clean: t000: at " in "\n".join(lines)
        assert any("(head); 1 missing table" in line for line in lines), lines
        assert "stage rest: not started, 2 target(s): 2 not attempted" in lines
        assert lines[-1] == "resume: sqltransport-schema fleet upgrade"
        assert run_fleet(example, "status", "--only", "t001").stdout.startswith("t001: at <base>")  # nothing after the canary

        # --check-between-stages checks every stage as check: true does one
        (example / "fleet.yaml").write_text(listed(names, {}) + stages.replace("    check: true\n", ""), encoding="utf-8")
        flag = run_fleet(example, "upgrade", "--check-between-stages")
        assert flag.returncode == 1 and "the check after stage canary found 1 target(s) not clean" in flag.stdout, flag.stdout
        assert flag.stdout.splitlines()[-1] == "resume: sqltransport-schema fleet upgrade --check-between-stages"
        went_on = run_fleet(example, "upgrade")  # no check: the run goes on past the drifted canary
        assert went_on.returncode == 0, went_on.stdout + went_on.stderr


def test_stage_graph_and_label_mistakes_are_located(tmp_path, capsys):
    (tmp_path / "alembic.ini").write_text((REPO / "alembic.ini").read_text())
    shutil.copytree(REPO / "migrations", tmp_path / "migrations", ignore=shutil.ignore_patterns("__pycache__"))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "targets:\n  - name: a\n    url: sqlite:///a.db\n    labels: [eu]\n"
        "stages:\n  - name: one\n    select: [us]\n  - name: two\n    depends_on: [three]\n  - name: three\n",
        encoding="utf-8",
    )
    assert cli.main(["fleet", "status", "-c", str(tmp_path / "alembic.ini"), "--fleet", str(fleet)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert f"error: {fleet}:7:14: select: no target has the label 'us'; add it to a target's labels or remove it" in err
    assert f"error: {fleet}:9:18: depends_on: 'three' is not a stage before 'two' (the stages before it: one)" in err
