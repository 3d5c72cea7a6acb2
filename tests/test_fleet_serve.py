"""fleet status --serve: each target's reachability, revision and how far behind it is, as a
Prometheus exporter (the status exporter's serving and format), scraped over HTTP and read by
prometheus-client's own parser (and promtool where it is installed), on SQLite tenant files and an
unreachable PostgreSQL target; a target upgraded between two scrapes shows at the next."""

from __future__ import annotations

import shutil
import signal
import subprocess

import pytest

from .support.fleets import SECRET, run_fleet
from .support.prometheus import Exporter, get
from .test_fleet_postgresql import example, revisions  # noqa: F401 - example: the fixture

pytestmark = pytest.mark.slow


def by_target(samples: dict, name: str) -> dict[str, float]:
    return {labels["target"]: value for labels, value in samples.get(name, [])}


def test_fleet_status_serves_each_targets_revision(example, monkeypatch):
    monkeypatch.setenv("FLEET_PW", SECRET)
    revs = revisions(example)
    (example / "tenants").mkdir()
    (example / "fleet.yaml").write_text(
        "url_template: sqlite:///tenants/{name}.db\nnames: [acme, globex]\n"
        "targets:\n  - name: gone\n    url: postgresql://postgres:${FLEET_PW}@127.0.0.1:1/nothing\n"
        "stages:\n  - name: canary\n    targets: [acme]\n  - name: rest\n"
    )
    assert run_fleet(example, "upgrade", "--only", "acme").returncode == 0
    assert run_fleet(example, "upgrade", "--only", "globex", "--to", revs[1]).returncode == 0
    exporter = Exporter("", "--min-interval", "0", command=("fleet", "status"), cwd=example)
    try:
        samples = exporter.metrics()
        assert by_target(samples, "sqltransport_fleet_target_reachable") == {"acme": 1, "globex": 1, "gone": 0}
        assert by_target(samples, "sqltransport_fleet_target_at_head") == {"acme": 1, "globex": 0, "gone": 0}
        assert by_target(samples, "sqltransport_fleet_target_revisions_behind") == {"acme": 0, "globex": len(revs) - 2}
        revision = {labels["target"]: labels["revision"] for labels, _ in samples["sqltransport_fleet_target_revision"]}
        assert revision == {"acme": revs[-1], "globex": revs[1]}
        stages = {labels["target"]: labels["stage"] for labels, _ in samples["sqltransport_fleet_target_reachable"]}
        assert stages == {"acme": "canary", "globex": "rest", "gone": "rest"}
        assert samples["sqltransport_up"] == [({}, 1.0)]
        code, text = get(exporter.base + "/metrics")
        assert code == 200 and SECRET not in text and "127.0.0.1:1" not in text  # no URL in a label
        promtool = shutil.which("promtool")
        if promtool is not None:
            checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
            assert checked.returncode == 0, checked.stdout + checked.stderr

        assert run_fleet(example, "upgrade", "--only", "globex").returncode == 0
        again = exporter.metrics()  # --min-interval 0: read at every scrape
        assert by_target(again, "sqltransport_fleet_target_at_head") == {"acme": 1, "globex": 1, "gone": 0}
        assert by_target(again, "sqltransport_fleet_target_revisions_behind") == {"acme": 0, "globex": 0}
        assert again["sqltransport_status_reads_total"] == [({}, 3.0)]  # a read per scrape: three scrapes
        assert get(exporter.base + "/healthz") == (200, "ok: serving; last read of the fleet worked\n")
        code, err = exporter.stop(signal.SIGTERM)
        assert code == 0 and err.strip().endswith("fleet status --serve: stopped") and SECRET not in err
    finally:
        exporter.close()


def test_serve_refuses_another_format(example):
    (example / "fleet.yaml").write_text("targets:\n  - name: a\n    url: sqlite:///a.db\n")
    result = run_fleet(example, "status", "--serve", "127.0.0.1:0", "--format", "markdown")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --serve answers in the Prometheus format itself; leave out --format markdown"
    lone = run_fleet(example, "status", "--min-interval", "1s")
    assert lone.returncode == 2 and lone.stderr.strip() == "error: --min-interval goes with --serve HOST:PORT"


@pytest.mark.postgresql
def test_a_held_lock_costs_a_scrape_its_read_timeout_and_the_others_are_served(example):
    """One target's alembic_version held by another session: a scrape answers within twice
    --read-timeout, that target timed out (with the time waited), the others at the head."""
    import time

    import psycopg

    from .support.fleets import pg_databases, pg_url
    from .test_fleet_postgresql import write_fleet

    with pg_databases(3) as names:
        write_fleet(example, names, password=False)
        assert run_fleet(example, "upgrade").returncode == 0
        short = [n.rsplit("_", 1)[1] for n in names]
        holder = psycopg.connect(pg_url(names[1]))
        holder.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")
        exporter = Exporter("", "--min-interval", "0", "--read-timeout", "1s", command=("fleet", "status"), cwd=example)
        try:
            started = time.monotonic()
            samples = exporter.metrics()
            took = time.monotonic() - started
        finally:
            exporter.close()
            holder.close()
        assert took < 2 * 1, took
        assert by_target(samples, "sqltransport_fleet_target_timed_out") == {short[0]: 0, short[1]: 1, short[2]: 0}
        assert by_target(samples, "sqltransport_fleet_target_reachable") == {short[0]: 1, short[1]: 0, short[2]: 1}
        assert by_target(samples, "sqltransport_fleet_target_at_head") == {short[0]: 1, short[1]: 0, short[2]: 1}
        assert 0.9 <= by_target(samples, "sqltransport_fleet_target_read_seconds")[short[1]] < 2
