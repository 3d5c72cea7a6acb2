"""What an upgrade or downgrade logs reads as what happened (issue 39): a drop that succeeds does
not read as refused, each table is said to hold what it holds (the subscription table holds
subscription rows, not messages), and a refused downgrade does not log the steps it rolled back as
if they had run: it names them as rolled back, before its one FAILED line."""

from __future__ import annotations

from .support import catalog
from .support.commands import alembic, failed_line
from .support.messages import insert_message

FIRST = """\
transport_version: "9.1"
engines: [sqlite]
endpoints:
  - name: Sales
queues:
  - name: error
"""
BILLING = "  - name: Billing\n    sagas:\n      - name: InvoiceSaga\n        correlation: {name: InvoiceNumber, type: int}\n"
SECOND = FIRST.replace("queues:", BILLING + "queues:")


def _log(result) -> list[str]:
    """The tool's lines of a run, as alembic.ini prints them (no logger before them; a warning after `warning: `),
    Alembic's FAILED line and its own `LEVEL [logger]` lines left out."""
    alembics = ("FAILED:", "INFO  [", "WARNI [", "ERROR [")
    return [line.removeprefix("warning: ") for line in result.stderr.splitlines() if not line.startswith(alembics)]


def test_a_successful_drop_does_not_read_as_refused(project, sqlite_url):
    project.deploy(sqlite_url, FIRST)
    done = alembic(project, "-x", f"url={sqlite_url}", "-x", "drop_protected=error", "downgrade", "base")
    assert done.returncode == 0, done.stderr
    log = _log(done)
    assert 'drop queue "Sales" (if it holds no messages)' in log
    assert 'drop queue "error" (if it holds no messages, protected queue dropped by its drop_protected entry)' not in log  # by -x
    assert 'drop delayed table "Sales.Delayed" (if it holds no delayed messages)' in log
    assert 'drop subscription table "SubscriptionRouting" (if it holds no subscription rows)' in log
    assert not [line for line in log if "refused" in line]
    assert catalog.execute(sqlite_url, "SELECT count(*) FROM sqlite_master WHERE name = 'Sales'") == [(0,)]


def test_a_refused_downgrade_names_what_it_rolled_back(project, sqlite_url):
    project.deploy(sqlite_url, FIRST)
    first = project.head()
    project.write_topology(SECOND)
    assert project.compile("Billing") == 0
    second = project.head()
    project.upgrade(sqlite_url)
    insert_message(sqlite_url, "Sales")

    refused = alembic(project, "-x", f"url={sqlite_url}", "downgrade", "base")
    assert refused.returncode == 255
    assert 'refusing to drop queue "Sales": it still holds messages' in failed_line(refused)
    log = _log(refused)
    assert f"downgrade {second} -> {first}, Billing" in log  # it ran, in the transaction that rolled back
    assert not [line for line in log if line.startswith(f"downgrade {first} -> <base>")]  # refused: it did nothing
    assert log[-1] == (
        f"rolled back, not applied: everything this run logged above: downgrade {second} -> {first} and the tables' lines with them"
    )
    assert refused.stderr.splitlines()[-1].endswith(log[-1])  # the last line before Alembic's FAILED line
    assert catalog.execute(sqlite_url, "SELECT version_num FROM alembic_version") == [(second,)]  # as it was
    assert catalog.execute(sqlite_url, "SELECT count(*) FROM sqlite_master WHERE name = 'Billing_InvoiceSaga'") == [(1,)]
