"""`status --serve` run as a user runs it, and a real Prometheus server (Debian's `prometheus`
package, which .ci/run installs) scraping it with the scrape configuration docs/monitoring ships.

Without the `prometheus`/`promtool` binaries their tests are skipped locally and fail under CI
(CI=true), as a missing database server's are."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from .databases import under_ci
from .projects import REPO
from .warm import program

MONITORING = REPO / "docs" / "monitoring"
SCRAPE_CONFIG = MONITORING / "prometheus.yml"
RULES = MONITORING / "sqltransport-alerts.yml"


def binary(name: str) -> str:
    """The path of a Prometheus binary: skipped locally when it is not installed, failed under CI."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (apt-get install prometheus; .ci/run installs it)"
        if under_ci():
            pytest.fail(f"{message}: required under CI")
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 10) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8")


class Exporter:
    """`sqltransport-schema status --url URL --serve 127.0.0.1:0 ...` in a subprocess; the port it chose
    is read from its first line."""

    def __init__(self, url: str, *args: str, background: bool = False, command: tuple[str, ...] = (), cwd: Path | None = None) -> None:
        """background: started as a non-interactive shell starts `command &`, with SIGINT ignored (POSIX);
        command: another exporter's words (`fleet`, `status`) in place of `status --url URL`, run in cwd."""
        words = list(command) or ["status", "--url", url]
        command_line = [program("sqltransport-schema"), *words, "--serve", "127.0.0.1:0", *args]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        if command:
            env.pop("SQLTRANSPORT_URL", None)  # a fleet's URLs are its file's
        ignore_sigint = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if background else None  # kept across exec
        self.process = subprocess.Popen(
            command_line, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=ignore_sigint, cwd=cwd
        )
        first = self.process.stderr.readline()
        assert "serving http://127.0.0.1:" in first, first + self.process.stderr.read()
        self.port = int(first.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
        self.base = f"http://127.0.0.1:{self.port}"

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """One scrape of /metrics, read by prometheus-client's own parser: samples by name."""
        from prometheus_client.parser import text_string_to_metric_families

        code, text = get(self.base + "/metrics")
        assert code == 200, text
        samples: dict[str, list] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
        return samples

    def stop(self, sig: int) -> tuple[int, str]:
        """Send `sig`; the exit code and what it wrote to stderr after its first line."""
        self.process.send_signal(sig)
        _, err = self.process.communicate(timeout=30)
        return self.process.returncode, err

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=30)


def one(samples: dict, name: str) -> float:
    [(_, value)] = samples[name]
    return value


def depths(samples: dict, kind: str = "queue") -> dict[str, float]:
    return {labels["table"]: value for labels, value in samples.get("sqltransport_table_depth", []) if labels["kind"] == kind}


class PrometheusServer:
    """A Prometheus server in a temporary folder, scraping `target` every second with the documented
    job (docs/monitoring/prometheus.yml, its target and intervals replaced) and the shipped rules."""

    def __init__(self, folder: Path, target: str) -> None:
        config = yaml.safe_load(SCRAPE_CONFIG.read_text(encoding="utf-8"))
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        [job] = config["scrape_configs"]
        job["scrape_timeout"] = "1s"
        job["static_configs"][0]["targets"] = [target]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(RULES, folder / RULES.name)
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.job = job["job_name"]
        self.base = f"http://127.0.0.1:{free_port()}"
        command = [
            binary("prometheus"),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address={self.base.removeprefix('http://')}",
            "--log.level=warn",
        ]
        self.log = (folder / "prometheus.log").open("w")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, cwd=folder)
        self._wait_ready(folder)

    def _wait_ready(self, folder: Path) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (folder / "prometheus.log").read_text()
            try:
                if get(self.base + "/-/ready", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"Prometheus not ready: {(folder / 'prometheus.log').read_text()}")

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant PromQL query through the HTTP API: (labels, value) of each series."""
        code, text = get(f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        answer = json.loads(text)
        assert code == 200 and answer["status"] == "success", text
        return [(item["metric"], float(item["value"][1])) for item in answer["data"]["result"]]

    def wait_for(self, expr: str, expected: object, key: str = "table", timeout: float = 60) -> dict[str, float]:
        """{series' `key` label: value} of `expr` once it equals `expected` (the last answer if it never does)."""
        deadline = time.monotonic() + timeout
        while True:
            found = {labels.get(key, ""): value for labels, value in self.query(expr)}
            if found == expected or time.monotonic() > deadline:
                return found
            time.sleep(0.5)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()
