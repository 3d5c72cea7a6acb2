"""`status --serve`: the exporter a real Prometheus server scrapes (Debian's `prometheus`), on a real
PostgreSQL database: each queue's depth through PromQL, a backend kill survived, a database that
refuses connections reported as `sqltransport_up 0`, at most one read per --min-interval, a clean
stop on SIGTERM and Ctrl-C; the shipped alert rules through promtool, the dashboard's metrics."""

from __future__ import annotations

import gzip
import json
import re
import signal
import subprocess
import threading
import time
import urllib.request

import pytest
from sqlalchemy.engine import make_url

from sqltransport_schema import errors, wire
from sqltransport_schema.runtime.exporter import EXPORTER_METRICS, METRICS, parse_listen

from .support.commands import CLOSED_PORT, run
from .support.databases import PG_ADMIN_URL, admin
from .support.messages import headers
from .support.projects import REPO
from .support.prometheus import MONITORING, RULES, Exporter, PrometheusServer, binary, depths, get, one
from .support.runtime import deployed

SENT = {"Sales": 3, "Billing": 5, "error": 2, "audit": 0}


def send(transport, counts: dict[str, int]) -> None:
    with transport.engine.begin() as conn:
        for name, n in counts.items():
            queue = transport.queue(name)
            if name == "error":  # failed messages, as the pump moves them
                sales = transport.queue("Sales").address
                queue.send_many(conn, [(b"e", wire.error_headers(headers(i), RuntimeError("x"), sales)) for i in range(n)])
            elif n:
                queue.send_many(conn, [(b"x", headers(i)) for i in range(n)])


@pytest.fixture
def bus(project, pg_url, monkeypatch):
    transport = deployed(project, pg_url, monkeypatch)
    send(transport, SENT)
    transport.engine.dispose()
    yield transport, pg_url
    transport.engine.dispose()


@pytest.fixture
def pg_admin():
    engine = admin(PG_ADMIN_URL, "PostgreSQL at 127.0.0.1:5432")
    yield engine
    engine.dispose()


def backends(pg_admin, url: str) -> list[int]:
    """The pids of the sessions connected to the database."""
    with pg_admin.connect() as conn:
        rows = conn.exec_driver_sql("SELECT pid FROM pg_stat_activity WHERE datname = %(db)s", {"db": make_url(url).database})
        return [pid for (pid,) in rows]


@pytest.fixture
def exporter(bus):
    started = Exporter(bus[1], "--min-interval", "1s")
    yield started
    started.close()


def test_prometheus_scrapes_each_queue_depth_and_the_exporter_survives_a_backend_kill(bus, exporter, pg_admin, tmp_path):
    transport, url = bus
    server = PrometheusServer(tmp_path / "prometheus", f"127.0.0.1:{exporter.port}")
    try:
        depth = 'sqltransport_table_depth{job="sqltransport", kind="queue"}'
        assert server.wait_for(depth, SENT) == SENT
        assert server.wait_for('sqltransport_error_messages{job="sqltransport"}', {transport.queue("Sales").address: 2}, "failed_queue")
        assert server.query('up{job="sqltransport"}')[0][1] == 1
        [kept] = backends(pg_admin, url)  # one connection, kept between reads
        with pg_admin.connect() as conn:
            assert conn.exec_driver_sql("SELECT pg_terminate_backend(%(pid)s)", {"pid": kept}).scalar()
        send(transport, {"Sales": 4, "Billing": 1})
        transport.engine.dispose()
        after = {**SENT, "Sales": 7, "Billing": 6}
        assert server.wait_for(depth, after) == after
        assert exporter.process.poll() is None
        [again] = backends(pg_admin, url)
        assert again != kept
        assert server.query('sqltransport_up{job="sqltransport"}')[0][1] == 1
        # the dead connection was replaced within the read that found it: no read failed
        assert server.query('sqltransport_status_read_failures_total{job="sqltransport"}')[0][1] == 0
    finally:
        server.close()
    code, err = exporter.stop(signal.SIGTERM)
    assert code == 0 and err.strip().endswith("status --serve: stopped"), err
    assert backends(pg_admin, url) == []


def test_a_read_that_fails_is_up_0_and_a_later_one_reads_again(bus, exporter, pg_admin):
    _, url = bus
    name = make_url(url).database
    assert one(exporter.metrics(), "sqltransport_up") == 1
    with pg_admin.connect() as conn:
        conn.exec_driver_sql(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %(db)s", {"db": name})
            time.sleep(1.1)
            down = exporter.metrics()
            assert one(down, "sqltransport_up") == 0 and one(down, "sqltransport_status_read_failures_total") == 1
            assert "sqltransport_table_depth" not in down and "sqltransport_status_taken_timestamp_seconds" not in down
            code, health = get(exporter.base + "/healthz")
            assert code == 200 and health.startswith("ok: serving; last read failed: cannot reach the database:"), health
        finally:
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    time.sleep(1.1)
    up = exporter.metrics()
    assert one(up, "sqltransport_up") == 1 and depths(up) == SENT
    assert get(exporter.base + "/healthz") == (200, "ok: serving; last read of the database worked\n")
    assert get(exporter.base + "/nothing")[0] == 404
    code, err = exporter.stop(signal.SIGINT)  # Ctrl-C
    assert code == 0, err
    assert "reading the database failed: cannot reach the database" in err and "reading the database again" in err
    assert "Traceback" not in err


def test_ctrl_c_stops_it_when_started_as_a_background_job(bus):
    """`status --serve ... &` from a script: the job inherits SIGINT ignored, so Python sets up no
    KeyboardInterrupt; the exporter's own handler still stops it on SIGINT (it hung until killed)."""
    exporter = Exporter(bus[1], background=True)
    try:
        assert one(exporter.metrics(), "sqltransport_up") == 1
        code, err = exporter.stop(signal.SIGINT)
        assert code == 0 and err.strip().endswith("status --serve: stopped"), err
    finally:
        exporter.close()


def test_scrapes_read_the_database_at_most_once_per_min_interval(bus, pg_admin):
    transport, url = bus
    exporter = Exporter(url, "--min-interval", "3s")
    try:
        found: list = []
        scrapers = [threading.Thread(target=lambda: found.append(exporter.metrics())) for _ in range(20)]
        for scraper in scrapers:
            scraper.start()
        for scraper in scrapers:
            scraper.join()
        send(transport, {"Sales": 2})  # not seen until the next read
        transport.engine.dispose()
        found.append(exporter.metrics())
        assert all(one(s, "sqltransport_status_reads_total") == 1 and depths(s)["Sales"] == 3 for s in found)
        plain = get(exporter.base + "/metrics")[1]
        asked = {"Accept-Encoding": "gzip", "Accept": "application/openmetrics-text; version=1.0.0"}
        with urllib.request.urlopen(urllib.request.Request(exporter.base + "/metrics", headers=asked), timeout=10) as response:
            assert response.headers["Content-Encoding"] == "gzip"
            assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
            openmetrics = gzip.decompress(response.read()).decode("utf-8")
        assert openmetrics.endswith("# EOF\n") and "sqltransport_status_reads_total 1.0" in openmetrics
        assert get(exporter.base + "/metrics")[1] == plain  # the same bytes until the next read
        time.sleep(3)
        later = exporter.metrics()
        assert one(later, "sqltransport_status_reads_total") == 2 and depths(later)["Sales"] == 5
        assert len(backends(pg_admin, url)) == 1
    finally:
        exporter.close()


def test_user_mistakes_are_one_error_line(sqlite_url, tmp_path):
    for args, message in (
        (("--serve", "9716"), "error: --serve 9716: give HOST:PORT, e.g. 127.0.0.1:9716, [::1]:9716 or :9716 (every interface)"),
        (("--serve", ":0", "--min-interval", "5"), "error: --min-interval 5: give a duration with its unit, e.g. 500ms, 5s or 1m"),
        (("--min-interval", "5s"), "error: --min-interval goes with --serve HOST:PORT"),
        (("--serve", ":0", "--watch", "1"), "error: --serve and --watch do not go together"),
        (("--serve", ":0", "--format", "markdown"), "error: --serve answers in the Prometheus format itself; leave out --format markdown"),
    ):
        result = run(tmp_path, "status", "--url", sqlite_url, *args)
        assert result.returncode == 2 and result.stderr.startswith(message) and len(result.stderr.splitlines()) == 1, result.stderr
    result = run(tmp_path, "status", "--url", CLOSED_PORT, "--serve", "127.0.0.1:0")  # needed to start: one error line
    assert result.returncode == 2 and result.stderr.startswith("error: cannot reach the database:"), result.stderr
    assert len(result.stderr.splitlines()) == 1 and "serving" not in result.stderr


def test_an_address_in_use_is_one_error_line(project, sqlite_url, monkeypatch, tmp_path):
    deployed(project, sqlite_url, monkeypatch).engine.dispose()
    first = Exporter(sqlite_url)
    try:
        result = run(tmp_path, "status", "--url", sqlite_url, "--serve", f"127.0.0.1:{first.port}")
        assert result.returncode == 2
        assert result.stderr == f"error: --serve 127.0.0.1:{first.port}: cannot listen there (Address already in use)\n"
    finally:
        first.close()


def test_without_prometheus_client_the_error_names_the_extra(project, sqlite_url, monkeypatch, tmp_path):
    deployed(project, sqlite_url, monkeypatch).engine.dispose()
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "prometheus_client.py").write_text("raise ImportError('No module named prometheus_client')\n")
    for args in (("--serve", "127.0.0.1:0"), ("--format", "prometheus")):
        result = run(tmp_path, "status", "--url", sqlite_url, *args, shadow=shadow)
        assert result.returncode == 2, result.stderr
        assert result.stderr == (
            "error: the Prometheus format needs prometheus-client (No module named prometheus_client); "
            "pip install 'sqltransport-schema[exporter]'\n"
        )


def test_promtool_accepts_the_shipped_rules_and_their_unit_tests():
    promtool = binary("promtool")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "SUCCESS: 5 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", "sqltransport-alerts.test.yml"], cwd=MONITORING, capture_output=True, text=True, timeout=60
    )
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    config = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=MONITORING, capture_output=True, text=True, timeout=60)
    assert config.returncode == 0, config.stdout + config.stderr


EXPOSED = {name + ("_total" if name.endswith(("reads", "failures")) else "") for name, _ in (*METRICS, *EXPORTER_METRICS)}


def test_the_dashboard_draws_the_documented_metrics():
    dashboard = json.loads((MONITORING / "sqltransport-dashboard.json").read_text(encoding="utf-8"))
    exprs = {panel["title"]: " ".join(t["expr"] for t in panel["targets"]) for panel in dashboard["panels"]}
    used = set(re.findall(r"\bsqltransport_\w+", " ".join(exprs.values())))
    assert used <= EXPOSED, used - EXPOSED
    assert "sqltransport_table_depth" in exprs["Queue depth"]
    assert "sqltransport_queue_oldest_message_age_seconds" in exprs["Oldest message age"]
    assert "sqltransport_delayed_due_messages" in exprs["Delayed messages due"]
    assert "sqltransport_error_messages" in exprs["Error queue by FailedQ"] and "failed_queue" in json.dumps(dashboard["panels"])
    documented = set(re.findall(r"^\| `(sqltransport_\w+)`", (REPO / "docs" / "operations.md").read_text(encoding="utf-8"), re.M))
    assert documented == EXPOSED


def test_listen_addresses():
    assert parse_listen("127.0.0.1:9716") == ("127.0.0.1", 9716)
    assert parse_listen(":9716") == ("0.0.0.0", 9716)  # every interface
    assert parse_listen("[::1]:0") == ("::1", 0)
    for wrong in ("9716", "host:", "host:port", "[::1:9716", "127.0.0.1:70000"):
        with pytest.raises(errors.UsageError):
            parse_listen(wrong)
