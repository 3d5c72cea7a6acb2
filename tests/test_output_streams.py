"""Where each command's output goes (issue 39), one rule: the product (the text a command prints,
or its --format json report) on stdout, or in the file it writes; every status line (what was
written, progress) on stderr. So `cmd > file` holds the product alone and `cmd -o file` prints
nothing on stdout."""

from __future__ import annotations

import json

import pytest

from sqltransport_schema import cli

TOPOLOGY = """\
transport_version: "9.1"
engines: [mssql, postgresql, sqlite]
endpoints:
  - name: Sales
    outbox: true
queues:
  - name: error
"""


@pytest.fixture
def compiled(project, capsys):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    capsys.readouterr()
    return project


def _run(capsys, *args: str) -> tuple[str, str]:
    capsys.readouterr()
    assert cli.main(list(args)) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_commands_that_write_a_file_say_so_on_stderr_alone(compiled, capsys, tmp_path):
    c = ("-c", str(compiled.ini), "--topology", str(compiled.topology))
    written = {
        "script -o": (["script", "--engine", "postgresql", "-o", str(tmp_path / "deploy.sql"), *c], [tmp_path / "deploy.sql"]),
        "script --split": (
            ["script", "--engine", "mssql", "--split", str(tmp_path / "split"), *c],
            [tmp_path / "split" / "00-shared.sql", tmp_path / "split" / "99-alembic-version.sql"],
        ),
        "graph -o": (["graph", "-o", str(tmp_path / "topology.mmd"), "--topology", str(compiled.topology)], [tmp_path / "topology.mmd"]),
        "json-schema -o": (["json-schema", "-o", str(tmp_path / "schema.json")], [tmp_path / "schema.json"]),
        "init": (["init", str(tmp_path / "shop")], [tmp_path / "shop" / "alembic.ini", tmp_path / "shop" / "topology.yaml"]),
    }
    for what, (args, files) in written.items():
        out, err = _run(capsys, *args)
        assert out == "", what
        for path in files:
            assert path.is_file() and f"wrote {path}\n" in err, (what, err)

    compiled.write_topology(TOPOLOGY.replace("queues:", "  - name: Billing\nqueues:"))
    out, err = _run(capsys, "compile", "-m", "add Billing", *c)
    assert out == "" and err.startswith(f"wrote {compiled.revisions()[-1]}\n") and '  create queue "Billing"' in err


def test_commands_that_print_their_product_put_it_on_stdout_alone(compiled, capsys):
    c = ("-c", str(compiled.ini), "--topology", str(compiled.topology))
    out, err = _run(capsys, "script", "--engine", "postgresql", *c)
    assert "CREATE TABLE" in out and err == ""
    out, err = _run(capsys, "graph", "--topology", str(compiled.topology))
    assert "flowchart" in out and err == ""
    out, err = _run(capsys, "json-schema")
    assert json.loads(out)["type"] == "object" and err == ""
    out, err = _run(capsys, "statements", "--engine", "sqlite")
    assert "INSERT INTO" in out and err == ""
    out, err = _run(capsys, "grants", "--engine", "postgresql", "--login", "app", "--topology", str(compiled.topology))
    assert "GRANT" in out and err == ""
    out, err = _run(capsys, "validate", "--topology", str(compiled.topology))
    assert out.endswith("valid (5 tables)\n") and err == ""
    out, err = _run(capsys, "compile", "--check", *c)
    assert "nothing to compile" in out and err == ""  # --check writes nothing: its report is its product

    compiled.write_topology(TOPOLOGY.replace("queues:", "  - name: Billing\nqueues:"))
    out, err = _run(capsys, "compile", "-m", "add Billing", "--format", "json", *c)
    assert json.loads(out)["status"] == "compiled" and err == ""  # the JSON report, for CI, on stdout
