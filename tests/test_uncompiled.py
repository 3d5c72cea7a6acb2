"""Uncompiled changes are never silent: when topology.yaml (or a file it includes) differs from the blueprint
the migrations' head records, `alembic upgrade`, `check`, `status` and `compile --check` each print the same
warning on stderr, naming the changes and the `compile` to run (migrate/compile.py's `uncompiled`, the one
comparison); `check` and `compile --check` exit 1 for it, `alembic upgrade` and `status` only warn. In-process,
on SQLite: the commands' own code paths, no process started."""

from __future__ import annotations

import json

from sqltransport_schema import cli

from .support import catalog

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
queues:
  - name: error
"""
WITH_AUDIT = TOPOLOGY + "  - name: audit\n"
ADVICE = 'Run: sqltransport-schema compile -c {ini} -m "add audit"'


def _warning(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: ")]


def _expected(project) -> str:
    return (
        f"warning: {project.topology} differs from the migrations' head: 1 change not compiled yet "
        f'(create queue "audit" (transport 9.1)). {ADVICE.format(ini=project.ini)}'
    )


def _deployed_then_edited(project, sqlite_url, capsys):
    project.deploy(sqlite_url, TOPOLOGY)
    project.write_topology(WITH_AUDIT)  # and compile forgotten
    capsys.readouterr()


def test_alembic_upgrade_warns_and_runs_what_is_compiled(project, sqlite_url, capsys):
    _deployed_then_edited(project, sqlite_url, capsys)
    project.upgrade(sqlite_url)  # no exception: an upgrade only warns
    assert _warning(capsys.readouterr().err) == [_expected(project)]
    assert "audit" not in {name for _, name in catalog.read(sqlite_url)}

    assert project.compile() == 0  # compiled as the warning says: silent again
    capsys.readouterr()
    project.upgrade(sqlite_url)
    assert _warning(capsys.readouterr().err) == []
    assert "audit" in {name for _, name in catalog.read(sqlite_url)}


def test_check_exits_1_with_the_warning_though_the_database_matches_its_revision(project, sqlite_url, capsys):
    _deployed_then_edited(project, sqlite_url, capsys)
    assert cli.main(["check", "-c", str(project.ini), "--url", sqlite_url]) == 1
    out, err = capsys.readouterr()
    assert out == "in sync\n" and _warning(err) == [_expected(project)]

    assert cli.main(["check", "-c", str(project.ini), "--url", sqlite_url, "--format", "json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["status"] == "in_sync"
    assert payload["uncompiled"]["changes"] == ['create queue "audit" (transport 9.1)']
    assert payload["uncompiled"]["run"] == ADVICE.format(ini=project.ini).removeprefix("Run: ")

    assert cli.main(["check", "-c", str(project.ini), "--url", sqlite_url, "--format", "markdown"]) == 1
    assert f"\n**Not compiled:** {_expected(project).removeprefix('warning: ')}\n" in capsys.readouterr().out  # the PR comment

    project.write_topology(TOPOLOGY)  # back as compiled
    assert cli.main(["check", "-c", str(project.ini), "--url", sqlite_url]) == 0
    assert _warning(capsys.readouterr().err) == []


def test_status_warns_and_reports_as_usual(project, sqlite_url, capsys):
    _deployed_then_edited(project, sqlite_url, capsys)
    assert cli.main(["status", "-c", str(project.ini), "--url", sqlite_url]) == 0
    out, err = capsys.readouterr()
    assert "Sales" in out and _warning(err) == [_expected(project)]


def test_compile_check_warns_on_stderr_too(project, sqlite_url, capsys):
    _deployed_then_edited(project, sqlite_url, capsys)
    assert project.compile("x", "--check", "--format", "json") == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "pending" and _warning(err) == [_expected(project)]


def test_an_included_file_is_named_and_a_comment_is_no_change(project, sqlite_url, capsys):
    (project.root / "teams").mkdir()
    (project.root / "teams" / "billing.yaml").write_text("endpoints:\n  - name: Billing\n", encoding="utf-8")
    project.deploy(sqlite_url, TOPOLOGY + "include: [teams/*.yaml]\n")
    (project.root / "teams" / "billing.yaml").write_text("# billing's\nendpoints:\n  - name: Billing\n", encoding="utf-8")
    capsys.readouterr()
    project.upgrade(sqlite_url)  # a comment changes the file's sha256, not its tables: nothing to compile
    assert _warning(capsys.readouterr().err) == []

    (project.root / "teams" / "billing.yaml").write_text("endpoints:\n  - name: Billing\n  - name: Shipping\n", encoding="utf-8")
    assert cli.main(["check", "-c", str(project.ini), "--url", sqlite_url]) == 1
    [warning] = _warning(capsys.readouterr().err)
    assert warning.startswith(f"warning: {project.topology} (changed: teams/billing.yaml) differs from the migrations' head: 2 changes")
    assert warning.endswith('-m "add Shipping"')


def test_several_heads_from_branches_merged_in_git_ask_for_the_merge(project, sqlite_url, capsys):
    """Two branches' revisions, merged in git: `alembic upgrade heads` runs both and warns that no merge is compiled."""
    from .test_merges import MERGED, heads, two_branches

    two_branches(project)
    project.write_topology(MERGED)
    capsys.readouterr()
    project.upgrade(sqlite_url, "heads")
    [warning] = _warning(capsys.readouterr().err)
    assert warning.startswith(f"warning: the migrations have 2 heads ({', '.join(heads(project))}), branches merged in git")
    assert warning.endswith('-m "merge 2 branches"')


def test_a_fleet_worker_warns_once_for_its_targets_and_upgrades_them(project, tmp_path, capsys):
    """The fleet runs env.py in its worker (migrate/in_process.py), many targets on one configuration: the
    warning comes once, and every target is upgraded to what is compiled."""
    from sqltransport_schema.cli.output import describe
    from sqltransport_schema.fleet.file import Target
    from sqltransport_schema.fleet.work import UPGRADED, Migrations, Settings

    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    project.write_topology(WITH_AUDIT)  # and compile forgotten
    capsys.readouterr()
    worker = Migrations(Settings(config=str(project.ini), describe=describe))
    urls = [f"sqlite:///{tmp_path / f't{i}.db'}" for i in range(2)]
    results = [worker.upgrade(Target(f"t{i}", url)) for i, url in enumerate(urls)]
    assert [r.outcome for r in results] == [UPGRADED, UPGRADED], [r.error for r in results]
    assert _warning(capsys.readouterr().err) == [_expected(project)]
    assert all("Sales" in {name for _, name in catalog.read(url)} for url in urls)
