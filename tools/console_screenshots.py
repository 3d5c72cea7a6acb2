"""The screenshots of docs/console.md. A project of its own (TOPOLOGY below: three endpoints, the
error queue with its archive, the console's action log; not the example topology.yaml, which
README's first command builds) is compiled and deployed on a throwaway SQLite file; failures of
three handlers are put in its error queue; `sqltransport-schema console --sample-interval 1` is
started on it; messages are sent and received between its depth samples, one group is archived and
another retried through its API (jobs, logged); then each page is shot by Debian's chromium through
Playwright (the console extra and `pip install playwright`), the overview down to its depth chart.

    .venv/bin/python tools/console_screenshots.py   # writes docs/images/console-*.png
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqltransport_schema import wire  # noqa: E402
from sqltransport_schema.db import make_engine  # noqa: E402
from sqltransport_schema.runtime.transport import Transport  # noqa: E402

TOPOLOGY = """\
transport_version: "9.1"
endpoints:
  - name: Sales
  - name: Billing
  - name: Shipping
queues:
  - name: error
    archive: error_archive
  - name: audit
action_log:
  table: ConsoleActions
"""
# (queue, exception, messages): the KeyErrors are retried and the ValueErrors archived (traffic below)
FAILURES = [
    ("Sales", TimeoutError("database timeout"), 12),
    ("Billing", KeyError("customer 42"), 5),
    ("Shipping", ValueError("no address"), 2),
    ("Billing", ConnectionError("payment gateway unreachable"), 4),
    ("Shipping", LookupError("no carrier for zone 7"), 3),
]
VIEWPORT = {"width": 1000, "height": 600}  # small pictures: the pages fit it but the overview, cut below its chart
SAMPLES = 8  # depth samples on the overview's chart (one a second)


def run(*command: str, cwd: Path) -> None:
    subprocess.run(command, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True, capture_output=True)


def deploy(root: Path) -> str:
    """TOPOLOGY as a new project in root, compiled and upgraded to on a SQLite file: its URL."""
    cli = (sys.executable, "-m", "sqltransport_schema.cli")
    run(*cli, "init", str(root), cwd=root)
    (root / "topology.yaml").write_text(TOPOLOGY, encoding="utf-8")
    run(*cli, "compile", "-m", "the console's screenshots", cwd=root)
    url = f"sqlite:///{root / 'bus.db'}"
    run(sys.executable, "-m", "alembic", "-x", f"url={url}", "upgrade", "head", cwd=root)
    return url


def fail(transport: Transport) -> None:
    base = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=3)  # the pages show times relative to now
    with transport.engine.begin() as conn:
        for i, (queue, exc, n) in enumerate(FAILURES):
            address = transport.queue(queue).address
            messages = []
            for j in range(n):
                headers = wire.standard_headers(message_id=f"{i}-{j}", enclosed_types=["Shop.OrderPlaced"], reply_to=address)
                failed = wire.error_headers(headers, exc, address, now=base + timedelta(minutes=7 * i + j))
                messages.append((b'{"orderId": %d, "lines": [1, 2]}' % j, wire.encode_headers(failed)))
            transport.queue("error").send_many(conn, messages)


class Api:
    """The console's JSON API, as a script uses it (docs/console.md)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.csrf = self.call("/api/csrf")["csrf"]

    def call(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        headers = {} if body is None else {"Content-Type": "application/json", "X-CSRF-Token": self.csrf}
        with urllib.request.urlopen(urllib.request.Request(self.base + path, data=data, headers=headers), timeout=60) as response:
            return json.loads(response.read())


def traffic(transport: Transport, api: Api) -> int:
    """Sales filling up then draining between the samples, one group of Billing's failures retried
    into Billing, one of Shipping's archived: the overview's chart shows lines that move. The archive
    job's id."""
    sales = transport.queue("Sales")
    job = 0
    for sample in range(SAMPLES):
        with transport.engine.begin() as conn:
            if sample < SAMPLES // 2:
                sales.send_many(conn, [(b"{}", wire.encode_headers({"NServiceBus.MessageId": f"s-{sample}-{k}"})) for k in range(4)])
            else:
                for _ in range(3):
                    sales.receive(conn)
        if sample == 2:
            api.call("/api/retry", {"filter": {"exception_type": "KeyError"}, "wait": True})
        if sample == 3:
            job = api.call(
                "/api/archive", {"filter": {"exception_type": "ValueError"}, "why": "the address service is retired", "wait": True}
            )["id"]
        time.sleep(1.1)
    while len(api.call("/api/overview")["samples"]) < SAMPLES:
        time.sleep(0.2)
    return job


def main() -> int:
    from playwright.sync_api import sync_playwright

    out = REPO / "docs" / "images"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        url = deploy(root)
        os.chdir(root)
        transport = Transport.from_database(make_engine(url), "alembic.ini")
        fail(transport)
        command = [
            sys.executable,
            "-m",
            "sqltransport_schema.cli",
            "console",
            "--url",
            url,
            "--bind",
            "127.0.0.1:0",
            "--sample-interval",
            "1",
        ]
        console = subprocess.Popen(command, cwd=root, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True)
        try:
            line = console.stderr.readline()
            base = "http://127.0.0.1:" + line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0]
            job = traffic(transport, Api(base))
            pages = {
                "overview": "/",
                "failed": "/failed",
                "messages": "/failed/messages?exception_type=TimeoutError",
                "message": None,
                "archive": "/archive",
                "job": f"/jobs/{job}",
                "log": "/log",
            }
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
                page = browser.new_page(viewport=VIEWPORT)
                for name, path in pages.items():
                    if path is None:
                        page.goto(base + pages["messages"])
                        page.locator("#messages tbody a").first.click()
                    else:
                        page.goto(base + path)
                    page.wait_for_load_state("load")
                    shot = {"path": str(out / f"console-{name}.png")}
                    if name == "overview":  # down to the depth chart (the topology's picture below it left out)
                        box = page.locator("#depth").bounding_box()
                        shot["clip"] = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": box["y"] + box["height"] + 12}
                        shot["full_page"] = True
                    page.screenshot(**shot)
                    print(f"wrote docs/images/console-{name}.png ({Path(shot['path']).stat().st_size // 1024} KiB)")
                browser.close()
        finally:
            transport.engine.dispose()
            console.terminate()
            console.communicate(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
