"""fleet.yaml: targets from a list, a URL template and a control database's query; ${VAR} from
the environment; stages; every mistake one located `file:line:col: error:` line (exit 2, no
traceback), as topology.yaml's are; fleet.schema.json generated from the same declaration."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import jsonschema
import pytest
import yaml

from sqltransport_schema.fleet import file
from sqltransport_schema.fleet.file import FleetFileError, Stage

from .support.fleets import fleet_env
from .support.projects import REPO


def load(tmp_path, text, **environ):
    path = tmp_path / "fleet.yaml"
    path.write_text(text, encoding="utf-8")
    return file.load(path, environ)


def problem(tmp_path, text, **environ) -> str:
    with pytest.raises(FleetFileError) as raised:
        load(tmp_path, text, **environ)
    assert len(raised.value.problems) == 1, raised.value.problems
    return str(raised.value.problems[0])


def test_targets_from_a_list_a_template_and_the_environment(tmp_path):
    fleet = load(
        tmp_path,
        "targets:\n  - name: prod-eu\n    url: postgresql://app:${PG_PASSWORD}@db1/app\n    role: shared\n"
        "url_template: sqlite:///tenants/{name}.db\nnames: [acme, globex]\n",
        PG_PASSWORD="pw",
    )
    assert [(t.name, t.url, t.role) for t in fleet.targets] == [
        ("prod-eu", "postgresql://app:pw@db1/app", "shared"),
        ("acme", "sqlite:///tenants/acme.db", None),
        ("globex", "sqlite:///tenants/globex.db", None),
    ]
    assert fleet.targets[0].shown_url == "postgresql://app:***@db1/app"
    assert "pw" not in repr(fleet.targets[0])
    assert [s.name for s in fleet.stages] == ["all"]


def test_stages_take_names_and_globs_and_the_last_takes_the_rest(tmp_path):
    fleet = load(
        tmp_path,
        "url_template: sqlite:///{name}.db\nnames: [t01, t02, t03, big1, big2, t04]\n"
        "stages:\n  - name: canary\n    targets: [t01]\n  - name: big\n    targets: ['big*', t01]\n    parallel: 2\n"
        "  - name: rest\n    targets: [t02]\n    parallel: 4\n    on_error: continue\n    max_failures: 50%\n",
    )
    staged = {stage.name: [t.name for t in targets] for stage, targets in fleet.staged()}
    assert staged == {"canary": ["t01"], "big": ["big1", "big2"], "rest": ["t02", "t03", "t04"]}
    assert {s.name: [t.name for t in ts] for s, ts in fleet.staged(only=["t0*"], stage="rest")} == {"rest": ["t02", "t03", "t04"]}
    rest = fleet.stages[2]
    assert (rest.parallel, rest.on_error, rest.tolerated(3)) == (4, "continue", 1)


def test_what_a_stage_tolerates():
    assert Stage("s").tolerated(10) == 0  # on_error stop: the first failure stops it
    assert Stage("s", on_error="continue").tolerated(10) is None  # every target attempted
    assert Stage("s", on_error="continue", max_failures=3).tolerated(10) == 3
    assert Stage("s", max_failures="10%").tolerated(45) == 4


def test_targets_from_a_query_of_a_control_database(tmp_path):
    control = tmp_path / "control.db"
    with sqlite3.connect(control) as db:
        db.execute("CREATE TABLE tenants (name TEXT, url TEXT, active INTEGER, role TEXT)")
        db.executemany(
            "INSERT INTO tenants VALUES (?, ?, ?, ?)",
            [("acme", "postgresql://app:${PW}@db1/acme", 1, "tenant"), ("gone", "sqlite:///gone.db", 0, None), ("hub", None, 1, "shared")],
        )
    fleet = load(
        tmp_path,
        f"url_template: sqlite:///tenants/{{name}}.db\nquery:\n  url: sqlite:///{control}\n"
        "  sql: SELECT name, url, role FROM tenants WHERE active = 1 ORDER BY name\n",
        PW="pw",
    )
    assert [(t.name, t.url, t.role) for t in fleet.targets] == [
        ("acme", "postgresql://app:pw@db1/acme", "tenant"),
        ("hub", "sqlite:///tenants/hub.db", "shared"),  # no URL in its row: the template's
    ]


def test_a_querys_fourth_column_labels_its_targets_for_a_stages_select(tmp_path):
    control = tmp_path / "control.db"
    with sqlite3.connect(control) as db:
        db.execute("CREATE TABLE tenants (name TEXT, region TEXT)")
        db.executemany("INSERT INTO tenants VALUES (?, ?)", [("acme", "region-eu, tier-gold"), ("globex", "region-us"), ("initech", None)])
    fleet = load(
        tmp_path,
        f"url_template: sqlite:///tenants/{{name}}.db\nquery:\n  url: sqlite:///{control}\n"
        "  sql: SELECT name, NULL, NULL, region FROM tenants ORDER BY name\n"
        "stages:\n  - name: eu\n    select: [region-eu]\n  - name: rest\n",
    )
    labels = [(t.name, t.labels) for t in fleet.targets]
    assert labels == [("acme", ("region-eu", "tier-gold")), ("globex", ("region-us",)), ("initech", ())]
    staged = [(stage.name, [t.name for t in targets]) for stage, targets in fleet.staged()]
    assert staged == [("eu", ["acme"]), ("rest", ["globex", "initech"])]


@pytest.mark.parametrize(
    "text, where, says",
    [
        ("targets:\n  - name: a\n    url: sqlite:///a.db\n  - name: a\n    url: sqlite:///b.db\n", "4:11", "named twice (first at line 2)"),
        ("targets:\n  - name: a\n    url: postgresql://app:${NOPE}@db/a\n", "3:27", "environment variable NOPE is not set"),
        ("targets:\n  - name: a\n    uri: sqlite:///a.db\n", "3:5", "unknown key 'uri' in target; did you mean 'url'?"),
        ("url_template: sqlite:///x.db\nnames: [a]\n", "1:15", "url_template needs {name}"),
        ("names: [a]\n", "1:8", "names need a url_template"),
        (
            "url_template: sqlite:///{name}.db\nnames: [a]\nstages:\n  - name: s\n    parallel: 0\n",
            "5:15",
            "parallel must be a whole number of at least 1, not 0",
        ),
        (
            "url_template: sqlite:///{name}.db\nnames: [a]\nstages:\n  - name: s\n    max_failures: lots\n",
            "5:19",
            "a count (0 or more) or a percentage such as 10%",
        ),
        (
            "url_template: sqlite:///{name}.db\nnames: [a]\nstages:\n  - name: s\n    targets: [b*]\n  - name: t\n",
            "5:15",
            "'b*' matches no target",
        ),
        (
            "url_template: sqlite:///{name}.db\nnames: [a]\nstages:\n  - name: s\n  - name: t\n",
            "4:5",
            "stage 's' needs targets or select: only the last stage takes the rest",
        ),
        (
            "url_template: sqlite:///{name}.db\nnames: [a]\nstages:\n  - name: s\n    on_error: ignore\n",
            "5:15",
            "on_error is 'ignore'; expected one of stop, continue",
        ),
        ("targets: [\n", "2:1", "not valid YAML"),
        ("stages: []\n", "1:1", "the fleet names no target"),
        ("query:\n  url: sqlite:///nowhere/at/all.db\n  sql: SELECT name FROM tenants\n", "2:8", "no folder nowhere/at for the SQLite"),
    ],
)
def test_a_mistake_is_one_located_line(tmp_path, text, where, says):
    line = problem(tmp_path, text)
    assert line.startswith(f"{tmp_path / 'fleet.yaml'}:{where}: "), line
    assert says in line, line


def test_the_command_line_prints_the_located_line_and_exits_2(tmp_path):
    (tmp_path / "alembic.ini").write_text((REPO / "alembic.ini").read_text())
    (tmp_path / "fleet.yaml").write_text("targets:\n  - name: a\n    url: postgresql://app:${FLEET_TEST_UNSET}@db/a\n")
    for command in (["upgrade"], ["status"], ["upgrade", "--dry-run"]):
        result = subprocess.run(
            [sys.executable, "-m", "sqltransport_schema.cli", "fleet", *command],
            cwd=tmp_path,
            env=fleet_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            "error: fleet.yaml:3:27: the environment variable FLEET_TEST_UNSET is not set: export it, or write "
            "the value in place of ${FLEET_TEST_UNSET}"
        ]
        assert result.stdout == ""
        assert not (tmp_path / "fleet.journal.sqlite").exists()


def test_the_committed_json_schema_is_generated_and_checks_a_fleet_file():
    committed = json.loads((REPO / "fleet.schema.json").read_text(encoding="utf-8"))
    assert committed == file.json_schema(), "fleet.schema.json is stale: run `sqltransport-schema fleet json-schema -o fleet.schema.json`"
    good = yaml.safe_load(
        "targets:\n  - {name: a, url: 'sqlite:///a.db', role: tenant}\nurl_template: 'sqlite:///{name}.db'\nnames: [b]\n"
        "stages:\n  - {name: canary, targets: [a], parallel: 1, on_error: stop, max_failures: 0}\n  - {name: rest, max_failures: 10%}\n"
    )
    jsonschema.validate(good, committed)
    bad_ones = [{"stages": [{"name": "s", "parallel": 0}]}, {"targets": [{"name": "a"}]}, {"nmes": ["a"]}]
    bad_ones.append({"stages": [{"name": "s", "max_failures": "x"}]})
    for bad in bad_ones:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, committed)


def test_an_unset_variable_of_a_url_template_is_one_error_at_its_own_column(tmp_path):
    """Five names, or five rows of a query, filled into a url_template that uses an unset variable: one
    error, at the variable's line and column, not one per target at the names' or the query's line."""
    control = tmp_path / "control.db"
    with sqlite3.connect(control) as db:
        db.execute("CREATE TABLE tenants (name TEXT)")
        db.executemany("INSERT INTO tenants VALUES (?)", [(f"t{i}",) for i in range(5)])
    template = "url_template: postgresql://app:${FLEET_PW}@db/{name}?x=${FLEET_OPT}\n"
    for rest in ("names: [a, b, c, d, e]\n", f"query:\n  url: sqlite:///{control}\n  sql: SELECT name FROM tenants\n"):
        with pytest.raises(FleetFileError) as raised:
            load(tmp_path, template + rest, FLEET_OPT="1")
        problems = [str(problem) for problem in raised.value.problems]
        says = "the environment variable FLEET_PW is not set: export it, or write the value in place of ${FLEET_PW}"
        assert problems == [f"{tmp_path / 'fleet.yaml'}:1:32: {says}"], problems


def test_read_timeout_in_the_fleet_file(tmp_path):
    assert load(tmp_path, "url_template: sqlite:///{name}.db\nnames: [a]\nread_timeout: 2500ms\n").read_timeout == 2.5
    assert load(tmp_path, "url_template: sqlite:///{name}.db\nnames: [a]\n").read_timeout is None
    said = problem(tmp_path, "url_template: sqlite:///{name}.db\nnames: [a]\nread_timeout: soon\n")
    assert said.endswith("fleet.yaml:3:15: read_timeout is a duration above 0 with its unit, e.g. 500ms, 10s or 1m"), said
