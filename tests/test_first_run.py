"""What a new user meets on the way (issue 56's smaller items), each said where it happens: a typo of a
deployed queue's name, the advice that keeps the user's --url, the journal of a fleet in init's .gitignore,
a SQLite fleet target in a folder that is not there, upgrade lines without a logger's prefix. In-process,
on SQLite."""

from __future__ import annotations

import pytest

from sqltransport_schema import Transport, errors

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
  - name: Billing
queues:
  - name: error
"""


def test_a_typo_of_a_deployed_queue_names_the_close_match(project, sqlite_url):
    project.deploy(sqlite_url, TOPOLOGY)
    transport = Transport.from_database(sqlite_url, str(project.ini))
    try:
        typo = r"no queue 'Sale' is deployed in this database \(no such table\); did you mean 'Sales'\?"
        with pytest.raises(errors.NotFound, match=typo):
            transport.queue("Sale")
        assert transport.queue("Sales").name.table == "Sales"
        assert transport.queue("Audit").name.table == "Audit"  # no deployed queue is close: taken as given
        assert transport.address_queue("Sale").name.table == "Sale"  # an address (a subscriber's) is taken as given
    finally:
        transport.engine.dispose()
