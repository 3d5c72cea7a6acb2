"""Alembic's offline (--sql) output made safe to run twice: its alembic_version statements rewritten
into guarded ones, and on SQL Server a guard batch after each batch, so that nothing runs after an
error. `alembic upgrade --sql` (migrate.env installs RepeatableStamps) and `script` both write
through it."""

from __future__ import annotations

import re
from typing import TextIO

from .. import errors

ENGINES = {"mssql": "mssql://", "postgresql": "postgresql://"}

_REV = r"'((?:[^']|'')+)'"


class ScriptError(errors.UsageError):
    """A script that cannot be written as asked (engine, revision range, topology file, database)."""


def make_idempotent(text: str, engine: str) -> str:
    """Rewrite Alembic's alembic_version statements in `text` into guarded, repeatable ones."""
    if engine not in ENGINES:
        raise ScriptError(f"unknown engine {engine!r}")
    from .. import engines as engine_registry

    dialect = engine_registry.get(engine)
    script = dialect.script
    insert = re.compile(script.ALEMBIC_FIRST_STAMP.replace("{rev}", _REV))
    update = re.compile("^" + re.escape(script.ALEMBIC_RESTAMP).replace(r"\{new\}", _REV).replace(r"\{old\}", _REV) + "$")
    version_table = script.ALEMBIC_VERSION_TABLE
    out = []
    for line in text.split("\n"):
        m_insert, m_update = insert.match(line), update.match(line)
        if m_insert:
            line = script.FIRST_STAMP.format(rev=m_insert.group(1))
        elif m_update:
            new, old = m_update.groups()
            line = script.RESTAMP.format(new=new, old=old)
        elif (
            "alembic_version" in line
            and line != script.ALEMBIC_VERSION_TABLE_START + " ("
            and not line.lstrip().startswith(("version_num", "CONSTRAINT", "--"))
        ):
            raise ScriptError(f"unexpected alembic_version statement in Alembic's output, not made idempotent: {line!r}")
        out.append(line)
    text = "\n".join(out)
    created = text.count(version_table)
    if created != text.count(script.ALEMBIC_VERSION_TABLE_START):
        raise ScriptError("Alembic's output creates alembic_version in a form this tool does not know; not rewritten")
    if created > 1:
        raise ScriptError("Alembic's output creates alembic_version more than once")
    if created:
        text = text.replace(version_table, script.guard_version_table(version_table), 1)
    return text


class RepeatableStamps:
    """Alembic's offline output of an upgrade as it is written: its alembic_version statements made
    repeatable (make_idempotent), and on an engine that needs it (SQL Server) the engine's guard
    batch after each batch of the transaction, so that nothing runs after an error
    (`Script.BATCH_GUARD`). `alembic upgrade --sql` and `script` share it; migrate.env installs it,
    and passes text through unchanged until `rewrite_for(engine)` (a downgrade's stays Alembic's).
    Alembic writes each statement, and each batch separator, in one write(): each is rewritten whole."""

    def __init__(self, stream: TextIO, engine: str | None = None) -> None:
        self.stream, self.engine, self.guard = stream, None, None
        self.in_transaction = False
        if engine is not None:
            self.rewrite_for(engine)

    def rewrite_for(self, engine: str) -> None:
        from .. import engines as engine_registry

        self.engine, self.guard = engine, engine_registry.get(engine).script.BATCH_GUARD

    def write(self, text: str) -> int:
        if self.engine is None:
            self.stream.write(text)
            return len(text)
        out = make_idempotent(text, self.engine)
        if text.startswith(("BEGIN", "COMMIT")):
            self.in_transaction = text.startswith("BEGIN")
        elif self.guard and self.in_transaction and text.strip() == "GO":
            out += self.guard
        self.stream.write(out)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
