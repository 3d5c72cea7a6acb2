"""SQL Server DDL: golden scripts, per-version shapes, T-SQL syntax, offline scripts, quoting.

Sources of truth (their copies in tests/fixtures/, tests/fixtures/manifest.json names each source):
- seed 003: the transport's latest creation scripts (queue, subscriptions, delayed);
- transport-facts.md §1: the version history table and the version-1 DDL.
Every expected value below is written from those documents, never computed from
sqltransport_schema.versions.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from sqltransport_schema.engines.mssql import MSSQL
from sqltransport_schema.schema import Kind, SchemaName, TableName, TableSpec
from sqltransport_schema.versions import profile

from .support.projects import new_project
from .support.seeds import FIXTURES
from .support.tsql import (
    GO_LINE,
    HOSTILE,
    SqlTokenError,
    assert_parses,
    check_no_escape,
    normalized,
    parse_problems,
    placements,
    residue,
    statements,
    tokenize,
)

ENGINE = MSSQL()


def test_tokenizer_and_normalisation_behave():
    toks = tokenize("SELECT N'it''s', [a]]b] -- c\n/* d */ x")
    assert [(t.kind, t.value) for t in toks] == [
        ("word", "SELECT"),
        ("string", "it's"),
        ("punct", ","),
        ("ident", "a]b"),
        ("comment", "-- c"),
        ("comment", "/* d */"),
        ("word", "x"),
    ]
    with pytest.raises(SqlTokenError):
        tokenize("SELECT [a]]")
    with pytest.raises(SqlTokenError):
        tokenize("SELECT 'it''s")
    assert statements("IF  EXISTS (SELECT 1)\nRETURN;\nCREATE TABLE [x] ( [a] int );") == [
        "if exists ( select 1 )",
        "return",
        "create table x ( a int )",
    ]
    assert statements("RETURN") == statements("return;")


# =========================================================================== golden sources
SEED_KINDS = {"queue": Kind.QUEUE, "subscriptions": Kind.SUBSCRIPTIONS, "delayed": Kind.DELAYED}


def source_text(kind: str) -> str:
    """A golden script: seed 003's creation script of a kind, or the version-1 DDL ('v1'), as tests/fixtures holds it."""
    path = FIXTURES / ("mssql_v1_transport_facts.sql" if kind == "v1" else f"mssql_seed003_{kind}.sql")
    script = path.read_text(encoding="utf-8")
    if kind == "v1":
        assert script.startswith("IF NOT") and "CREATE TABLE [{0}].[{1}]" in script, script[:200]
    else:
        assert script.startswith("IF EXISTS (") and "CREATE TABLE {0} (" in script, script[:200]
    return script


# =========================================================================== 1. golden, latest version
LATEST_PLACEMENTS = [
    # (catalog, schema, table) -> {0} = [catalog].[schema].[table], {1} = [catalog]
    ("nservicebus", "dbo", "Sales"),
    ("nservicebus", "billing", "Orders.Delayed"),
    (None, "dbo", "Sales"),  # no catalog: `{1}.sys.objects` is rendered `sys.objects`
    (None, None, "SubscriptionRouting"),  # no schema either: the default schema dbo
]


def fill_seed(template: str, catalog: str | None, schema: str | None, table: str) -> str:
    parts = ([catalog] if catalog else []) + [schema or "dbo", table]
    qualified = ".".join(f"[{p}]" for p in parts)
    if catalog is None:
        assert "{1}.sys." in template
        template = template.replace("{1}.sys.", "sys.")
    else:
        template = template.replace("{1}", f"[{catalog}]")
    assert "{1}" not in template
    return template.replace("{0}", qualified)


@pytest.mark.parametrize("placement", LATEST_PLACEMENTS, ids=lambda p: ".".join(x or "-" for x in p))
@pytest.mark.parametrize("kind", list(SEED_KINDS))
def test_latest_creation_scripts_match_seed_003(placement, kind):
    catalog, schema, table = placement
    expected = fill_seed(source_text(kind), catalog, schema, table)
    spec = TableSpec(SEED_KINDS[kind], TableName(table, schema, catalog))
    # seed 003's subscription table is 5.0.1-6.3.8's (Endpoint nullable); 7.0+ declare it NOT NULL
    batches = ENGINE.create_table(spec, profile("6.3.8" if SEED_KINDS[kind] is Kind.SUBSCRIPTIONS else "9.1"))
    assert len(batches) == 1
    assert statements(batches[0]) == statements(expected)
    if catalog is None:
        assert "FROM sys.objects" in batches[0] and ".sys." not in batches[0]
    else:
        assert f"FROM [{catalog}].sys.objects" in batches[0]


@pytest.mark.parametrize("version", ["6.3.1", "7.0", "8.1"])
def test_queue_script_of_6_3_1_to_8_is_the_latest_one(version):
    # transport-facts §1: "7.x - 9.x: same DDL as 6.3.1"
    template = source_text("queue")
    spec = TableSpec(Kind.QUEUE, TableName("Sales", "dbo", "nservicebus"))
    (batch,) = ENGINE.create_table(spec, profile(version))
    assert statements(batch) == statements(fill_seed(template, "nservicebus", "dbo", "Sales"))


@pytest.mark.parametrize("version,not_null", [("5.0", False), ("6.3.8", False), ("7.0", True), ("9.1", True)])
def test_subscription_endpoint_column_is_not_null_from_7_0(version, not_null):
    # upstream-conformance §4: nullable as in seed 003 in 5.0.1-6.3.8, NOT NULL from 7.0.0
    (batch,) = ENGINE.create_table(TableSpec(Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting")), profile(version))
    text = normalized(batch)
    assert ("endpoint nvarchar ( 200 ) not null ," in text) is not_null
    assert ("endpoint nvarchar ( 200 ) ," in text) is not not_null
    assert "primary key clustered ( endpoint , topic )" in text


# =========================================================================== 2. golden, version 1
@pytest.mark.parametrize("schema,table", [("dbo", "Sales"), ("billing", "Orders.host-a"), (None, "error")])
@pytest.mark.parametrize("version", ["1.2", "1.0", "1.2.5"])
def test_version_1_script_matches_transport_facts(schema, table, version):
    template = source_text("v1")
    expected = template.replace("{0}", schema or "dbo").replace("{1}", table)
    spec = TableSpec(Kind.QUEUE, TableName(table, schema))
    batches = ENGINE.create_table(spec, profile(version))
    assert len(batches) == 1
    assert statements(batches[0]) == statements(expected)


# =========================================================================== 3. per-version shapes
# From transport-facts §1, corrected by upstream-conformance §9 (Index_Expires from 2.2.2, Headers
# varchar in 3.0.0-3.0.2). expires: None (no index), "plain", "filtered".
SHAPES = [
    # version  headers     Index_RowVersion  Index_Expires try/catch applock 3-part
    ("1.2",    "varchar",  "clustered",      None,       False,    False,  False),
    ("2.2.1",  "varchar",  "clustered",      None,       False,    False,  False),
    ("2.2.2",  "varchar",  "clustered",      "plain",    False,    False,  False),
    ("2.2.3",  "varchar",  "clustered",      "plain",    False,    False,  False),
    ("2.2.6",  "nvarchar", "clustered",      "plain",    False,    False,  False),
    ("3.0",    "varchar",  "clustered",      "plain",    False,    "nested", False),
    ("3.0.2",  "varchar",  "clustered",      "plain",    False,    "nested", False),
    ("3.0.3",  "nvarchar", "clustered",      "plain",    False,    "nested", False),
    ("3.1",    "nvarchar", "clustered",      "filtered", False,    True,   True),
    ("4.0",    "nvarchar", "clustered",      "filtered", False,    True,   True),
    ("4.3.1",  "nvarchar", "clustered",      "filtered", False,    True,   True),
    ("4.3.2",  "nvarchar", "nonclustered",   "filtered", False,    True,   True),
    ("5.0.2",  "nvarchar", "clustered",      "filtered", False,    True,   True),
    ("5.0.3",  "nvarchar", "nonclustered",   "filtered", False,    True,   True),
    ("6.0.0",  "nvarchar", "clustered",      "filtered", False,    True,   True),
    ("6.0.1",  "nvarchar", "nonclustered",   "filtered", False,    True,   True),
    ("6.3.0",  "nvarchar", "nonclustered",   "filtered", False,    True,   True),
    ("6.3.1",  "nvarchar", "nonclustered",   "filtered", True,     True,   True),
    ("7.0",    "nvarchar", "nonclustered",   "filtered", True,     True,   True),
    ("8.1",    "nvarchar", "nonclustered",   "filtered", True,     True,   True),
    ("9.1",    "nvarchar", "nonclustered",   "filtered", True,     True,   True),
]  # fmt: skip

# transport-facts §1: "Columns never changed" (name, type, NOT NULL?)
QUEUE_COLUMNS = [
    ("id", "uniqueidentifier", True),
    ("correlationid", "varchar ( 255 )", False),
    ("replytoaddress", "varchar ( 255 )", False),
    ("recoverable", "bit", True),
    ("expires", "datetime", False),
    ("headers", None, True),  # (n)varchar(max), per version
    ("body", "varbinary ( max )", False),
    ("rowversion", "bigint identity ( 1 , 1 )", True),
]


def table_columns(text: str) -> list[str]:
    """The comma-separated column definitions of the first CREATE TABLE in a normalised script."""
    tokens = text.split(" ")
    start = next(i for i in range(len(tokens) - 1) if tokens[i] == "create" and tokens[i + 1] == "table")
    opening = tokens.index("(", start)
    columns, current, depth = [], [], 0
    for token in tokens[opening + 1 :]:
        if token == "(":
            depth += 1
        elif token == ")":
            if depth == 0:
                break
            depth -= 1
        if token == "," and depth == 0:
            columns.append(" ".join(current))
            current = []
        else:
            current.append(token)
    columns.append(" ".join(current))
    return columns


@pytest.mark.parametrize("version,headers,rowversion,expires,try_catch,applock,three_part", SHAPES, ids=[s[0] for s in SHAPES])
def test_queue_shape_per_version(version, headers, rowversion, expires, try_catch, applock, three_part):
    spec = TableSpec(Kind.QUEUE, TableName("Sales", "dbo", "nsb"))
    (batch,) = ENGINE.create_table(spec, profile(version))
    text = normalized(batch)

    # columns: never changed, except the Headers type
    columns = table_columns(text)
    assert [c.split(" ")[0] for c in columns] == [c[0] for c in QUEUE_COLUMNS]
    for definition, (name, type_, not_null) in zip(columns, QUEUE_COLUMNS):
        type_ = type_ or f"{headers} ( max )"
        assert definition.startswith(f"{name} {type_}"), definition
        rest = definition[len(f"{name} {type_}") :].strip()
        assert rest == ("not null" if not_null else "") or (not not_null and rest == "null"), definition
    assert " primary key " not in text and " unique " not in text  # no key, no unique constraint on Id

    # Index_RowVersion: [RowVersion] ASC, but over the bare column where the applock scripts
    # cluster on it (upstream-conformance §4, create_queue A; 3.0.x's own form is not reproduced)
    nested = applock == "nested"  # 3.0.x: IF NOT EXISTS ... BEGIN with the applock inside (upstream-conformance §5)
    kinds = re.findall(r"create (clustered|nonclustered) index index_rowversion on [^(]*\( rowversion( asc)? \)", text)
    bare = applock and not nested and rowversion == "clustered"
    assert kinds == [(rowversion, "" if bare else " asc")]

    # Index_Expires
    found = re.findall(
        r"create (\w+) index index_expires on [^(]*\( expires (?:asc )?\) include \( id , rowversion \)( where expires is not null)?",
        text,
    )
    assert text.count("index_expires") == (0 if expires is None else 1)
    if expires is None:
        assert found == []
    else:
        assert found == [("nonclustered", " where expires is not null" if expires == "filtered" else "")]

    # installation guard
    assert text.count("begin try") == text.count("end try") == text.count("begin catch") == (1 if try_catch else 0)
    assert ("throw ;" in text) is try_catch
    assert text.count("exec sp_getapplock") == (1 if applock else 0)
    assert text.count("exec sp_releaseapplock") == (3 if try_catch else 1 if nested else 2 if applock else 0)
    assert ("if not exists ( select * from sys . objects" in text) is (not applock or nested)
    if not applock or nested:
        assert "on primary" in text  # ) ON [PRIMARY]; as in tag 1.2.5 and 3.0.x
    if nested:
        assert "@resource = 'dbo_sales_lock'" in text  # the raw schema and table, joined by _
        assert text.count("pad_index = off") == 2 and text.count("ignore_dup_key = off") == 1

    # names
    assert ("[nsb].[dbo].[Sales]" in batch) is three_part
    assert ("FROM [nsb].sys.objects" in batch) is three_part
    if not three_part:
        assert "nsb" not in batch and "[dbo].[Sales]" in batch


@pytest.mark.parametrize("version", ["3.1", "5.0.3", "6.3.0", "6.3.1", "9.1"])
def test_delayed_and_subscription_tables_follow_the_guard_style(version):
    try_catch = version in ("6.3.1", "9.1")
    for kind in (Kind.DELAYED, Kind.SUBSCRIPTIONS):
        (batch,) = ENGINE.create_table(TableSpec(kind, TableName("T", "dbo", "nsb")), profile(version))
        text = normalized(batch)
        assert text.count("exec sp_getapplock") == 1
        assert ("begin try" in text) is try_catch
        assert "[nsb].[dbo].[T]" in batch


# =========================================================================== 4. sqlfluff (tsql)
CREATE_VERSIONS = ["1.2", "2.2.3", "2.2.6", "3.0", "3.1", "4.1", "4.3.2", "6.3.0", "6.3.1", "9.1"]
CHANGES = [("1.2", "9.1"), ("4.0", "9.1"), ("9.1", "4.0"), ("2.2.3", "3.1"), ("9.1", "1.2")]


def _emitted_batches() -> dict[str, list[str]]:
    """Every distinct batch the engine emits for plain names: sql -> the operations that emit it."""
    found: dict[str, list[str]] = {}

    def add(label, batches):
        assert batches, f"{label} emits nothing"
        for i, sql in enumerate(batches):
            found.setdefault(sql, []).append(f"{label}#{i}")

    for version in CREATE_VERSIONS:
        v = tuple(int(x) for x in version.split("."))
        for catalog in (None, "nsb"):
            where = f"{version}-{catalog or 'nocat'}"
            add(f"queue-{where}", ENGINE.create_table(TableSpec(Kind.QUEUE, TableName("Sales", "dbo", catalog)), profile(version)))
            if v >= (3, 1):
                add(
                    f"delayed-{where}",
                    ENGINE.create_table(TableSpec(Kind.DELAYED, TableName("Sales.Delayed", "dbo", catalog)), profile(version)),
                )
            if v >= (5, 0):
                add(
                    f"subs-{where}",
                    ENGINE.create_table(TableSpec(Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting", None, catalog)), profile(version)),
                )
            if v >= (4, 1):
                spec = TableSpec(Kind.QUEUE, TableName("Billing", "billing", catalog), body_string=True)
                add(f"queue+bodystring-{where}", ENGINE.create_table(spec, profile(version)))
                add(f"add_body_string-{where}", ENGINE.add_body_string(spec, profile(version)))
                add(f"drop_body_string-{where}", ENGINE.drop_body_string(spec, profile(version)))
    for catalog in (None, "nsb"):
        for kind in Kind:
            spec = TableSpec(kind, TableName("Sales", "dbo", catalog))
            add(f"drop-guarded-{kind.value}-{catalog}", ENGINE.drop_table(spec, profile("9.1"), discard_messages=False))
            add(f"drop-discarding-{kind.value}-{catalog}", ENGINE.drop_table(spec, profile("9.1"), discard_messages=True))
        for old, new in CHANGES:
            spec = TableSpec(Kind.QUEUE, TableName("Sales", "dbo", catalog))
            add(f"change-{old}-{new}-{catalog}", ENGINE.change_queue_version(spec, profile(old), profile(new)))
        add(f"create_schema-{catalog}", ENGINE.create_schema(SchemaName("billing", catalog)))
        add(f"drop_schema-{catalog}", ENGINE.drop_schema(SchemaName("billing", catalog)))
    return found


EMITTED = _emitted_batches()


def test_the_batch_collection_covers_every_operation():
    labels = " ".join(label for labels in EMITTED.values() for label in labels)
    for needle in ("queue-1.2", "queue-9.1", "delayed-", "subs-", "add_body_string", "drop_body_string",
                   "drop-guarded", "drop-discarding", "change-1.2-9.1", "change-4.0-9.1", "change-9.1-4.0",
                   "change-2.2.3-3.1", "create_schema", "drop_schema"):  # fmt: skip
        assert needle in labels, needle
    # change_queue_version emits one batch per differing aspect
    spec = TableSpec(Kind.QUEUE, TableName("Sales"))
    assert len(ENGINE.change_queue_version(spec, profile("1.2"), profile("9.1"))) == 3
    assert len(ENGINE.change_queue_version(spec, profile("9.1"), profile("4.0"))) == 1
    assert len(ENGINE.change_queue_version(spec, profile("2.2.3"), profile("3.1"))) == 2
    assert ENGINE.change_queue_version(spec, profile("9.1"), profile("7.0")) == []


@pytest.mark.parametrize("sql", list(EMITTED), ids=[labels[0] for labels in EMITTED.values()])
def test_emitted_batch_parses_as_tsql(sql):  # each distinct batch is parsed once
    assert_parses(sql, ", ".join(EMITTED[sql]))


def test_the_sqlfluff_check_detects_broken_sql():
    (batch,) = ENGINE.create_table(TableSpec(Kind.QUEUE, TableName("Sales")), profile("9.1"))
    assert parse_problems(batch) == []
    broken = batch.replace("NOT NULL\n    );", "NOT NULL\n    ;", 1)  # CREATE TABLE ( ... without its )
    assert broken != batch and parse_problems(broken)
    assert parse_problems(batch.replace("IDENTITY(1,1)", "IDENTITY(1,1", 1))


# =========================================================================== 5. offline script (alembic --sql)
OFFLINE_TOPOLOGY = """\
transport_version: "9.1"
engines: [mssql]
subscriptions:
  table: SubscriptionRouting
endpoints:
  - name: Sales
    instances: [host-a]
  - name: Billing
    schema: billing
    body_string: true
  - name: Shipping
    catalog: logistics
queues:
  - name: error
  - name: audit
"""


def compile_and_render_offline(root: Path, topology: str) -> tuple[str, str]:
    """(offline mssql script, head revision id) of a fresh project compiled from `topology`."""
    project = new_project(root)
    project.write_topology(topology)
    assert project.compile("x") == 0
    assert len(project.revisions()) == 1
    return project.offline("mssql://"), project.head()


def without_comment_lines(chunk: str) -> str:
    return "\n".join(line for line in chunk.splitlines() if not line.startswith("--")).strip()


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    return compile_and_render_offline(tmp_path_factory.mktemp("offline") / "project", OFFLINE_TOPOLOGY)


def test_offline_script_separates_batches_with_go(offline):
    script, _ = offline
    chunks = GO_LINE.split(script)
    assert len(chunks) > 10
    assert chunks[-1].strip() == ""  # the script ends with GO
    bodies = {without_comment_lines(c) for c in chunks}
    v = profile("9.1")
    expected = []
    for spec in (
        TableSpec(Kind.QUEUE, TableName("Sales")),
        TableSpec(Kind.QUEUE, TableName("Sales.host-a")),
        TableSpec(Kind.QUEUE, TableName("Billing", "billing"), body_string=True),
        TableSpec(Kind.QUEUE, TableName("Shipping", None, "logistics")),
        TableSpec(Kind.QUEUE, TableName("error")),
        TableSpec(Kind.QUEUE, TableName("audit")),
        TableSpec(Kind.DELAYED, TableName("Sales.Delayed")),
        TableSpec(Kind.DELAYED, TableName("Billing.Delayed", "billing"), body_string=True),
        TableSpec(Kind.DELAYED, TableName("Shipping.Delayed", None, "logistics")),
        TableSpec(Kind.SUBSCRIPTIONS, TableName("SubscriptionRouting")),
    ):
        expected += ENGINE.create_table(spec, v)
    expected += ENGINE.create_schema(SchemaName("billing"))
    # 10 tables, the BodyString column of Billing's queue and of its delayed table (the transport's
    # option covers both), the schema
    assert len(expected) == 13
    body_strings = [batch for batch in expected if "ADD BodyString" in batch]
    assert len(body_strings) == 2 and "ALTER TABLE [billing].[Billing.Delayed] ADD" in body_strings[1].replace("\n", " ")
    for batch in expected:
        assert batch.strip() in bodies, f"not a GO-delimited batch of its own:\n{batch}"
    for chunk in chunks:  # never two guarded scripts in one batch (RETURN would skip the second)
        assert chunk.count("sp_getapplock") <= 1


@pytest.mark.parametrize(
    "qualified",
    ["[dbo].[Sales]", "[dbo].[Sales.host-a]", "[dbo].[error]", "[dbo].[audit]", "[billing].[Billing]", "[logistics].[dbo].[Shipping]"],
)
def test_offline_script_names_every_queue(offline, qualified):
    script, _ = offline
    chunks = GO_LINE.split(script)
    comment = f"-- Create queue {qualified} (transport 9.1)"
    owning = [i for i, c in enumerate(chunks) if comment in c.splitlines()]
    assert len(owning) == 1, comment
    # the script's own hold of the installer lock, its guard, then the transport's batch
    assert f"EXEC @lock = sp_getapplock @Resource = '{qualified}_lock'" in chunks[owning[0]]
    chunk = chunks[owning[0] + 2]
    assert f"CREATE TABLE {qualified} (" in chunk
    assert f"EXEC sp_getapplock @Resource = '{qualified}_lock', @LockMode = 'Exclusive'" in chunk
    assert "BEGIN TRY" in chunk and "BEGIN CATCH" in chunk and "THROW;" in chunk


def test_offline_script_stamps_alembic_version(offline):
    script, head = offline
    assert "IF OBJECT_ID(N'alembic_version', N'U') IS NULL\nBEGIN\nCREATE TABLE alembic_version (" in script  # repeatable
    stamp = f"IF NOT EXISTS (SELECT 1 FROM alembic_version)\n    INSERT INTO alembic_version (version_num) VALUES ('{head}');"
    assert script.count(stamp) == 1
    assert script.index(stamp) > script.rindex("-- Create ")
    assert script.lstrip().startswith("SET ANSI_NULLS, ANSI_PADDING")  # the session options its DDL needs, first
    assert "SET XACT_ABORT ON;\n\nGO\n\nBEGIN TRANSACTION;" in script  # an error stops it under any client
    assert re.search(r"^COMMIT;\s*^GO\s*^SET NOEXEC OFF;\s*^GO\s*\Z", script, re.M)


def test_offline_script_batches_parse_as_tsql(offline):
    script, _ = offline
    chunks = [c for c in GO_LINE.split(script) if c.strip()]
    assert len(chunks) >= 14
    for i, chunk in enumerate(chunks):
        assert_parses(chunk, f"offline batch {i}")


# =========================================================================== 6. hostile names
# Identifiers and literals the engine writes itself (everything else must be a name part).
FIXED_IDENTIFIERS = {
    "Id", "CorrelationId", "ReplyToAddress", "Recoverable", "Expires", "Headers", "Body", "RowVersion",
    "uniqueidentifier", "varchar", "nvarchar", "bit", "datetime", "varbinary", "bigint",
    "PRIMARY", "Index_RowVersion", "Index_Expires", "Index_Due", "Due",
}  # fmt: skip
FIXED_LITERALS = {
    "U", "Exclusive", "BodyString", "Headers", "varchar", "nvarchar", "Index_RowVersion", "Index_Expires",
    "CLUSTERED", "NONCLUSTERED", "Index_DispatchedAt",  # the outbox's index, checked by name in sys.indexes
}  # fmt: skip


@pytest.mark.parametrize(
    "name,quoted,literal",
    [
        ("Sales", "[Sales]", "Sales"),
        ("Sales.Delayed", "[Sales.Delayed]", "Sales.Delayed"),
        ("a b", "[a b]", "a b"),
        ("a]b", "[a]]b]", "a]b"),
        ("a]]b", "[a]]]]b]", "a]]b"),
        ("]", "[]]]", "]"),
        ('a"b', '[a"b]', 'a"b'),
        ("a'b", "[a'b]", "a''b"),
        ("''", "['']", "''''"),
        ("a;b", "[a;b]", "a;b"),
        ("Fäktura", "[Fäktura]", "Fäktura"),
        ("a--b", "[a--b]", "a--b"),
        ("a/*b", "[a/*b]", "a/*b"),
    ],
)
def test_quote_and_literal_text(name, quoted, literal):
    assert ENGINE.quote(name) == quoted
    assert ENGINE.literal_text(name) == literal
    assert ENGINE.literal(name) == f"'{literal}'"
    (token,) = tokenize(quoted)
    assert (token.kind, token.value) == ("ident", name)
    (token,) = tokenize(f"N'{literal}'")
    assert (token.kind, token.value) == ("string", name)


def _hostile_batches(name: TableName) -> list[tuple[str, str, list[str]]]:
    """(label, version whose names the batches use, batches) for every operation on a table named `name`."""
    out = []
    for version in ("1.2", "3.0", "4.1", "9.1"):
        for kind in Kind:
            spec = TableSpec(kind, name, body_string=kind is Kind.QUEUE and version in ("4.1", "9.1"))
            out.append((f"create-{kind.value}-{version}", version, ENGINE.create_table(spec, profile(version))))
    spec = TableSpec(Kind.QUEUE, name)
    out.append(("add_body_string", "9.1", ENGINE.add_body_string(spec, profile("9.1"))))
    out.append(("drop_body_string", "9.1", ENGINE.drop_body_string(spec, profile("9.1"))))
    out.append(("drop-guarded", "9.1", ENGINE.drop_table(spec, profile("9.1"), False)))
    out.append(("drop-discarding", "9.1", ENGINE.drop_table(spec, profile("9.1"), True)))
    for old, new in CHANGES:
        out.append((f"change-{old}-{new}", new, ENGINE.change_queue_version(spec, profile(old), profile(new))))
    return out


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_table_names_never_escape_quoting(hostile):
    for name in placements(hostile):
        parts = {p for p in (name.table, name.schema, name.catalog) if p is not None}
        identifiers = FIXED_IDENTIFIERS | parts
        literals = set(FIXED_LITERALS)
        for prof in (profile("1.2"), profile("9.1")):  # two-part and three-part
            qualified = ENGINE.qualified(name, prof)
            # the qualified name is the quoted parts joined by dots, and reads back as those parts
            assert [t.value for t in tokenize(qualified) if t.kind == "ident"] == ([name.catalog] if prof.three_part_names else []) + [
                name.schema,
                name.table,
            ]
            literals |= {qualified, qualified + "_lock", ENGINE.refusal(TableSpec(Kind.QUEUE, name), prof)}
        literals.add(f"{name.schema or 'dbo'}_{name.table}_lock")  # 3.0.x: the raw names joined by _
        for label, version, batches in _hostile_batches(name):
            assert batches, label
            qualified = ENGINE.qualified(name, profile(version))
            for sql in batches:
                check_no_escape(sql, f"{label} {name}", identifiers, literals)
                # the name inside N'...' is the quoted name with every ' doubled
                assert f"OBJECT_ID(N'{ENGINE.literal_text(qualified)}'" in sql, f"{label} {name}"
                if "'" in qualified:
                    assert qualified.replace("'", "''") in sql


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("catalog", [None, "nsb", "Alpha'Cat]Omega"])
def test_hostile_schema_names_never_escape_quoting(hostile, catalog):
    schema = SchemaName(hostile, catalog)
    identifiers = {hostile} | ({catalog} if catalog else set())
    for verb, batches in (("CREATE SCHEMA", ENGINE.create_schema(schema)), ("DROP SCHEMA", ENGINE.drop_schema(schema))):
        (sql,) = batches
        statement = f"{verb} {ENGINE.quote(hostile)}"
        check_no_escape(sql, verb, identifiers, {hostile, statement})
        # the dynamic statement inside N'...' is itself quoted correctly
        check_no_escape(statement, f"{verb} (dynamic)", {hostile}, set())
        assert f"N'{ENGINE.literal_text(statement)}'" in sql


@pytest.mark.parametrize("hostile", [h for h in HOSTILE if "]" not in h])
def test_hostile_names_without_brackets_parse_as_tsql(hostile):
    # sqlfluff wrongly rejects `]]` inside bracketed names, so those are left out here.
    name = TableName(hostile, hostile, hostile)
    for kind in Kind:
        for sql in ENGINE.create_table(TableSpec(kind, name, body_string=kind is Kind.QUEUE), profile("9.1")):
            assert_parses(sql, f"create {kind.value} {hostile!r}")
    for sql in ENGINE.drop_table(TableSpec(Kind.QUEUE, name), profile("9.1"), False) + ENGINE.create_schema(SchemaName(hostile, hostile)):
        assert_parses(sql, f"drop/schema {hostile!r}")


def test_a_newline_in_a_name_cannot_break_out_of_offline_comments(tmp_path):
    """Topologies refuse control characters; a hand-written operation still cannot escape its comment."""
    from sqltransport_schema import topology as topology_module

    with pytest.raises(topology_module.TopologyError, match="control character"):
        topology_module.loads('transport_version: "9.1"\nqueues:\n  - name: "Alpha\\nDROP TABLE Victim --"\n')

    from alembic.migration import MigrationContext
    from alembic.operations import Operations
    from sqlalchemy.dialects import mssql as mssql_dialect

    import sqltransport_schema.migrate  # noqa: F401

    buffer = io.StringIO()
    context = MigrationContext.configure(dialect=mssql_dialect.dialect(), opts={"as_sql": True, "output_buffer": buffer})
    Operations(context).create_queue("Alpha\nDROP TABLE Victim --", schema="dbo", version="9.1")
    script = buffer.getvalue()
    for chunk in GO_LINE.split(script):
        assert "victim" not in residue(chunk, comments=False).casefold(), chunk
    assert "-- Create queue [dbo].[Alpha\\nDROP TABLE Victim --]" in script


def test_rename_index_names_the_index_by_table_and_passes_the_new_name_as_it_is():
    """sp_rename (autogenerate's fix for an index under an earlier name): the index as
    [schema].[table].[index] in a literal, the new name unbracketed, another catalog's procedure."""
    (sql,) = ENGINE.rename_index(TableName("Sales_OrderSaga", "dbo", "nsb"), "old'x", "Index_Correlation_OrderId")
    assert sql == "EXEC [nsb].sys.sp_rename N'[dbo].[Sales_OrderSaga].[old''x]', N'Index_Correlation_OrderId', N'INDEX';"
    (plain,) = ENGINE.rename_index(TableName("Sales_OrderSaga"), "a", "b")
    assert plain == "EXEC sp_rename N'[dbo].[Sales_OrderSaga].[a]', N'b', N'INDEX';"
    assert parse_problems(sql) == [] and parse_problems(plain) == []
