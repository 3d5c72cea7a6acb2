"""Transport.from_database from any folder: the migrations leave the deployed blueprint in the
database, and queues resolve by their topology name to the schema the blueprint gives them."""

from __future__ import annotations

import uuid

import pytest

from sqltransport_schema import Transport, wire

from .support import catalog

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
  - name: Billing
    schema: billing
queues:
  - name: error
"""


def test_from_any_folder_with_only_the_database(project, db_url, tmp_path, monkeypatch):
    project.deploy(db_url, TOPOLOGY)
    elsewhere = tmp_path / "service"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no alembic.ini, no migrations here

    transport = Transport.from_database(db_url)
    billing = transport.queue("Billing")
    assert billing.name.schema == "billing"  # SQLite, which has no schemas, ignores it when quoting
    with transport.engine.begin() as conn:
        billing.send(conn, b"42", wire.standard_headers(message_id=str(uuid.uuid4()), enclosed_types=["Shop.Invoice"], reply_to="Sales"))
    with transport.engine.begin() as conn:
        assert billing.receive(conn).body == b"42"
    transport.engine.dispose()


def test_the_stored_blueprint_follows_the_stamp_and_goes_at_base(project, db_url, tmp_path, monkeypatch):
    project.write_topology(TOPOLOGY)
    assert project.compile("initial") == 0
    first = project.head()
    project.deploy(db_url, TOPOLOGY + "  - name: Shipping\n", "shipping")
    stored = catalog.execute(db_url, "SELECT revision FROM sqltransport_blueprint")
    assert stored == [(project.head(),)]
    project.downgrade(db_url, first)
    assert catalog.execute(db_url, "SELECT revision FROM sqltransport_blueprint") == [(first,)]
    project.downgrade(db_url, "base", "drop_protected=error")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LookupError, match=r"run `alembic -x url=\S+ upgrade head`"):
        Transport.from_database(db_url)


@pytest.mark.parametrize("as_engine", [False, True], ids=["url", "engine"])
def test_a_sqlite_file_that_is_not_there_is_not_created(tmp_path, monkeypatch, as_engine):
    """From a folder without the file, from_database says there is no such database, as the
    command line does, and leaves no empty file behind (connecting would have created one)."""
    from sqltransport_schema.db import make_engine

    monkeypatch.chdir(tmp_path)
    url = "sqlite:///sqltransport.db"
    with pytest.raises(LookupError, match=r"^no SQLite database at sqltransport.db; nothing was created: pass the URL"):
        Transport.from_database(make_engine(url) if as_engine else url)
    assert not (tmp_path / "sqltransport.db").exists()
