"""A PostgreSQL script of a change larger than one transaction's share of the server's lock table
(300 endpoints with 2 instances each, then `seq_type: bigserial`): it commits part way as the online
`alembic upgrade` does (migrate.execution._checkpoint), runs under `psql -v ON_ERROR_STOP=1` on a
server with the default max_locks_per_transaction, and a rerun after a failure part way finishes it."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from sqltransport_schema.migrate.execution import CHECKPOINT_NOTE

from .support.scripts import script, split
from .test_scripts import alembic_sql, stamped

pytestmark = [pytest.mark.slow, pytest.mark.postgresql]

ENDPOINTS = 300
MESSAGES = ["E000", "E000.a", "E001.b", "E150", "E298.a", "E299", "E299.b", "error"]  # queues a message waits in


def topology(seq_type: str) -> str:
    endpoints = "".join(f"  - name: E{i:03d}\n    instances: [a, b]\n" for i in range(ENDPOINTS))
    head = f'transport_version: "9.1"\nengines: [postgresql]\npostgresql:\n  seq_type: {seq_type}\n'
    return f"{head}endpoints:\n{endpoints}queues:\n  - name: error\n"


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg", "postgresql")


def psql(url: str, path) -> subprocess.CompletedProcess:
    command = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(path), plain(url)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def int_seqs(url: str) -> int:
    """The queues whose Seq is still int4."""
    with psycopg.connect(plain(url)) as connection:
        sql = "SELECT count(*) FROM information_schema.columns WHERE column_name = 'seq' AND data_type = 'integer'"
        return connection.execute(sql).fetchone()[0]


def messages(url: str) -> dict[str, int]:
    with psycopg.connect(plain(url)) as connection:
        return {queue: connection.execute(f'SELECT count(*) FROM "public"."{queue}"').fetchone()[0] for queue in MESSAGES}


@pytest.fixture
def big(project):
    project.write_topology(topology("serial"))
    assert project.compile("initial") == 0
    first = project.head()
    project.write_topology(topology("bigserial"))
    assert project.compile("bigserial") == 0
    return project, first


def test_a_script_larger_than_the_lock_table_commits_part_way_and_a_rerun_after_a_failure_finishes_it(big, pg_url, tmp_path):
    project, first = big
    with psycopg.connect(plain(pg_url)) as connection:
        assert connection.execute("SHOW max_locks_per_transaction").fetchone()[0] == "64"  # the default server
    built = tmp_path / "first.sql"
    built.write_text(script(project, tmp_path, "postgresql", "--to", first), encoding="utf-8")
    result = psql(pg_url, built)  # 1,201 tables from an empty database: part way too
    assert result.returncode == 0, result.stderr[-2000:]
    assert stamped(pg_url) == [first]
    with psycopg.connect(plain(pg_url)) as connection:
        for queue in MESSAGES:
            connection.execute(f"""INSERT INTO "public"."{queue}" (Id, Headers) VALUES (gen_random_uuid(), '{{}}')""")

    change = tmp_path / "change.sql"
    text = script(project, tmp_path, "postgresql", "--from", first)
    commits = text.count(CHECKPOINT_NOTE.split(":")[0])
    assert commits >= 2 and text.count("\nCOMMIT;\n") == commits + 1
    change.write_text(text, encoding="utf-8")
    # another session holds the last endpoint's queue: the script's ALTER gives up after its lock_timeout
    with psycopg.connect(plain(pg_url)) as holder:
        holder.execute('SELECT count(*) FROM "public"."E299"')  # an open transaction, holding the table
        result = psql(pg_url, change)
        assert result.returncode != 0 and "lock timeout" in result.stderr, result.stderr[-2000:]
        assert 0 < int_seqs(pg_url) < 2 * (3 * ENDPOINTS)  # committed part way: some queues changed, not all
        assert stamped(pg_url) == [first]  # the stamp comes only at the end
    result = psql(pg_url, change)  # the holder is gone: the same script finishes the change
    assert result.returncode == 0, result.stderr[-2000:]
    assert int_seqs(pg_url) == 0 and stamped(pg_url) == [project.head()]
    assert messages(pg_url) == dict.fromkeys(MESSAGES, 1)  # every message kept


def test_alembic_sql_output_of_the_same_change_passes_under_psql(big, pg_url, tmp_path):
    project, first = big
    built, change = tmp_path / "first.sql", tmp_path / "change.sql"
    built.write_text(alembic_sql(project, "postgresql://", first), encoding="utf-8")
    change.write_text(alembic_sql(project, "postgresql://", f"{first}:head"), encoding="utf-8")
    assert change.read_text(encoding="utf-8").count(CHECKPOINT_NOTE.split(":")[0]) >= 2
    for path in (built, change):
        result = psql(pg_url, path)
        assert result.returncode == 0, result.stderr[-2000:]
    assert int_seqs(pg_url) == 0 and stamped(pg_url) == [project.head()]


def test_split_parts_commit_where_the_whole_script_does(big, tmp_path):
    """Each part commits before an operation when the whole script committed since the part's last commit;
    the last file stays one transaction (its check and its stamps)."""
    project, first = big
    whole = script(project, tmp_path, "postgresql", "--from", first)
    files = split(project, tmp_path, "postgresql", "--from", first)
    names = list(files)
    assert names[0] == "000-shared.sql" and names[-1] == "999-alembic-version.sql" and len(names) == ENDPOINTS + 2
    note = CHECKPOINT_NOTE.split(":")[0]
    assert 1 <= sum(text.count(note) for text in files.values()) <= whole.count(note) * len(files)
    assert note not in files[names[-1]] and files[names[-1]].count("COMMIT;") == 1
    for name, text in files.items():
        assert text.count("BEGIN;\n") == text.count("COMMIT;\n"), name
