"""SQL Server runtime statements: golden texts, per-version forms, T-SQL syntax, parameters, quoting.

Sources of truth (their copies in tests/fixtures/, tests/fixtures/manifest.json names each source):
- seed 003, its "Runtime" part: the transport's runtime statements as documented, compared
  for the releases whose text it is (upstream-conformance §2-§3 say which);
- transport-facts.md §4: the latest forms, for the releases upstream-conformance gives them.
Where the two documents disagree, upstream-conformance.md wins (its §9); tests/test_mssql_fidelity.py
holds every release to its §2 matrix and to the digests of the upstream texts.
Every expected value below is written from those documents, never computed from
sqltransport_schema.versions (its BOUNDARIES or the profiles).

Normalisation of the seed text before comparing (asserted, so a changed seed shows):
- "Move Due Delayed Messages" ends in `ORDER BY Due";`: the `"` is the closing quote of the
  C# verbatim string the documentation page was cut from, not T-SQL. It is dropped.
Then both sides are compared token for token, ignoring whitespace, case and [brackets].
"""

from __future__ import annotations

import re

import pytest

from sqltransport_schema.engines.base import Dialect
from sqltransport_schema.engines.mssql import MSSQL
from sqltransport_schema.errors import UsageError
from sqltransport_schema.schema import TableName
from sqltransport_schema.statements import Statement
from sqltransport_schema.versions import profile

from .support.seeds import FIXTURES, SEED_RUNTIME, raw_seed_statement, runtime_text
from .support.tsql import HOSTILE, check_no_escape, normalized, parse_problems, placements, tokenize
from .support.tsql import assert_parses as support_assert_parses

ENGINE = MSSQL()

# =========================================================================== golden sources
FACTS_FIXTURE = FIXTURES / "mssql_transport_facts_s4.md"  # transport-facts §4, verbatim

STRAY_QUOTE = '";'  # end of "Move Due Delayed Messages" in seed 003 (see the module docstring)


def facts_text() -> str:
    text = FACTS_FIXTURE.read_text(encoding="utf-8")
    assert text.startswith("## 4. "), "the fixture is transport-facts.md §4"
    return text


def seed_statement(text: str, name: str) -> str:
    """A runtime statement of seed 003 with the documented normalisations applied."""
    statement = raw_seed_statement(text, name)
    if name == "move_due_delayed" and statement.endswith(STRAY_QUOTE):
        statement = statement[: -len(STRAY_QUOTE)]
    return statement


def fill(template: str, zero: str, one: str | None = None, catalog: str | None = None) -> str:
    """Fill {0} (and {1}) as the transport does: {0} inside '...' gets its quotes doubled."""
    text = template.replace("N'{0}'", "N'" + zero.replace("'", "''") + "'")
    text = text.replace("'{0}'", "'" + zero.replace("'", "''") + "'")
    text = text.replace("[catalog].sys.", "sys.")  # transport-facts §4 writes the catalog out
    if catalog is not None:
        text = re.sub(r"(?<![\w\].])sys\.", f"[{catalog}].sys.", text)
    text = text.replace("{0}", zero)
    if one is not None:
        text = text.replace("{1}", one)
    assert "{" not in text, text
    return text


def test_seed_normalisations_are_still_needed():
    text = runtime_text()
    move = raw_seed_statement(text, "move_due_delayed")
    assert move.endswith("ORDER BY Due" + STRAY_QUOTE), "seed 003's stray quote is gone: drop the normalisation"
    assert '"' not in seed_statement(text, "move_due_delayed")
    for name in SEED_RUNTIME:
        assert '"' not in seed_statement(text, name), name
    for name in ("check_expires_index", "check_headers_type"):
        raw = raw_seed_statement(text, name)
        assert "OBJECT_ID('{0}')" in raw and "{1}" not in raw and "FROM sys." in raw


# =========================================================================== 1. golden: seed 003 forms
def three_part(version: str) -> bool:  # transport-facts §1: 3-part names since 3.1
    return tuple(int(x) for x in version.split(".")) >= (3, 1)


def has_subscriptions(version: str) -> bool:  # transport-facts §3: subscriptions since 5.0
    return int(version.split(".")[0]) >= 5


def quoted(version: str, catalog: str | None, schema: str | None, table: str) -> str:
    parts = ([catalog] if catalog and three_part(version) else []) + [schema or "dbo", table]
    return ".".join(f"[{p}]" for p in parts)


PLACEMENTS = [("nsb", "dbo", "Sales"), (None, "billing", "Orders.host-a"), (None, None, "error")]
TOPIC_LISTS = {1: "@Topic_0", 3: "@Topic_0, @Topic_1, @Topic_2"}  # upstream-conformance §3
PEEK_N = 37

# (statement, releases whose text is seed 003's) — upstream-conformance §2-§3. Seed 003's move
# of due delayed messages (a column list, no READPAST on the next-due probe) is no release's.
SEED_FORMS = [
    ("peek", ["4.1.2", "5.0", "6.0", "6.0.1"]),  # D: 4.1.2-6.0.1
    ("purge_expired", ["4.0", "6.3.1", "9.1"]),  # B: 4.0.0-9.1.0
    ("purge_all", ["1.2", "4.0", "9.1"]),
    ("receive", ["4.1", "5.0", "6.3.8"]),  # C: 4.1.0-6.3.8
    ("send", ["4.1", "6.3.1"]),  # B: 4.1.0-6.3.8
    ("check_expires_index", ["3.1", "6.3.8"]),  # A: 3.1.0-6.3.8
    ("check_headers_type", ["2.2.6", "3.1", "9.1"]),
    ("subscribe", ["5.0", "6.3.1", "9.1"]),  # subscriptions since 5.0
    ("unsubscribe", ["5.0", "9.1"]),
    ("find_subscribers", ["5.0", "9.1"]),
    ("store_delayed", ["4.3.1", "9.1"]),  # C: 4.3.1-9.1.0
]
SEED_CASES = [(name, version) for name, versions in SEED_FORMS for version in versions]


def catalog_statements(version: str, placement, topics: int = 1, **options) -> dict[str, Statement]:
    catalog, schema, table = placement
    prof = profile(version)
    return ENGINE.runtime_statements(
        prof,
        TableName(table, schema, catalog),
        delayed=TableName(table + ".Delayed", schema, catalog) if three_part(version) else None,
        subscriptions=TableName("SubscriptionRouting", None, catalog) if has_subscriptions(version) else None,
        topics=topics,
        peek_batch_size=PEEK_N,
        **options,
    )


# The start-up checks name the queue as an N'...' literal where upstream writes '...' (a deliberate
# deviation, docs/fidelity.md: a varchar literal turns a name outside the code page into '?').
NATIONAL_LITERAL = {"check_expires_index", "check_rowversion_index", "check_headers_type"}


def national(name: str, template: str) -> str:
    """Upstream's text with the documented deviation of the start-up checks applied."""
    if name not in NATIONAL_LITERAL:
        return template
    assert "OBJECT_ID('" in template, name
    return template.replace("OBJECT_ID('", "OBJECT_ID(N'")


def expected_seed(text: str, name: str, version: str, placement, topics: int) -> str:
    catalog, schema, table = placement
    queue = quoted(version, catalog, schema, table)
    template = national(name, seed_statement(text, name))
    if name == "peek":  # {0} the queue, {1} the peek batch size
        return fill(template, queue, str(PEEK_N))
    if name in ("subscribe", "unsubscribe", "find_subscribers"):  # {0} the subscription table, {1} the topic list
        return fill(template, quoted(version, catalog, None, "SubscriptionRouting"), TOPIC_LISTS[topics])
    if name in ("move_due_delayed", "store_delayed"):  # {0} the delayed table, {1} the input queue
        return fill(template, quoted(version, catalog, schema, table + ".Delayed"), queue)
    return fill(template, queue)


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: ".".join(x or "-" for x in p))
@pytest.mark.parametrize("name,version", SEED_CASES, ids=[f"{n}-{v}" for n, v in SEED_CASES])
def test_seed_003_forms(placement, name, version):
    text = runtime_text()
    for topics in (1, 3) if name == "find_subscribers" else (1,):
        statement = catalog_statements(version, placement, topics)[name]
        expected = expected_seed(text, name, version, placement, topics)
        assert normalized(statement.sql) == normalized(expected), f"{name} {version}:\n{statement.sql}\n---\n{expected}"


# =========================================================================== 1b. golden: latest forms (§4)
def facts_bullet(facts: str, start: str) -> str:
    (line,) = [line for line in facts.splitlines() if line.startswith(f"- {start}")]
    return line


def backticked(line: str) -> list[str]:
    return re.findall(r"`([^`]*)`", line)


def facts_latest_send(facts: str) -> str:
    insert = backticked(facts_bullet(facts, "latest send:"))[0]
    assert insert.startswith("INSERT INTO {0} (Id, Recoverable,"), insert
    return insert


def nocount_wrapped(seed_send: str, insert: str) -> str:
    """§4's INSERT inside seed 003's send NOCOUNT save/restore."""
    begin, end = seed_send.index("INSERT INTO"), seed_send.index("@Body);") + len("@Body);")
    return seed_send[:begin] + insert + ";" + seed_send[end:]


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: ".".join(x or "-" for x in p))
@pytest.mark.parametrize("version", ["7.0", "8.1", "9.1"])
def test_latest_send_matches_transport_facts(placement, version):
    facts, seed = facts_text(), runtime_text()
    insert = facts_latest_send(facts)
    assert "a variant without Recoverable when that column was dropped" in facts
    without = insert.replace("Recoverable, ", "", 1).replace("(@Id, 1, ", "(@Id, ", 1)
    assert without.count("Recoverable") == 0 and without != insert
    queue = quoted(version, *placement)
    wrapper = seed_statement(seed, "send")
    for recoverable, body in ((True, insert), (False, without)):
        statement = catalog_statements(version, placement, recoverable_column=recoverable)["send"]
        assert normalized(statement.sql) == normalized(fill(nocount_wrapped(wrapper, body), queue)), statement.sql
        assert statement.params == ("Id", "TimeToBeReceivedMs", "Headers", "Body")


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: ".".join(x or "-" for x in p))
@pytest.mark.parametrize("version", ["7.0.8", "8.1.6", "9.1"])  # upstream-conformance §3: variant C
def test_recoverable_check_matches_transport_facts(placement, version):
    check = backticked(facts_bullet(facts_text(), "latest send:"))[1]
    assert check.startswith("SELECT COUNT(*) FROM [catalog].sys.columns"), check
    catalog = placement[0] if three_part(version) else None
    statement = catalog_statements(version, placement)["check_recoverable_column"]
    assert normalized(statement.sql) == normalized(fill(check, quoted(version, *placement), None, catalog))


def latest_receive(facts: str, seed: str) -> str:
    """Seed 003's receive with the OUTPUT list §4 gives for 4.1+."""
    line = facts_bullet(facts, "latest receive:")
    assert "4.1+ no longer outputs CorrelationId/ReplyToAddress" in line
    (output_list,) = [code for code in backticked(line) if code.startswith("deleted.")]
    wanted = [item.strip() for item in output_list.split(",")]
    receive = seed_statement(seed, "receive")
    head, rest = receive.split("OUTPUT\n", 1)
    output, tail = rest.split(";\n", 1)
    items = output.split(",\n")
    assert len(items) == 6 and items[3].startswith("CASE WHEN deleted.Expires IS NULL"), items
    by_name = {("<expired flag>" if item.startswith("CASE") else item): item for item in items}
    return head + "OUTPUT\n" + ",\n".join(by_name[item] for item in wanted) + ";\n" + tail


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: ".".join(x or "-" for x in p))
@pytest.mark.parametrize("version", ["7.0", "8.1", "9.1"])  # from 7.0.0, not 4.1 (upstream-conformance §9)
def test_latest_receive_matches_transport_facts(placement, version):
    expected = fill(latest_receive(facts_text(), runtime_text()), quoted(version, *placement))
    assert "correlationid" not in normalized(expected)
    statement = catalog_statements(version, placement)["receive"]
    assert normalized(statement.sql) == normalized(expected), statement.sql
    assert statement.params == ()


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: ".".join(x or "-" for x in p))
@pytest.mark.parametrize(
    "version,form",
    # §4: "latest peek ...; 4.1.2-6.0 used the TOP {n} count form in seed 003; 4.0 SELECT count(*) ...";
    # upstream-conformance §3: the latest form from 6.3.7 and 7.0.5 (nolock before), the count 4.0.0-4.1.1
    [("6.3.7", "latest"), ("7.0.5", "latest"), ("8.1", "latest"), ("9.1", "latest"), ("4.0", "4.0"), ("4.1.1", "4.0")],
)
def test_peek_matches_transport_facts(placement, version, form):
    line = facts_bullet(facts_text(), "latest peek:")
    assert "4.1.2-6.0 used the `TOP {n}` count form" in line
    if form == "latest":
        (template,) = re.findall(r"latest peek: `([^`]*)`", line)
    else:
        (template,) = re.findall(r"4\.0 `([^`]*)`", line)
    statement = catalog_statements(version, placement)["peek"]
    # the count form ends in `;` as upstream's PeekText does (4.0.0, 4.1.1: SqlConstants.cs); the
    # facts line quotes it without the final `;`
    sql = normalized(statement.sql).removesuffix(" ;") if form == "4.0" else normalized(statement.sql)
    assert sql == normalized(fill(template, quoted(version, *placement))), statement.sql
    assert form != "4.0" or statement.sql.endswith(";")
    assert statement.params == ()


# =========================================================================== per-version forms
FORMS = [  # upstream-conformance §2-§3
    # version  send fills CorrelationId  receive outputs CorrelationId  peek
    ("1.2",    True,                     True,                          "count"),
    ("2.2",    True,                     True,                          "count"),
    ("3.0",    True,                     True,                          "count"),
    ("3.1.6",  True,                     True,                          "top"),
    ("4.0",    True,                     True,                          "count"),
    ("4.1",    True,                     True,                          "count"),
    ("4.1.2",  True,                     True,                          "top"),
    ("5.0",    True,                     True,                          "top"),
    ("6.0.1",  True,                     True,                          "top"),
    ("6.1",    True,                     True,                          "range"),
    ("6.3.1",  True,                     True,                          "range"),
    ("7.0",    False,                    False,                         "range"),
    ("9.1",    False,                    False,                         "range"),
]  # fmt: skip
# Releases with no Headers type check: before 2.2.6, and 3.0.0-3.0.2 (varchar Headers again).
NO_HEADERS_CHECK = {"1.2", "2.2", "3.0"}
# Releases that check for a nonclustered RowVersion index (upstream-conformance §3).
ROWVERSION_CHECK = {"4.3.2", "5.0.3", "6.0.1", "6.1", "6.3.1", "7.0", "9.1"}


@pytest.mark.parametrize("version,send_correlation,receive_correlation,peek", FORMS, ids=[f[0] for f in FORMS])
def test_statement_forms_per_version(version, send_correlation, receive_correlation, peek):
    statements = catalog_statements(version, ("nsb", "dbo", "Sales"))
    send, receive, batch = (normalized(statements[n].sql) for n in ("send", "receive", "receive_batch"))
    assert ("correlationid" in send) is send_correlation
    assert ("@correlationid" in send) is send_correlation
    assert ("deleted . correlationid" in receive) is receive_correlation
    assert ("deleted . correlationid" in batch) is receive_correlation
    text = normalized(statements["peek"].sql)
    table = "nsb . dbo . sales" if three_part(version) else "dbo . sales"
    markers = {
        "count": f"select count ( * ) id from {table} with ( readpast )",
        "top": f"select count ( * ) id from ( select top {PEEK_N} * from {table} with ( readpast )",
        "range": "select isnull ( cast ( max ( rowversion ) - min ( rowversion ) + 1 as int ) , 0 ) id from",
    }
    assert [form for form, marker in markers.items() if marker in text] == [peek], text
    expected_keys = {"send", "receive", "receive_batch", "peek", "purge_expired", "purge_all", "check_expires_index",
                     "lock_batch", "delete_locked", "savepoint", "rollback_to_savepoint"}  # fmt: skip
    if version not in NO_HEADERS_CHECK:
        expected_keys.add("check_headers_type")
    if not send_correlation:  # 7.0+: the send without Recoverable, and the check that chooses it
        expected_keys |= {"send_norec", "check_recoverable_column"}
    if version in ROWVERSION_CHECK:
        expected_keys.add("check_rowversion_index")
    if three_part(version):
        expected_keys |= {"store_delayed", "move_due_delayed"}
        if send_correlation and version != "6.3.1":  # 3.1.0-6.2.0: the silent move, and the one the runtime runs
            expected_keys.add("move_due_delayed_counted")
    if has_subscriptions(version):
        expected_keys |= {"subscribe", "unsubscribe", "find_subscribers"}
    assert set(statements) == expected_keys
    for name, statement in statements.items():
        assert statement.name == name and statement.doc and "\n" not in statement.doc


@pytest.mark.parametrize("version", ["4.1", "6.3.8", "9.1"])  # receive without Recoverable, flagging expired rows
def test_receive_batch_is_receive_for_up_to_batch_size_rows(version):
    statements = catalog_statements(version, ("nsb", "dbo", "Sales"))
    receive, batch = normalized(statements["receive"].sql), normalized(statements["receive_batch"].sql)
    # the receive's CTE, DELETE and OUTPUT, with TOP(@BatchSize) and RowVersion added to the output
    core = (
        receive[receive.index("with message as") : receive.index("deleted . body ;")] + "deleted . body , deleted . rowversion into @batch"
    )
    assert core.replace("top ( 1 )", "top ( @batchsize )") in batch
    table = "nsb . dbo . sales" if three_part(version) else "dbo . sales"
    assert f"select top ( @batchsize ) * from {table} with ( updlock , readpast , rowlock ) order by rowversion )" in batch
    # the same columns as receive, then RowVersion, oldest first
    output = receive[receive.index("output") + len("output") : receive.index(";", receive.index("output"))]
    names = [("expired" if "case" in item else item.split(".")[-1].strip()) for item in output.split(" , ")]
    assert f"select {' , '.join(names)} , rowversion from @batch order by rowversion ;" in batch
    assert batch.startswith(receive[: receive.index("with message as")])  # the same NOCOUNT save
    assert batch.endswith(receive[receive.index("if ( @nocount = 'on' )") :])  # and restore
    assert statements["receive_batch"].params == ("BatchSize",)


@pytest.mark.parametrize("version", ["3.1", "6.3.8", "9.1"])
def test_the_pumps_batch_statements(version):
    """lock_batch locks with receive's hints and takes nothing; delete_locked takes the handled rows
    by RowVersion; each message's savepoint is SAVE TRANSACTION, undone by ROLLBACK TRANSACTION."""
    statements = catalog_statements(version, ("nsb", "dbo", "Sales"))
    table = "nsb . dbo . sales" if three_part(version) else "dbo . sales"
    lock = normalized(statements["lock_batch"].sql)
    assert lock.startswith("select top ( @batchsize ) id , case when expires is null")
    assert lock.endswith(f"from {table} with ( updlock , readpast , rowlock ) order by rowversion")
    assert "delete" not in lock
    assert statements["lock_batch"].params == ("BatchSize",)
    assert statements["lock_batch"].columns == ("Id", "Expired", "Headers", "Body", "Order")
    delete = normalized(statements["delete_locked"].sql)
    assert delete == f"delete from {table} where rowversion in ( select cast ( value as bigint ) from openjson ( @orders ) )"
    assert statements["delete_locked"].params == ("Orders",)
    assert statements["savepoint"].sql == "SAVE TRANSACTION sqltransport_message"
    assert statements["rollback_to_savepoint"].sql == "ROLLBACK TRANSACTION sqltransport_message"
    assert ENGINE.list_parameter([3, 1, 2]) == "[3, 1, 2]"  # OPENJSON's array


def test_move_due_delayed_fills_the_owning_queue():
    statements = ENGINE.runtime_statements(
        profile("9.1"), TableName("Sales", "sales", "nsb"), delayed=TableName("Sales.Delayed", "sales", "nsb")
    )
    text = normalized(statements["move_due_delayed"].sql)
    assert "from nsb . sales . sales.delayed with ( updlock , readpast , rowlock )" in text
    assert "into nsb . sales . sales ( id , correlationid" in text
    assert text.endswith("from nsb . sales . sales.delayed with ( readpast ) order by due")
    assert statements["store_delayed"].identifiers == {"delayed": "[nsb].[sales].[Sales.Delayed]"}
    # a queue whose Recoverable column was dropped (7.0+): moved rows leave it out as well
    without = ENGINE.runtime_statements(profile("9.1"), TableName("Sales"), delayed=TableName("Sales.Delayed"), recoverable_column=False)
    text = normalized(without["move_due_delayed"].sql)
    assert "recoverable" not in text
    assert (
        "output newid ( ) , null , null , null , deleted . headers , deleted . body "
        "into dbo . sales ( id , correlationid , replytoaddress , expires , headers , body )" in text
    )


@pytest.mark.parametrize(
    "version,options,message",
    [
        ("3.0", {"delayed": TableName("Sales.Delayed")}, "delayed"),
        ("4.3", {"subscriptions": TableName("SubscriptionRouting"), "peek_batch_size": 10}, "subscription"),
        ("6.3.1", {"recoverable_column": False}, "Recoverable"),
        ("1.2", {"recoverable_column": False}, "Recoverable"),
        ("5.0", {"peek_batch_size": 0}, "peek_batch_size"),
        ("4.1.2", {}, "peek_batch_size"),
        ("9.1", {"peek_batch_size": -1}, "peek_batch_size"),
        ("9.1", {"peek_batch_size": True}, "peek_batch_size"),
        ("9.1", {"peek_batch_size": "10"}, "peek_batch_size"),
        ("9.1", {"topics": 0}, "topics"),
        ("9.1", {"topics": True}, "topics"),
    ],
)
def test_invalid_options_are_refused(version, options, message):
    with pytest.raises(UsageError, match=message):  # a ValueError too, as callers caught before
        ENGINE.runtime_statements(profile(version), TableName("Sales"), **options)


def test_the_statements_come_from_the_one_builder():
    # SQL Server names its templates (or the methods choosing a release's) in the statement tables
    # and overrides the builder's hooks, never the builder
    assert all("runtime_statements" not in vars(cls) for cls in MSSQL.__mro__ if cls is not Dialect)


def test_peek_batch_size_is_ignored_where_the_version_does_not_use_it():
    for version in ("4.0", "9.1"):
        a = ENGINE.runtime_statements(profile(version), TableName("Sales"))["peek"]
        b = ENGINE.runtime_statements(profile(version), TableName("Sales"), peek_batch_size=500)["peek"]
        assert a == b


def test_names_before_3_1_have_no_catalog():
    statements = ENGINE.runtime_statements(profile("3.0"), TableName("Sales", "dbo", "nsb"))
    for statement in statements.values():
        assert "nsb" not in statement.sql, statement.name
    assert "FROM [sys].[indexes]" in statements["check_expires_index"].sql


def tokens(sql: str) -> str:
    """Every token, brackets included, lower-cased, one space apart (as the conformance check reads text)."""
    return " ".join(t.lower() for t in re.findall(r"\w+|[^\w\s]", sql))


@pytest.mark.parametrize("version", ["3.0", "3.0.2", "3.0.3"])
def test_3_0_runtime_texts_bracket_every_column(version):
    """3.0.x's texts (upstream-conformance §5): bracketed columns, `;;` after the send's VALUES,
    the purge of expired Ids with the receive's locks in RowVersion order; @BatchSize stays bound."""
    statements = catalog_statements(version, (None, "dbo", "Sales"))
    send = tokens(statements["send"].sql)
    assert "insert into [ dbo ] . [ sales ] ( [ id ] , [ correlationid ] , [ replytoaddress ] , [ recoverable ] , [ expires ] ," in send
    assert "@ headers , @ body ) ; ;" in send
    assert "where [ expires ] is null or [ expires ] > getutcdate ( ) order by [ rowversion ] )" in tokens(statements["receive"].sql)
    assert tokens(statements["peek"].sql).endswith("where [ expires ] is null or [ expires ] > getutcdate ( ) ;")
    purge = tokens(statements["purge_expired"].sql)
    assert purge.startswith("delete from [ dbo ] . [ sales ] where [ id ] in ( select top ( @ batchsize ) [ id ] from [ dbo ] . [ sales ]")
    assert "with ( updlock , readpast , rowlock ) where [ expires ] < getutcdate ( ) order by [ rowversion ] )" in purge
    assert statements["purge_expired"].params == ("BatchSize",)
    check = tokens(statements["check_expires_index"].sql)
    assert check == (
        "select count ( * ) from [ sys ] . [ indexes ] where [ name ] = ' index_expires ' "
        "and [ object_id ] = object_id ( n ' [ dbo ] . [ sales ] ' )"  # N'...': the documented deviation
    )
    assert ("check_headers_type" in statements) is (version == "3.0.3")
    later = catalog_statements("3.1", (None, "dbo", "Sales"))
    assert "[ id ]" not in normalized(later["send"].sql) and "[sys]" not in later["check_expires_index"].sql


# =========================================================================== 2. sqlfluff (tsql)
# Constructs of valid T-SQL that sqlfluff's tsql dialect cannot parse: substring -> reason.
# Empty: with sqlfluff 4.5 every runtime statement parses.
RUNTIME_SQLFLUFF_GAPS: dict[str, str] = {}
PARSE_VERSIONS = ["1.2", "2.2", "3.0", "3.0.3", "4.0", "4.1.2", "5.0", "6.3.1", "9.1"]


def _all_statements() -> dict[str, list[str]]:
    """Every distinct statement text for the parse versions, with and without catalog: sql -> labels."""
    found: dict[str, list[str]] = {}
    for version in PARSE_VERSIONS:
        for catalog in (None, "nsb"):
            for topics in (1, 3):
                for recoverable in (True, False) if version == "9.1" else (True,):
                    statements = catalog_statements(version, (catalog, "dbo", "Sales"), topics, recoverable_column=recoverable)
                    for name, statement in statements.items():
                        label = f"{name}-{version}-{catalog or 'nocat'}-t{topics}{'' if recoverable else '-norecoverable'}"
                        found.setdefault(statement.sql, []).append(label)
    return found


ALL = _all_statements()


def parse_problems_or_no_tree(sql: str) -> list[str]:
    """parse_problems, also when sqlfluff builds no tree at all (its .tree property asserts then)."""
    try:
        return parse_problems(sql)
    except AssertionError as error:
        return [f"no parse tree: {error}"]


def assert_parses(sql: str, label: str) -> None:
    support_assert_parses(sql, label, RUNTIME_SQLFLUFF_GAPS, parse_problems_or_no_tree)


def test_the_collection_covers_every_statement_and_version():
    labels = " ".join(label for labels in ALL.values() for label in labels)
    for name in ("send", "receive", "receive_batch", "peek", "purge_expired", "purge_all", "check_expires_index",
                 "check_headers_type", "check_recoverable_column", "store_delayed", "move_due_delayed", "subscribe",
                 "unsubscribe", "find_subscribers", "lock_batch", "delete_locked", "savepoint",
                 "rollback_to_savepoint"):  # fmt: skip
        assert f"{name}-" in labels, name
    for version in PARSE_VERSIONS:
        assert f"-{version}-nsb" in labels and f"-{version}-nocat" in labels
    assert "-norecoverable" in labels


@pytest.mark.parametrize("sql", list(ALL), ids=[labels[0] for labels in ALL.values()])
def test_statement_parses_as_tsql(sql):
    assert_parses(sql, ", ".join(ALL[sql]))


def test_the_sqlfluff_check_detects_broken_runtime_sql():
    statements = catalog_statements("9.1", ("nsb", "dbo", "Sales"))
    receive = statements["receive"].sql
    assert parse_problems_or_no_tree(receive) == []
    assert parse_problems_or_no_tree(receive.replace("ORDER BY RowVersion)", "ORDER BY RowVersion", 1))
    assert parse_problems_or_no_tree(receive.replace("deleted.Id,", "deleted.Id,,", 1))
    merge = statements["subscribe"].sql
    assert parse_problems_or_no_tree(merge.replace("WHEN NOT MATCHED THEN", "WHEN NOT MATCHED", 1))


# =========================================================================== 3. parameters
_AT_NAME = re.compile(r"(?<![\w@])@([A-Za-z_]\w*)")
_DECLARED = re.compile(r"\bDECLARE\s+@(\w+)", re.I)


def bound_names(template: str) -> list[str]:
    """Every @Name occurrence of a template, in order, without the T-SQL variables it DECLAREs."""
    declared = set(_DECLARED.findall(template))
    return [name for name in _AT_NAME.findall(template) if name not in declared]


def _statement_objects() -> list[tuple[str, Statement]]:
    out = []
    for version in PARSE_VERSIONS:
        for catalog in (None, "nsb"):
            for recoverable in (True, False) if version == "9.1" else (True,):
                statements = catalog_statements(version, (catalog, "dbo", "Sales"), 3, recoverable_column=recoverable)
                out += [(f"{name}-{version}-{catalog}-{recoverable}", st) for name, st in statements.items()]
    return out


STATEMENTS = _statement_objects()


@pytest.mark.parametrize("label,statement", STATEMENTS, ids=[label for label, _ in STATEMENTS])
def test_params_are_the_bound_names(label, statement):
    names = bound_names(statement.template)
    assert statement.params == tuple(dict.fromkeys(names)), label  # each once, in order of first use
    assert not {"NOCOUNT", "DueAfter", "batch"} & set(statement.params)
    sql, order = statement.native("qmark")
    assert order == tuple(names)
    assert sql.count("?") == len(names)
    assert not [n for n in _AT_NAME.findall(sql) if n in statement.params], sql
    # T-SQL variables stay as they are
    for variable in set(_DECLARED.findall(statement.template)):
        assert f"@{variable}" in sql
    assert "@@OPTIONS" in sql or "@@OPTIONS" not in statement.template
    named, named_order = statement.native("named")
    assert named_order == order and all(f":{n}" in named for n in statement.params)
    pyformat, _ = statement.native("pyformat")
    assert all(f"%({n})s" in pyformat for n in statement.params)


def test_merge_binds_queue_address_twice_in_order():
    statement = catalog_statements("9.1", (None, "dbo", "Sales"))["subscribe"]
    assert statement.params == ("Endpoint", "QueueAddress", "Topic")
    sql, order = statement.native("qmark")
    assert order == ("Endpoint", "QueueAddress", "Topic", "QueueAddress", "QueueAddress", "Topic", "Endpoint")
    assert "USING(SELECT ? AS Endpoint, ? AS QueueAddress, ? AS Topic) AS source" in sql
    assert "UPDATE SET QueueAddress = ?" in sql


@pytest.mark.parametrize("topics", [1, 2, 5])
def test_find_subscribers_has_one_parameter_per_topic(topics):
    statement = catalog_statements("9.1", (None, "dbo", "Sales"), topics)["find_subscribers"]
    assert statement.params == tuple(f"Topic_{i}" for i in range(topics))
    sql, order = statement.native("qmark")
    assert order == statement.params
    assert "WHERE Topic IN (" + ", ".join("?" * topics) + ")" in sql


def test_send_params_follow_the_version():
    assert catalog_statements("4.1", (None, "dbo", "Sales"))["send"].params == (
        "Id", "CorrelationId", "ReplyToAddress", "TimeToBeReceivedMs", "Headers", "Body"
    )  # fmt: skip
    assert catalog_statements("3.1", (None, "dbo", "Sales"))["send"].params == (
        "Id", "CorrelationId", "ReplyToAddress", "Recoverable", "TimeToBeReceivedMs", "Headers", "Body"
    )  # fmt: skip
    assert catalog_statements("3.1", (None, "dbo", "Sales"))["store_delayed"].params == ("Headers", "Body", "Due")
    assert catalog_statements("4.3", (None, "dbo", "Sales"))["store_delayed"].params == ("Headers", "Body", "DueAfterMs")
    store = catalog_statements("9.1", (None, "dbo", "Sales"))["store_delayed"]
    assert store.params == ("DueAfterMilliseconds", "DueAfterSeconds", "DueAfterMinutes", "DueAfterHours",
                            "DueAfterDays", "Headers", "Body")  # fmt: skip


# =========================================================================== 4. hostile names
# Names that also test the parameter conversion: an @Name, a %, a ? inside a table name.
RUNTIME_HOSTILE = HOSTILE + ["Alpha@IdOmega", "Alpha%sOmega", "Alpha?Omega", "Alpha@@OPTIONSOmega"]
FIXED_IDENTIFIERS = {"RowVersion"}  # [RowVersion] in the latest peek
FIXED_LITERALS = {"OFF", "ON", "Index_Expires", "Index_RowVersion", "Headers", "Recoverable", "Expires", "RowVersion"}


@pytest.mark.parametrize("hostile", RUNTIME_HOSTILE)
def test_hostile_table_names_never_escape_quoting(hostile):
    for name in placements(hostile):
        for version in ("1.2", "4.1.2", "9.1"):
            prof = profile(version)
            delayed = name._replace(table=name.table + ".Delayed")
            subscriptions = name._replace(table="Subs" + name.table)
            statements = ENGINE.runtime_statements(
                prof, name,
                delayed=delayed if prof.delayed_delivery else None,
                subscriptions=subscriptions if prof.subscriptions else None,
                topics=2, peek_batch_size=PEEK_N,
            )  # fmt: skip
            parts = {p for t in (name, delayed, subscriptions) for p in t if p is not None}
            qualified = ENGINE.qualified(name, prof)
            for label, statement in statements.items():
                where = f"{label} {version} {name}"
                check_no_escape(statement.sql, where, FIXED_IDENTIFIERS | parts, FIXED_LITERALS | {qualified})
                expected = bound_names(statement.template)
                for style, escape in (("qmark", str), ("named", str), ("pyformat", lambda s: s.replace("%", "%%"))):
                    sql, order = statement.native(style)
                    # a name's @, % or ? is never taken for a parameter
                    assert order == tuple(expected), where
                    check_no_escape(sql, f"{where} ({style})", FIXED_IDENTIFIERS | {escape(p) for p in parts},
                                     FIXED_LITERALS | {escape(qualified)})  # fmt: skip
                    if style == "qmark":
                        residue_marks = [t for t in tokenize(sql) if t.kind == "punct" and t.value == "?"]
                        assert len(residue_marks) == len(expected), where
                if "table_literal" in statement.identifiers:
                    # the qualified name inside '...' (N'...' in the Recoverable count) with every ' doubled
                    literal = f"'{ENGINE.literal_text(qualified)}')"
                    assert f"OBJECT_ID({literal}" in statement.sql or f"OBJECT_ID(N{literal}" in statement.sql, where
                if "sys" in statement.identifiers:
                    catalog = name.catalog if prof.three_part_names else None
                    assert statement.identifiers["sys"] == (ENGINE.quote(catalog) + ".sys" if catalog else "sys")


@pytest.mark.parametrize("hostile", [h for h in RUNTIME_HOSTILE if "]" not in h])
def test_hostile_names_without_brackets_parse_as_tsql(hostile):
    # sqlfluff wrongly rejects `]]` inside bracketed names, so those are left out here.
    name = TableName(hostile, hostile, hostile)
    statements = ENGINE.runtime_statements(
        profile("9.1"), name, delayed=name._replace(table=hostile + ".Delayed"), subscriptions=name, topics=2
    )
    for label, statement in statements.items():
        assert_parses(statement.sql, f"{label} {hostile!r}")
