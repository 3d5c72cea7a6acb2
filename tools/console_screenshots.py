"""The screenshots of docs/console.md: the example topology deployed on a throwaway SQLite file, its
error queue given failures of three handlers, `sqltransport-schema console` started on it, and each
page shot by Debian's chromium through Playwright (the console extra and `pip install playwright`).

    .venv/bin/python tools/console_screenshots.py   # writes docs/images/console-*.png
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqltransport_schema import wire  # noqa: E402
from sqltransport_schema.db import make_engine  # noqa: E402
from sqltransport_schema.runtime.transport import Transport  # noqa: E402

PAGES = {"overview": "/", "failed": "/failed", "messages": "/failed/messages?exception_type=TimeoutError", "message": None}
FAILURES = [
    ("Sales", TimeoutError("database timeout"), 12),
    ("Billing", KeyError("customer 42"), 5),
    ("Shipping", ValueError("no address"), 2),
]


def main() -> int:
    from playwright.sync_api import sync_playwright

    out = REPO / "docs" / "images"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        for name in ("alembic.ini", "topology.yaml"):
            shutil.copy(REPO / name, root)
        shutil.copytree(REPO / "migrations", root / "migrations")
        url = f"sqlite:///{root / 'bus.db'}"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run(
            [sys.executable, "-m", "alembic", "-x", f"url={url}", "upgrade", "head"], cwd=root, env=env, check=True, capture_output=True
        )
        os.chdir(root)
        transport = Transport.from_database(make_engine(url), "alembic.ini")
        base = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
        with transport.engine.begin() as conn:
            for i, (queue, exc, n) in enumerate(FAILURES):
                address = transport.queue(queue).address
                messages = []
                for j in range(n):
                    headers = wire.standard_headers(message_id=f"{i}-{j}", enclosed_types=["Shop.OrderPlaced"], reply_to=address)
                    failed = wire.error_headers(headers, exc, address, now=base + timedelta(minutes=7 * i + j))
                    messages.append((b'{"orderId": %d, "lines": [1, 2]}' % j, wire.encode_headers(failed)))
                transport.queue("error").send_many(conn, messages)
        transport.engine.dispose()
        command = [sys.executable, "-m", "sqltransport_schema.cli", "console", "--url", url, "--bind", "127.0.0.1:0"]
        console = subprocess.Popen(command, cwd=root, env=env, stderr=subprocess.PIPE, text=True)
        try:
            line = console.stderr.readline()
            address = "http://127.0.0.1:" + line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1200, "height": 800})
                for name, path in PAGES.items():
                    if path is None:
                        page.goto(address + PAGES["messages"])
                        page.locator("#messages tbody a").first.click()
                    else:
                        page.goto(address + path)
                    page.wait_for_load_state("load")
                    page.screenshot(path=str(out / f"console-{name}.png"), full_page=False)
                    print(f"wrote docs/images/console-{name}.png")
                browser.close()
        finally:
            console.terminate()
            console.communicate(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
