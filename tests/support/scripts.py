"""DBA scripts as the tests write and run them: `script` to one file or split by endpoint, run on PostgreSQL."""

from __future__ import annotations

from sqltransport_schema import cli


def script(project, tmp_path, engine: str, *extra: str) -> str:
    out = tmp_path / f"deploy-{engine}.sql"
    argv = ["script", "--engine", engine, "-c", str(project.ini), "--topology", str(project.topology), "-o", str(out), *extra]
    assert cli.main(argv) == 0
    return out.read_text(encoding="utf-8-sig")  # SQL Server's files open with a byte-order mark


def run_pg(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as connection:
        connection.execute(sql)


def split(project, tmp_path, engine: str, *extra: str) -> dict[str, str]:
    folder = tmp_path / f"split-{engine}"
    argv = ["script", "--engine", engine, "-c", str(project.ini), "--topology", str(project.topology), "--split", str(folder), *extra]
    assert cli.main(argv) == 0
    return {path.name: path.read_text(encoding="utf-8-sig") for path in sorted(folder.iterdir())}
