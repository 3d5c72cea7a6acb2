"""No output carries the database password (issue 26): a scripted sequence of the commands a team
runs, each given a URL with a password (a PostgreSQL role of its own, over 127.0.0.1), through
success, every kind of refusal, `--debug` and runtime errors. The password is found in no stdout or
stderr and in no file written to the project folder or the temporary folder; a suggested rerun shows
the URL masked (`-x 'url=postgresql://user:***@...'`), or leaves it where the user gave it
(SQLTRANSPORT_URL)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from .support import warm
from .support.databases import PG_ADMIN_URL
from .support.messages import insert_message
from .support.projects import REPO
from .support.topology import TWO_INSTANCES as TOPOLOGY

BIN = Path(sys.executable).parent


@pytest.fixture
def password_url(pg_url):
    """(URL of the test database for a role that logs in with a password, the password)."""
    role = f"sqlts_pw_{uuid.uuid4().hex[:8]}"
    password = f"S3cretPw{uuid.uuid4().hex[:10]}"
    database = pg_url.rsplit("/", 1)[1]
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        connection.exec_driver_sql(f'ALTER DATABASE "{database}" OWNER TO {role}')
    try:
        yield f"postgresql://{role}:{password}@127.0.0.1:5432/{database}", password
    finally:
        owner = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
        with owner.connect() as connection:
            connection.exec_driver_sql(f"REASSIGN OWNED BY {role} TO postgres")
            connection.exec_driver_sql(f"DROP OWNED BY {role}")
        owner.dispose()
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP ROLE {role}")
        admin.dispose()


class Session:
    """Commands run as a user runs them, in the project folder, every output kept for the scan."""

    def __init__(self, project, tmp: Path) -> None:
        self.project = project
        self.tmp = tmp
        self.outputs: list[tuple[str, str]] = []

    def run(self, program: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        environ = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(self.tmp), **(env or {})}
        if not env or "SQLTRANSPORT_URL" not in env:
            environ.pop("SQLTRANSPORT_URL", None)
        command = [warm.program(program), *args]
        result = subprocess.run(command, cwd=self.project.root, env=environ, capture_output=True, text=True, timeout=300, check=False)
        self.outputs.append((" ".join(args[:4]), result.stdout + result.stderr))
        return result


def test_no_command_prints_or_writes_the_password(project, password_url, tmp_path):
    url, password = password_url
    masked = "'url=" + url.replace(password, "***") + "'"  # as the shell takes it (shlex.quote)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    s = Session(project, tmp)
    project.write_topology(TOPOLOGY)
    assert s.run("sqltransport-schema", "compile", "-m", "initial").returncode == 0

    assert s.run("sqltransport-schema", "adopt", "--url", url, "--dry-run").returncode == 1  # the plan for an empty database
    assert s.run("alembic", "-x", f"url={url}", "upgrade", "head").returncode == 0
    assert s.run("alembic", "-x", f"url={url}", "current").returncode == 0
    assert s.run("sqltransport-schema", "check", "--url", url).returncode == 0
    assert s.run("sqltransport-schema", "check", "--url", url, "--format", "json").returncode == 0
    assert s.run("sqltransport-schema", "--debug", "check", "--url", url).returncode == 0
    assert s.run("sqltransport-schema", "status", "--url", url).returncode == 0
    assert s.run("sqltransport-schema", "status", "--url", url, "--format", "json").returncode == 0
    assert s.run("sqltransport-schema", "retry", "--url", url, "--all").returncode == 0
    assert s.run("sqltransport-schema", "adopt", "--url", url, "--dry-run").returncode == 2  # managed already
    assert s.run("sqltransport-schema", "script", "--engine", "postgresql", "--url", url).returncode == 0

    # a retired instance whose queue holds a message: plan, refusal, lock-wait give-up
    insert_message(url, "Sales.host-b")
    project.write_topology(TOPOLOGY.replace("[host-a, host-b]", "[host-a]"))
    assert s.run("sqltransport-schema", "compile", "-m", "retire host-b").returncode == 0
    plan = s.run("sqltransport-schema", "pipeline", "plan", "--url", url)
    assert f"-x {masked} upgrade head" in plan.stdout, plan.stdout + plan.stderr
    refused = s.run("alembic", "-x", f"url={url}", "upgrade", "head")
    assert refused.returncode != 0 and f"alembic -x {masked} -x discard=Sales.host-b upgrade head" in refused.stdout
    refused = s.run("alembic", "upgrade", "head", env={"SQLTRANSPORT_URL": url})
    assert "FAILED: refusing to drop queue" in refused.stdout and "alembic -x discard=Sales.host-b upgrade head" in refused.stdout
    with psycopg.connect(url) as holder:
        holder.execute('LOCK TABLE "public"."Sales.host-b" IN ACCESS SHARE MODE')  # held until the block ends
        gave_up = s.run(
            "alembic",
            "-x",
            f"url={url}",
            "-x",
            "lock_timeout=100ms",
            "-x",
            "lock_retry_for=1s",
            "-x",
            "discard=Sales.host-b",
            "upgrade",
            "head",
        )
    assert "gave up waiting for a lock" in gave_up.stdout and f"-x {masked}" in gave_up.stdout
    assert gave_up.stdout.count("gave up waiting") == 1 and "gave up waiting" not in gave_up.stderr  # printed once
    assert s.run("alembic", "-x", f"url={url}", "-x", "discard=Sales.host-b", "upgrade", "head").returncode == 0

    # a protected queue's downgrade, --sql output, and errors of every kind
    refused = s.run("alembic", "-x", f"url={url}", "downgrade", "base")
    assert f"alembic -x {masked} -x drop_protected=error downgrade base" in refused.stdout
    assert s.run("alembic", "-x", f"url={url}", "upgrade", "head", "--sql").returncode == 0
    elsewhere = url.rsplit("/", 1)[0] + "/sqlts_no_such_database"
    assert s.run("sqltransport-schema", "--debug", "status", "--url", elsewhere).returncode != 0
    assert s.run("sqltransport-schema", "status", "--url", elsewhere).returncode == 2
    assert s.run("sqltransport-schema", "--debug", "adopt", "--url", elsewhere, "--dry-run").returncode != 0
    assert s.run("sqltransport-schema", "check", "--url", url.replace(":5432", ":notaport")).returncode == 2
    assert s.run("sqltransport-schema", "check", "--url", url.replace("postgresql", "nosuchdb")).returncode == 2
    assert s.run("alembic", "-x", f"url={url.replace(':5432', ':1')}", "upgrade", "head").returncode != 0
    assert s.run("alembic", "-x", f"url={elsewhere}", "upgrade", "head").returncode != 0
    # The URL comes from the environment, as a program takes it: a traceback quotes source lines (3.13 the `-c` one too)
    program = "import os; from sqltransport_schema import Transport; Transport.from_database(os.environ['APP_DATABASE_URL'])"
    assert s.run("python", "-c", program, env={"APP_DATABASE_URL": elsewhere}).returncode != 0
    program = (
        "import os; from sqltransport_schema import Transport; t = Transport.from_database(os.environ['APP_DATABASE_URL'])\n"
        "q = t.queue('NoSuchQueue')\nwith t.engine.begin() as c: q.send(c, b'x', {})"
    )
    assert s.run("python", "-c", program, env={"APP_DATABASE_URL": url}).returncode != 0

    shown = [f"{command}: ...{text[max(0, text.find(password) - 200) :][:400]}" for command, text in s.outputs if password in text]
    assert not shown, "\n\n".join(shown)
    written = [
        path for folder in (project.root, tmp) for path in folder.rglob("*") if path.is_file() and password.encode() in path.read_bytes()
    ]
    assert not written
    assert len(s.outputs) >= 25
