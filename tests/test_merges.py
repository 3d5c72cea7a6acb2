"""Branches merged in git leave the migrations with several heads: `compile` joins them in one merge
revision, an `alembic merge heads` revision is understood, and conflicting branch changes are refused
with both places named. Each database state (the fork point, one branch's head, empty) ends in sync."""

from __future__ import annotations

import ast
import shutil

import pytest
from alembic import command
from alembic.config import Config
from alembic.util import CommandError

from sqltransport_schema import cli
from sqltransport_schema.revisions import stamps

from .support.databases import connect

BASE = """\
transport_version: "9.1"
engines: [sqlite, postgresql]
endpoints:
  - name: Sales
"""
BILLING = BASE + "  - name: Billing\n"
SHIPPING = BASE + "  - name: Shipping\n    instances: [host-a]\n"
MERGED = BILLING + "  - name: Shipping\n    instances: [host-a]\n"


def branch(project, topology: str, message: str, at: list) -> str:
    """Compile `topology` on top of the revisions `at` alone (the branch as its author saw it):
    the other branches' files are set aside meanwhile, as git would have them. Returns the new file's name."""
    aside = project.root / "aside"
    aside.mkdir(exist_ok=True)
    keep = {path.name for path in at}
    for path in project.versions.glob("*.py"):
        if path.name not in keep:
            shutil.move(path, aside / path.name)
    project.write_topology(topology)
    assert project.compile(message) == 0
    written = next(p for p in project.versions.glob("*.py") if p.name not in keep)
    for path in aside.glob("*.py"):
        shutil.move(path, project.versions / path.name)
    return written.name


def revision_id(path) -> str:
    return next(
        node.value.value
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "revision"
    )


def two_branches(project, one: str = BILLING, other: str = SHIPPING, base: str = BASE) -> tuple[str, str, str]:
    """A base revision and two branches on it. Returns the revision ids."""
    project.write_topology(base)
    assert project.compile("base") == 0
    base = project.revisions()
    a = branch(project, one, "branch a", base)
    b = branch(project, other, "branch b", base)
    ids = [revision_id(project.versions / name) for name in (a, b)]
    return revision_id(base[0]), ids[0], ids[1]


def check(project, url: str, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["check", "--url", url, "-c", str(project.ini)])
    return code, capsys.readouterr().out


def heads(project) -> tuple[str, ...]:
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory.from_config(Config(str(project.ini))).get_heads())


def ends_in_sync(project, url: str, capsys, fork: str, branch_head: str) -> None:
    """A database at the fork point, at one branch's head and an empty one all reach head and match the topology."""
    for start in (fork, branch_head, None):
        project.downgrade(url, "base")
        if start is not None:
            project.upgrade(url, start)
        project.upgrade(url)
        code, out = check(project, url, capsys)
        assert code == 0, out


def test_compile_merges_two_branches(project, db_url, capsys):
    fork, a, b = two_branches(project)
    assert set(heads(project)) == {a, b}
    project.write_topology(MERGED)
    capsys.readouterr()
    assert project.compile("nothing", "--check") == 1
    out = capsys.readouterr().out
    assert "2 heads" in out and "sqltransport-schema compile" in out and "by hand" not in out
    assert project.compile("merge") == 0
    (merge,) = heads(project)
    written = project.revisions()[-1].read_text()
    assert f"down_revision = {(a, b)!r}" in written or f"down_revision = {(b, a)!r}" in written
    assert "op." not in written.split("def upgrade")[1].split("def downgrade")[0]  # the branches built it all
    assert project.compile("nothing", "--check") == 0
    assert project.compile("again") == 0 and heads(project) == (merge,)  # nothing more to write
    for start, pending in ((fork, 3), (a, 2)):  # check lists what upgrade runs: both branches, then the merge
        project.downgrade(db_url, "base")
        project.upgrade(db_url, start)
        code, out = check(project, db_url, capsys)
        assert code == 1 and f"{pending} revision(s) not applied" in out and merge in out, out
    ends_in_sync(project, db_url, capsys, fork, a)


def test_a_merge_reconciles_what_neither_branch_built(project, db_url, capsys):
    """A branch adds an endpoint while the other gives every endpoint BodyString: the merge
    revision adds BodyString to the new endpoint's tables."""
    fork, a, _ = two_branches(project, one=BASE.replace("  - name: Sales\n", "  - name: Sales\n    body_string: true\n"))
    project.write_topology(
        BASE.replace("  - name: Sales\n", "  - name: Sales\n    body_string: true\n")
        + "  - name: Shipping\n    instances: [host-a]\n    body_string: true\n"
    )
    assert project.compile("merge") == 0
    upgrade = project.revisions()[-1].read_text().split("def upgrade")[1].split("def downgrade")[0]
    assert 'op.add_body_string("Shipping"' in upgrade and 'op.add_body_string("Shipping.Delayed"' in upgrade
    assert 'op.add_body_string("Sales"' not in upgrade
    assert project.compile("nothing", "--check") == 0
    ends_in_sync(project, db_url, capsys, fork, a)


def test_alembic_merge_heads_is_understood(project, db_url, capsys):
    fork, a, b = two_branches(project)
    command.merge(Config(str(project.ini)), "heads", message="merge heads")
    (merge,) = heads(project)
    project.write_topology(MERGED)
    capsys.readouterr()
    assert project.compile("nothing", "--check") == 0  # its blueprint: both branches' tables
    ends_in_sync(project, db_url, capsys, fork, b)
    project.write_topology(MERGED + "  - name: Audit\n")
    assert project.compile("after the merge") == 0
    assert heads(project) != (merge,) and project.compile("nothing", "--check") == 0
    project.upgrade(db_url)
    assert check(project, db_url, capsys)[0] == 0


def test_conflicting_branches_are_refused_with_both_changes(project, sqlite_url, capsys):
    """One branch gives Sales BodyString, the other drops Sales: both files and operations are named."""
    project.write_topology(BASE + "  - name: Billing\n")
    assert project.compile("base") == 0
    base = project.revisions()
    a = branch(project, BILLING.replace("  - name: Sales\n", "  - name: Sales\n    body_string: true\n"), "sales body", base)
    b = branch(project, "transport_version: \"9.1\"\nengines: [sqlite, postgresql]\nendpoints:\n  - name: Billing\n", "retire sales", base)
    project.write_topology(BILLING)
    before = sorted(p.name for p in project.versions.glob("*.py"))
    for args in (("merge",), ("nothing", "--check")):
        capsys.readouterr()
        assert project.compile(*args) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert a in err and b in err and 'op.add_body_string("Sales"' in err and 'op.drop_queue("Sales"' in err
    assert sorted(p.name for p in project.versions.glob("*.py")) == before  # nothing written
    command.merge(Config(str(project.ini)), "heads", message="merge heads")
    capsys.readouterr()
    assert project.compile("after") == 2
    err = capsys.readouterr().err
    assert a in err and b in err and "Traceback" not in err
    with pytest.raises(CommandError) as refused:  # one FAILED line, whichever branch Alembic runs first
        project.upgrade(sqlite_url)
    assert "Sales" in str(refused.value)
    with connect(sqlite_url).connect() as connection:
        assert stamps(connection) == ()  # rolled back: nothing applied
    capsys.readouterr()
    assert cli.main(["check", "--url", sqlite_url, "-c", str(project.ini)]) == 2
    err = capsys.readouterr().err
    assert a in err and b in err and "Traceback" not in err


@pytest.mark.parametrize("second", [BILLING, BILLING.replace("  - name: Billing\n", "  - name: Billing\n    body_string: true\n")])
def test_both_branches_adding_one_endpoint_are_refused(project, capsys, second):
    """Even alike: the second creation would adopt the first's table, but a downgrade past the merge drops it twice."""
    two_branches(project, one=BILLING, other=second)
    project.write_topology(second)
    capsys.readouterr()
    assert project.compile("merge") == 2
    err = capsys.readouterr().err
    assert "Billing" in err and err.count("op.create_queue(\"Billing\"") == 2


def test_a_merge_changes_the_version_of_what_the_other_branch_built(project, sqlite_url, capsys):
    """One branch raises transport_version, the other adds an endpoint at the old version: the merge
    changes the new endpoint's queues in place (from the version that built them), however merged."""
    old = BASE.replace('"9.1"', '"5.0"').replace("[sqlite, postgresql]", "[mssql, sqlite]")
    new = old.replace('"5.0"', '"9.1"')
    fork, a, b = two_branches(project, one=new, other=old + "  - name: Shipping\n", base=old)
    project.write_topology(new + "  - name: Shipping\n")
    capsys.readouterr()
    assert project.compile("nothing", "--check") == 1
    assert 'change queue "Shipping" from transport 5.0 to 9.1' in capsys.readouterr().out
    versions = sorted(project.versions.glob("*.py"))
    command.merge(Config(str(project.ini)), "heads", message="merge heads")  # the same, after alembic's merge
    assert project.compile("nothing", "--check") == 1
    for path in set(project.versions.glob("*.py")) - set(versions):
        path.unlink()
    for label in ("merge", "nothing"):
        assert project.compile(label) == 0
    upgrade = project.revisions()[-1].read_text().split("def upgrade")[1].split("def downgrade")[0]
    assert [line.strip() for line in upgrade.splitlines()[1:] if line.strip()] == [
        'op.change_queue_version("Shipping", from_version="5.0", to_version="9.1")'
    ]
    assert project.compile("nothing", "--check") == 0
    ends_in_sync(project, sqlite_url, capsys, fork, b)


def test_both_branches_changing_one_queue_are_refused(project, capsys):
    """Both give Sales BodyString: on a SQLite database at the fork point the second ALTER would fail."""
    with_body = BASE.replace("  - name: Sales\n", "  - name: Sales\n    body_string: true\n")
    two_branches(project, one=with_body, other=with_body + "  - name: Shipping\n")
    project.write_topology(with_body + "  - name: Shipping\n")
    capsys.readouterr()
    assert project.compile("merge") == 2
    err = capsys.readouterr().err
    assert err.count('op.add_body_string("Sales", version="9.1")') == 2 and "body_string False -> True" in err
