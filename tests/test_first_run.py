"""What a new user meets on the way (issue 56's smaller items), each said where it happens: a typo of a
deployed queue's name, the advice that keeps the user's --url, the journal of a fleet in init's .gitignore,
a SQLite fleet target in a folder that is not there, upgrade lines without a logger's prefix. In-process,
on SQLite."""

from __future__ import annotations

import re
import sqlite3

import pytest
from alembic.util import CommandError

from sqltransport_schema import cli, errors
from sqltransport_schema.urls import upgrade_command

from .support.runtime import TWO_ENDPOINTS as TOPOLOGY
from .support.runtime import deployed


def test_a_typo_of_a_deployed_queue_names_the_close_match(project, sqlite_url, monkeypatch):
    transport = deployed(project, sqlite_url, monkeypatch, TOPOLOGY)
    try:
        typo = r"no queue 'Sale' is deployed in this database \(no such table\); did you mean 'Sales'\?"
        with pytest.raises(errors.NotFound, match=typo):
            transport.queue("Sale")
        assert transport.queue("Sales").name.table == "Sales"
        assert transport.queue("Audit").name.table == "Audit"  # no deployed queue is close: taken as given
        assert transport.address_queue("Sale").name.table == "Sale"  # an address (a subscriber's) is taken as given
    finally:
        transport.engine.dispose()


def test_the_advice_for_an_unmigrated_database_keeps_the_users_url(project, tmp_path, capsys):
    """status --url (and check) on a database no upgrade has stamped: the command to run names that database,
    not the one alembic.ini names (which a bare `alembic upgrade head` would build)."""
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()  # there, but not migrated
    url = f"sqlite:///{other}"
    for command in ("status", "check"):
        capsys.readouterr()
        assert cli.main([command, "-c", str(project.ini), "--url", url]) == 2
        assert capsys.readouterr().err == (
            f"error: the database is stamped with 0 revisions (none); run `alembic -x url={url} upgrade head`\n"
        ), command
    assert cli.main(["status", "-c", str(project.ini), "--url", f"sqlite:///{tmp_path / 'missing.db'}"]) == 2
    # a password is masked in the advice, as everywhere (the user fills it in again)
    masked = "alembic -x url='postgresql://app:***@db.example/shop' upgrade head"
    assert upgrade_command("postgresql://app:s3cret@db.example/shop") == masked


def test_a_sqlite_target_in_a_folder_that_is_not_there_names_the_folder(project, tmp_path, capsys):
    """A fleet's upgrade and status of that target (their worker, in-process), `alembic upgrade` and `status`:
    each names the folder, and none creates it (SQLite said only "unable to open database file")."""
    from sqltransport_schema.cli.output import describe
    from sqltransport_schema.fleet.file import Target
    from sqltransport_schema.fleet.work import Migrations, Settings

    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    folder = tmp_path / "nowhere"
    url = f"sqlite:///{folder / 'a.db'}"
    said = f"no folder {folder} for the SQLite database {folder / 'a.db'}"
    worker = Migrations(Settings(config=str(project.ini), describe=describe))  # the command line's one line
    upgraded, read = worker.upgrade(Target("a", url)), worker.status(Target("a", url))
    assert upgraded.outcome == "failed" and upgraded.error.startswith(said), upgraded.error
    assert read.error.startswith(said) and f"create the folder first (mkdir -p {folder})" in read.error, read.error

    with pytest.raises(CommandError, match=f"^{re.escape(said)}; nothing was created"):
        project.upgrade(url)
    capsys.readouterr()
    assert cli.main(["status", "-c", str(project.ini), "--url", url]) == 2
    assert capsys.readouterr().err.startswith(f"error: {said} (given by --url); nothing was created")
    assert not folder.exists()


def test_adopt_names_the_users_url_in_the_upgrade_it_suggests(project, sqlite_url, capsys):
    """Tables an older revision made, unstamped: adopt stamps that revision and says how to upgrade that database."""
    project.deploy(sqlite_url, TOPOLOGY)
    first = project.head()
    project.write_topology(TOPOLOGY + "  - name: audit\n")
    assert project.compile("audit") == 0
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as connection:
        connection.execute("DROP TABLE alembic_version")
        connection.execute("DROP TABLE sqltransport_blueprint")
    capsys.readouterr()
    assert cli.main(["adopt", "-c", str(project.ini), "--url", sqlite_url]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"stamped revision {first}; run `alembic -x url={sqlite_url} upgrade head` to apply the later revisions"
    )
