"""compile remembers the topology file its history comes from, and --check replays the history to
catch a revision whose operations were edited by hand."""

from __future__ import annotations

import pytest

from sqltransport_schema import cli

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
queues:
  - name: error
"""
OTHER = """\
transport_version: "9.1"
endpoints:
  - name: Shipping
queues:
  - name: error
"""


def compile_file(project, path, *extra: str) -> int:
    return cli.main(["compile", "-m", "change", "-c", str(project.ini), "--topology", str(path), *extra])


def test_another_topology_file_is_refused_unless_told(project, capsys):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert "TOPOLOGY_FILE = 'topology.yaml'" in project.revisions()[-1].read_text()
    other = project.root / "other.yaml"
    other.write_text(OTHER)
    capsys.readouterr()
    assert compile_file(project, other) == 2
    err = capsys.readouterr().err
    assert "compiled from topology.yaml, not other.yaml" in err and "--topology-switch" in err and len(err.splitlines()) == 1
    assert len(project.revisions()) == 1
    assert compile_file(project, other, "--topology-switch") == 0
    assert "TOPOLOGY_FILE = 'other.yaml'" in project.revisions()[-1].read_text()
    assert compile_file(project, other, "--check") == 0  # now the history's file


def test_check_names_a_hand_edited_revision(project, capsys):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    assert project.compile("nothing", "--check") == 0
    revision = project.revisions()[-1]
    text = revision.read_text()
    edited = "\n".join(line for line in text.splitlines() if 'op.create_queue("Sales"' not in line) + "\n"
    assert edited != text
    revision.write_text(edited)
    capsys.readouterr()
    assert project.compile("nothing", "--check") == 2
    err = capsys.readouterr().err
    assert revision.name in err and "edited by hand" in err and "Sales" in err


ENGINES = """\
transport_version: "9.1"
engines: [sqlite, postgresql]
endpoints:
  - name: Sales
queues:
  - name: error
"""


@pytest.mark.parametrize(
    ("before", "after", "named"),
    [
        ('body_string=False, seq_type="serial")', 'body_string=True, seq_type="serial")', "body_string=True"),
        ('op.create_queue("Sales", version="9.1"', 'op.create_queue("Sales", version="8.0"', 'version="8.0"'),
        (
            '"Sales", version="9.1", body_string=False, seq_type="serial"',
            '"Sales", version="9.1", body_string=False, seq_type="bigserial"',
            'seq_type="bigserial"',
        ),
    ],
)
def test_check_names_every_edited_argument(project, capsys, before, after, named):
    """Arguments a scratch SQLite database does not express (BodyString's presence aside) are held to the SNAPSHOT."""
    project.write_topology(ENGINES)
    assert project.compile("initial") == 0
    revision = project.revisions()[-1]
    text = revision.read_text()
    assert before in text
    revision.write_text(text.replace(before, after, 1))
    capsys.readouterr()
    assert project.compile("nothing", "--check") == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and revision.name in err and "edited by hand" in err
    assert 'op.create_queue("Sales"' in err and named in err


def test_check_names_an_edited_version_change(project, capsys):
    project.write_topology(TOPOLOGY.replace('"9.1"', '"5.0"\nengines: [mssql, sqlite]'))
    assert project.compile("initial") == 0
    project.write_topology(TOPOLOGY.replace('"9.1"', '"9.1"\nengines: [mssql, sqlite]'))
    assert project.compile("raise") == 0
    assert project.compile("nothing", "--check") == 0
    revision = project.revisions()[-1]
    text = revision.read_text()
    assert 'from_version="5.0", to_version="9.1"' in text
    for edited, named in (
        (text.replace('from_version="5.0"', 'from_version="4.0"'), 'from_version="4.0"'),
        ("\n".join(line for line in text.splitlines() if "op.change_queue_version(\"Sales\"" not in line) + "\n", "transport 5.0"),
    ):
        revision.write_text(edited)
        capsys.readouterr()
        assert project.compile("nothing", "--check") == 2
        err = capsys.readouterr().err
        assert revision.name in err and named in err and "Sales" in err
    revision.write_text(text)
    assert project.compile("nothing", "--check") == 0


SAGAS = """\
transport_version: "9.1"
engines: [sqlite, postgresql]
endpoints:
  - name: Sales
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
"""


def test_check_names_an_edited_saga_correlation(project, capsys):
    project.write_topology(SAGAS)
    assert project.compile("initial") == 0
    project.write_topology(SAGAS + "        transitional: {name: OrderNumber, type: string}\n")
    assert project.compile("transitional") == 0
    assert project.compile("nothing", "--check") == 0
    first, second = project.revisions()
    for revision, before, after in (
        (first, 'correlation=("OrderId", "guid")', 'correlation=("OrderId", "string")'),
        (second, 'property=("OrderNumber", "string")', 'property=("OrderNumber", "int")'),
        (second, 'prefix="Sales_", property=', 'prefix="Sale_", property='),
    ):
        text = revision.read_text()
        assert before in text
        revision.write_text(text.replace(before, after, 1))
        capsys.readouterr()
        assert project.compile("nothing", "--check") == 2
        err = capsys.readouterr().err
        assert revision.name in err and "edited by hand" in err and "Sales_OrderSaga" in err, err
        revision.write_text(text)
    assert project.compile("nothing", "--check") == 0
