"""Print every text the project writes for people and databases, into one folder per run.

A restructuring must leave these byte-identical: run it before and after, then `diff -r`.

    python tools/output_snapshot.py /tmp/before
    ... change the code ...
    python tools/output_snapshot.py /tmp/after && diff -r /tmp/before /tmp/after

It covers `statements` (every engine, every version boundary, text and JSON), `grants`,
`script` (whole and split), `alembic upgrade head --sql` on each engine, `compile` of a few
topology changes (revision ids and dates normalised), `validate` and `json-schema`, and the
`--help` of every command (help-<command>.txt; a renamed option or command shows there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TOOL = str(BIN / "sqltransport-schema")
ALEMBIC = str(BIN / "alembic")
VERSIONS = [
    "1.0",
    "2.0",
    "2.2.2",
    "2.2.3",
    "2.2.6",
    "3.0",
    "3.0.2",
    "3.1",
    "3.1.6",
    "4.0",
    "4.1",
    "4.1.2",
    "4.3.2",
    "5.0",
    "5.0.3",
    "6.0",
    "6.0.1",
    "6.2",
    "6.3",
    "6.3.1",
    "6.3.4",
    "7.0",
    "7.0.4",
    "8.0",
    "8.1",
    "8.1.13",
    "9.0",
    "9.0.2",
    "9.1",
]


def run(args: list[str], cwd: Path, env: dict | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"


def normalise(text: str) -> str:
    text = re.sub(r"(?<![0-9a-z])[0-9a-f]{12}(?![0-9a-z])", "<rev>", text)
    text = re.sub(r"/tmp/snapshot-\w+", "<work>", text)
    text = re.sub(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?", "<date>", text)
    text = re.sub(r"\d{8}_<rev>", "<file>", text)
    return re.sub(r'"seconds": [0-9.]+', '"seconds": <s>', text)


def save_help(out: Path) -> None:
    """The --help of the top level and of every command, as a 100-column terminal shows it."""
    env = {"COLUMNS": "100", "PYTHONPATH": str(ROOT)}
    code = "from sqltransport_schema.cli import build_parser, commands; print('\\n'.join(p for p, _ in commands(build_parser())))"
    progs = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, **env})
    names = [line.split()[1:] for line in progs.stdout.splitlines()]
    for words in [[], *names]:
        label = "-".join(words) or "top"
        (out / f"help-{label}.txt").write_text(run([TOOL, *words, "--help"], ROOT, env), encoding="utf-8")


def renormalise(folder: Path) -> None:
    """Apply today's normalisation to a snapshot taken by an earlier version of this script."""
    for path in folder.iterdir():
        path.write_text(normalise(path.read_text(encoding="utf-8")), encoding="utf-8")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="snapshot-"))
    try:
        for name in ("alembic.ini", "topology.yaml", "migrations"):
            src = ROOT / name
            (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
        shutil.rmtree(work / "migrations" / "versions" / "__pycache__", ignore_errors=True)

        def save(name: str, text: str) -> None:
            (out / name).write_text(normalise(text), encoding="utf-8")

        for engine in ("mssql", "postgresql", "sqlite"):
            for version in VERSIONS:
                for fmt in ("text", "json"):
                    extra = ["--catalog", "nsb", "--schema", "dbo"] if engine == "mssql" and version >= "3.1" else []
                    save(
                        f"statements-{engine}-{version}-{fmt}.txt",
                        run(
                            [
                                TOOL,
                                "statements",
                                "--engine",
                                engine,
                                "--transport-version",
                                version,
                                "--format",
                                fmt,
                                "--topics",
                                "2",
                                *extra,
                            ],
                            work,
                        ),
                    )
        for engine in ("mssql", "postgresql", "sqlite", "mysql", "oracle"):
            save(f"statements-sagas-{engine}.txt", run([TOOL, "statements", "--engine", engine, "--sagas"], work))
            save(f"grants-{engine}.txt", run([TOOL, "grants", "--engine", engine, "--login", "app"], work))
            save(f"grants-{engine}-sales.txt", run([TOOL, "grants", "--engine", engine, "--login", "app", "--endpoint", "Sales"], work))
            save(f"grants-{engine}-installer.txt", run([TOOL, "grants", "--engine", engine, "--login", "app", "--installer"], work))
        for engine in ("mssql", "postgresql"):
            save(f"script-{engine}.txt", run([TOOL, "script", "--engine", engine], work))
            split = work / f"split-{engine}"
            save(f"script-split-{engine}.txt", run([TOOL, "script", "--engine", engine, "--split", str(split)], work))
            for f in sorted(split.iterdir()):
                save(f"script-split-{engine}-{f.name}", f.read_text(encoding="utf-8"))
        for label, url in (("mssql", "mssql://"), ("postgresql", "postgresql://"), ("sqlite", "sqlite://"), ("mysql", "mysql://")):
            save(f"alembic-sql-{label}.txt", run([ALEMBIC, "-x", f"url={url}", "upgrade", "head", "--sql"], work))
            save(
                f"alembic-sql-down-{label}.txt",
                run([ALEMBIC, "-x", f"url={url}", "-x", "drop_protected=error,audit", "downgrade", "head:base", "--sql"], work),
            )
        save_help(out)
        save("validate.txt", run([TOOL, "validate"], work))
        save("json-schema.txt", run([TOOL, "json-schema"], work))
        save("compile-check-clean.txt", run([TOOL, "compile", "--check", "--format", "json"], work))
        topology = (work / "topology.yaml").read_text(encoding="utf-8")
        changes = [
            ("add-endpoint", topology.replace("queues:\n", "  - name: Returns\n    instances: [r1]\nqueues:\n")),
            (
                "version-up",
                topology.replace('transport_version: "9.1"', 'transport_version: "9.1"').replace("seq_type: serial", "seq_type: bigserial"),
            ),
            (
                "remove-instance",
                topology.replace("instances: [host-a, host-b]", "instances: [host-a]").replace(
                    "discard: []", "discard:\n  - name: Sales.host-b"
                ),
            ),
            ("invalid", topology.replace("name: Billing", "name: Bill ing\n    bogus: 1")),
        ]
        for label, text in changes:
            (work / "topology.yaml").write_text(text, encoding="utf-8")
            save(f"compile-{label}-check.txt", run([TOOL, "compile", "--check"], work))
            before = set((work / "migrations" / "versions").glob("*.py"))
            save(f"compile-{label}.txt", run([TOOL, "compile", "-m", label], work))
            for new in sorted(set((work / "migrations" / "versions").glob("*.py")) - before):
                save(f"compile-{label}-revision.py", new.read_text(encoding="utf-8"))
            for label2, url in (("mssql", "mssql://"), ("postgresql", "postgresql://"), ("sqlite", "sqlite://")):
                save(f"compile-{label}-alembic-sql-{label2}.txt", run([ALEMBIC, "-x", f"url={url}", "upgrade", "head", "--sql"], work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1] == "--renormalise":
        renormalise(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]))
