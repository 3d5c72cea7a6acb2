"""A topology in several files: `include:` in topology.yaml (and in the files it includes), each
file a partial topology that one team owns. A split topology is its one-file form, problems name the
file they are in, and compile records every file's sha256."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from sqltransport_schema import cli
from sqltransport_schema.schema import blueprint
from sqltransport_schema.topology import TopologyError, json_schema, load, loads

from .support import catalog

ROOT = """\
transport_version: "9.1"
default_schema: dbo
postgresql:
  seq_type: bigserial
include:
  - teams/*.yaml
  - ops.yaml
queues:
  - name: error
"""
TEAMS = {
    "teams/billing.yaml": """\
endpoints:
  - name: Billing
    schema: billing
    body_string: true
    sagas:
      - name: InvoiceSaga
        correlation: {name: InvoiceNumber, type: int}
include:
  - billing/*.yaml
""",
    "teams/billing/reports.yaml": """\
endpoints:
  - name: Billing.Reports
    instances: [host-a]
""",
    "teams/sales.yaml": """\
endpoints:
  - name: Sales
    instances: [host-a, host-b]
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
""",
    "ops.yaml": """\
queues:
  - name: audit
discard:
  - name: Retired
""",
}
# The same topology in one file: each file's entries after those of the file that includes it,
# in include order (a pattern's matches sorted).
ONE_FILE = """\
transport_version: "9.1"
default_schema: dbo
postgresql:
  seq_type: bigserial
endpoints:
  - name: Billing
    schema: billing
    body_string: true
    sagas:
      - name: InvoiceSaga
        correlation: {name: InvoiceNumber, type: int}
  - name: Billing.Reports
    instances: [host-a]
  - name: Sales
    instances: [host-a, host-b]
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
queues:
  - name: error
  - name: audit
discard:
  - name: Retired
"""


def write_files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def split(folder: Path, root: str = ROOT, **changes: str) -> Path:
    """The split topology in folder; changes replace (or add) files by name, written teams__sales_yaml for teams/sales.yaml."""
    files = {"topology.yaml": root, **TEAMS, **{name.replace("__", "/").replace("_yaml", ".yaml"): text for name, text in changes.items()}}
    write_files(folder, files)
    return folder / "topology.yaml"


def problems_of(path: Path) -> list[str]:
    with pytest.raises(TopologyError) as caught:
        load(path)
    return [str(p) for p in caught.value.problems]


def body(revision: Path) -> str:
    """A revision without what differs between two compiles: its id, date and recorded sha256s."""
    text = revision.read_text(encoding="utf-8")
    text = re.sub(r"(Revision ID: |revision = |Create Date: ).*", r"\1...", text)
    return re.sub(r"TOPOLOGY_SHA256 = \{.*?\n\}\n", "", text, flags=re.DOTALL)


# --------------------------------------------------------------------------- one topology
def test_a_split_topology_is_its_one_file_form(tmp_path):
    topology = load(split(tmp_path))
    single = loads(ONE_FILE, str(tmp_path / "single.yaml"))
    assert blueprint(topology).to_snapshot() == blueprint(single).to_snapshot()
    assert blueprint(topology).discarded == blueprint(single).discarded
    assert [source.relative for source in topology.files] == [
        "topology.yaml",
        "teams/billing.yaml",
        "teams/billing/reports.yaml",
        "teams/sales.yaml",
        "ops.yaml",
    ]


def test_split_and_one_file_compile_to_the_same_revision_and_tables_on_sqlite(project, tmp_path):
    split(project.root)
    assert project.compile("initial") == 0
    (split_revision,) = project.revisions()
    split_url = f"sqlite:///{tmp_path / 'split.db'}"
    project.upgrade(split_url)

    for name in [*TEAMS, "teams/billing"]:
        path = project.root / name
        (path.unlink if path.is_file() else path.rmdir)()
    (project.root / "teams").rmdir()
    split_text = body(split_revision)
    split_revision.unlink()
    project.write_topology(ONE_FILE)
    assert project.compile("initial") == 0
    (single_revision,) = project.revisions()
    single_url = f"sqlite:///{tmp_path / 'single.db'}"
    project.upgrade(single_url)

    assert split_text == body(single_revision)
    tables = catalog.read(split_url)
    assert tables == catalog.read(single_url)
    assert len(tables) == 14 and any(name == "Billing.Reports.host-a" for _, name in tables)


@pytest.mark.postgresql
def test_a_split_topology_upgrades_postgresql(project, pg_url):
    split(project.root)
    assert project.compile("initial") == 0
    project.upgrade(pg_url)
    tables = set(catalog.read(pg_url))
    assert {
        ("billing", "Billing"),
        ("billing", "Billing.Delayed"),
        ("billing", "Billing_InvoiceSaga"),
        ("dbo", "Billing.Reports.host-a"),
        ("dbo", "Sales.host-b"),
        ("dbo", "Sales_OrderSaga"),
        ("dbo", "audit"),
        ("dbo", "error"),
    } <= tables
    assert len(tables) == len(blueprint(load(project.topology)).tables)
    assert cli.main(["check", "-c", str(project.ini), "--url", pg_url]) == 0


def test_moving_entries_into_included_files_compiles_nothing(project, capsys):
    # audit first: the split form lists it after error, in another order than the head's snapshot
    project.write_topology(ONE_FILE.replace("  - name: error\n  - name: audit\n", "  - name: audit\n  - name: error\n"))
    assert project.compile("initial") == 0
    split(project.root)
    capsys.readouterr()
    assert project.compile("split", "--check") == 0
    assert "nothing to compile" in capsys.readouterr().out
    assert len(project.revisions()) == 1


def test_reordering_the_entries_of_one_file_compiles_nothing(project, capsys):
    project.write_topology('transport_version: "9.1"\nendpoints:\n  - name: A\n  - name: B\n')
    assert project.compile("initial") == 0
    project.write_topology('transport_version: "9.1"\nendpoints:\n  - name: B\n  - name: A\n')
    capsys.readouterr()
    assert project.compile("reordered", "--check") == 0
    assert project.compile("reordered") == 0
    assert "nothing to compile" in capsys.readouterr().out and len(project.revisions()) == 1


# --------------------------------------------------------------------------- problems, located
def test_a_problem_in_an_included_file_names_it_and_nothing_is_written(project, capsys):
    split(project.root, teams__sales_yaml="endpoints:\n  - name: Sales\n    instance: [a]\n")
    assert project.compile("initial") == 2
    err = capsys.readouterr().err
    sales = project.root / "teams" / "sales.yaml"
    assert err.startswith(f"error: {sales}:3:5: unknown key 'instance' in endpoint; did you mean 'instances'?"), err
    assert len(err.splitlines()) == 1
    assert project.revisions() == []


def test_validate_reports_the_problems_of_every_file_at_once_in_file_order(tmp_path, capsys):
    root = split(
        tmp_path,
        ROOT.replace("queues:\n  - name: error\n", "queues:\n  - name: error\n    protected: maybe\n"),
        teams__sales_yaml="endpoints:\n  - name: Sales\n    send_only: yes please\n",
        ops_yaml="queues:\n  - name: a@b\n",
    )
    assert cli.main(["validate", "--topology", str(root)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.removeprefix("error: ").split(": ")[0] for line in lines[:-1]] == [
        f"{root}:10:16",
        f"{tmp_path / 'teams' / 'sales.yaml'}:3:16",
        f"{tmp_path / 'ops.yaml'}:2:11",
    ]
    assert lines[-1] == "3 problem(s)."  # validate writes nothing


def test_validate_reports_in_json_which_file_each_problem_is_in(tmp_path, capsys):
    root = split(tmp_path, teams__sales_yaml="endpoints:\n  - name: Sales\n    send_only: 1\n")
    assert cli.main(["validate", "--topology", str(root), "--format", "json"]) == 2
    (problem,) = json.loads(capsys.readouterr().out)["problems"]
    assert (problem["file"], problem["line"], problem["column"]) == (str(tmp_path / "teams" / "sales.yaml"), 3, 16)


def test_the_same_endpoint_in_two_files_names_both_places(tmp_path):
    root = split(tmp_path, teams__shipping_yaml="endpoints:\n  - name: Other\n  - name: Sales\n")
    (problem,) = problems_of(root)
    sales, shipping = tmp_path / "teams" / "sales.yaml", tmp_path / "teams" / "shipping.yaml"
    assert problem.startswith(f"{shipping}:3:11: duplicate endpoint 'Sales' (first declared at {sales}:2:11)")
    assert "declare an endpoint once, in one of the files," in problem


def test_a_queue_in_an_included_file_colliding_with_the_root_names_both_places(tmp_path):
    root = split(tmp_path, ops_yaml="queues:\n  - name: ERROR\n")
    (problem,) = problems_of(root)
    assert problem.startswith(f"{tmp_path / 'ops.yaml'}:2:11: queue 'ERROR' is the same table as queue 'error' (at {root}:9:11)")


def test_an_include_cycle_is_named(tmp_path):
    root = split(
        tmp_path,
        ops_yaml="include: [extra/more.yaml]\n",
        extra__more_yaml="queues:\n  - name: more\ninclude:\n  - ../ops.yaml\n",
    )
    (problem,) = problems_of(root)
    more = tmp_path / "extra" / "more.yaml"
    assert problem == (
        f"{more}:4:5: include cycle: {tmp_path / 'ops.yaml'} -> {more} -> {tmp_path / 'ops.yaml'}: remove one of these includes"
    )


def test_a_file_including_the_root_is_a_cycle(tmp_path):
    root = split(tmp_path, ops_yaml="include: [topology.yaml]\n")
    (problem,) = problems_of(root)
    assert problem.startswith(f"{tmp_path / 'ops.yaml'}:1:11: include cycle: {root} -> {tmp_path / 'ops.yaml'} -> {root}")


def test_a_file_included_twice_is_named_with_its_first_place(tmp_path):
    root = split(tmp_path, ROOT.replace("  - ops.yaml\n", "  - ops.yaml\n  - teams/sales.yaml\n"))
    (problem,) = problems_of(root)
    assert problem == (f"{root}:8:5: {tmp_path / 'teams' / 'sales.yaml'} is included twice (first at {root}:6:5): include each file once")


def test_a_missing_file_is_named_at_the_including_line(tmp_path):
    root = split(tmp_path, ROOT.replace("  - ops.yaml\n", "  - ops.yaml\n  - team/shipping.yaml\n"))
    (problem,) = problems_of(root)
    assert problem == (
        f"{root}:8:5: included file {tmp_path / 'team' / 'shipping.yaml'} not found: create it, or correct or remove this entry"
    )


def test_a_pattern_matching_no_file_is_an_error(tmp_path):
    # A mistyped pattern matching nothing would compile to the drop of every table of the files it meant.
    root = split(tmp_path, ROOT.replace("teams/*.yaml", "team/*.yaml"))
    problems = problems_of(root)
    assert problems[0] == (
        f"{root}:6:5: include pattern 'team/*.yaml' matches no file ({tmp_path / 'team' / '*.yaml'}): "
        "correct it, or remove it until a file matches"
    )


def test_a_folder_is_not_a_file(tmp_path):
    root = split(tmp_path, ROOT.replace("teams/*.yaml", "teams"))
    assert f"{root}:6:5: {tmp_path / 'teams'} is not a file: include a file, or a pattern such as teams/*.yaml" in problems_of(root)


def test_a_pattern_never_matches_the_file_that_lists_it(tmp_path):
    files = {"topology.yaml": 'transport_version: "9.1"\ninclude: ["*.yaml"]\n', "sales.yaml": "endpoints:\n  - name: Sales\n"}
    write_files(tmp_path, files)
    topology = load(tmp_path / "topology.yaml")
    assert [ep.name for ep in topology.endpoints] == ["Sales"]


@pytest.mark.parametrize(
    "line, key",
    [
        ('transport_version: "9.1"', "transport_version"),
        ("engines: [sqlite]", "engines"),
        ("default_schema: sales", "default_schema"),
        ("subscriptions: false", "subscriptions"),
        ("postgresql: {seq_type: serial}", "postgresql"),
    ],
)
def test_a_setting_of_the_whole_topology_is_refused_in_an_included_file(tmp_path, line, key):
    root = split(tmp_path, teams__sales_yaml=f"endpoints:\n  - name: Sales\n{line}\n")
    (problem,) = problems_of(root)
    assert problem == (
        f"{tmp_path / 'teams' / 'sales.yaml'}:3:1: {key} is a setting of the whole topology and an included file "
        f"cannot set it: move it to the root file {root}; an included file holds endpoints, queues, discard, "
        "drop_protected and include only"
    )


def test_an_unreadable_included_file_is_named(tmp_path):
    root = split(tmp_path, teams__sales_yaml="endpoints:\n  - name: [Sales\n")
    (problem,) = problems_of(root)
    assert problem.startswith(f"{tmp_path / 'teams' / 'sales.yaml'}:3:1: not valid YAML")
    (tmp_path / "teams" / "sales.yaml").write_bytes(b"endpoints:\n  - name: Caf\xe9\n")
    (problem,) = problems_of(root)
    advice = "save the file as UTF-8, or remove or retype the character here"
    assert problem == f"{tmp_path / 'teams' / 'sales.yaml'}:2:14: not UTF-8 text (byte 0xe9): {advice}"


def test_an_empty_included_file_adds_nothing(tmp_path):
    topology = load(split(tmp_path, teams__sales_yaml="# Sales moved to another system\n"))
    assert "Sales" not in [ep.name for ep in topology.endpoints]


def test_include_entries_are_strings(tmp_path):
    root = split(tmp_path, ROOT.replace("  - ops.yaml\n", "  - ops.yaml\n  - 42\n"))
    (problem,) = problems_of(root)
    assert problem.startswith(f"{root}:8:5: include[2] must be")


# --------------------------------------------------------------------------- compile records every file
def test_compile_records_every_file_and_check_names_an_edited_one(project, capsys):
    split(project.root)
    assert project.compile("initial") == 0
    text = project.revisions()[-1].read_text(encoding="utf-8")
    assert "TOPOLOGY_FILE = 'topology.yaml'" in text
    recorded = {f"    {source.relative!r}: {source.sha256!r}," for source in load(project.topology).files}
    assert len(recorded) == 5 and recorded <= set(text.splitlines())
    assert project.compile("nothing", "--check") == 0

    sales = project.root / "teams" / "sales.yaml"
    sales.write_text(TEAMS["teams/sales.yaml"].replace("[host-a, host-b]", "[host-a]"), encoding="utf-8")
    capsys.readouterr()
    assert project.compile("nothing", "--check") == 1
    out = capsys.readouterr().out
    assert 'drop queue "Sales.host-b"' in out and "Files changed since the last compile: teams/sales.yaml" in out
    assert len(project.revisions()) == 1

    assert project.compile("one instance") == 0
    assert project.compile("nothing", "--check") == 0
    digests = {source.relative: source.sha256 for source in load(project.topology).files}
    assert f"'teams/sales.yaml': {digests['teams/sales.yaml']!r}," in project.revisions()[-1].read_text(encoding="utf-8")


def test_an_included_file_passed_as_the_topology_says_to_pass_the_root(project, capsys):
    split(project.root)
    assert project.compile("initial") == 0
    capsys.readouterr()
    assert cli.main(["compile", "-c", str(project.ini), "--topology", str(project.root / "teams" / "sales.yaml")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {project.root / 'teams' / 'sales.yaml'}:1:1: topology needs a 'transport_version' key; or, if another file "
        "includes this one, pass that file with --topology (nothing was written)\n"
    )
    assert len(project.revisions()) == 1


# --------------------------------------------------------------------------- every command reads the includes
def test_grants_of_an_endpoint_in_an_included_file(project, capsys):
    split(project.root)
    assert cli.main(["grants", "--engine", "postgresql", "-t", str(project.topology), "--endpoint", "Billing.Reports", "--login", "r"]) == 0
    assert "Billing.Reports.host-a" in capsys.readouterr().out


def test_saga_statements_of_a_saga_in_an_included_file(project, capsys):
    split(project.root)
    assert cli.main(["statements", "--engine", "sqlite", "--sagas", "--topology", str(project.topology)]) == 0
    out = capsys.readouterr().out
    assert "Sales_OrderSaga" in out and "Billing_InvoiceSaga" in out


# --------------------------------------------------------------------------- the JSON Schema
def schema_errors(text: str) -> list:
    schema = json_schema()
    cls = jsonschema.validators.validator_for(schema)
    return list(cls(schema).iter_errors(yaml.safe_load(text)))


@pytest.mark.parametrize("text", [ROOT, *TEAMS.values()])
def test_the_json_schema_accepts_the_root_and_the_included_files(text):
    assert schema_errors(text) == []


@pytest.mark.parametrize("line", ["engines: [sqlite]", "default_schema: sales", "subscriptions: false"])
def test_the_json_schema_refuses_a_setting_in_an_included_file(line):
    assert schema_errors(f"endpoints:\n  - name: Sales\n{line}\n")


def test_script_split_by_endpoint_and_its_header_name_the_included_files(project, tmp_path):
    split(project.root)
    assert project.compile("initial") == 0
    folder = tmp_path / "parts"
    argv = ["script", "--engine", "postgresql", "-c", str(project.ini), "--topology", str(project.topology), "--split", str(folder)]
    assert cli.main(argv) == 0
    names = sorted(path.name for path in folder.iterdir())
    assert names[0] == "00-shared.sql" and names[-1] == "99-alembic-version.sql"
    assert {"Billing", "Billing.Reports", "Sales"} <= {name[3:-4] for name in names}
    header = (folder / "00-shared.sql").read_text(encoding="utf-8").split("\n\n", 1)[0]
    included = [f"-- topology includes: {source.relative} sha256 {source.sha256}" for source in load(project.topology).files[1:]]
    assert len(included) == 4 and included == [line for line in header.splitlines() if line.startswith("-- topology includes: ")]


def test_validate_counts_the_files(tmp_path, capsys):
    root = split(tmp_path)
    assert cli.main(["validate", "--topology", str(root)]) == 0
    assert capsys.readouterr().out == f"{root}: valid (14 tables in 5 files)\n"
    assert cli.main(["validate", "--topology", str(root), "--format", "json"]) == 0
    included = ["teams/billing.yaml", "teams/billing/reports.yaml", "teams/sales.yaml", "ops.yaml"]
    assert json.loads(capsys.readouterr().out)["files"] == [str(root), *(str(tmp_path / name) for name in included)]


def test_a_folder_named_like_a_pattern_is_taken_literally(tmp_path):
    folder = tmp_path / "[prod]"
    folder.mkdir()
    topology = load(split(folder))
    assert len(topology.files) == 5 and [ep.name for ep in topology.endpoints] == ["Billing", "Billing.Reports", "Sales"]
