"""topology.yaml: every validation rule (with its exact file:line:column and a message
that says what to change), the defaults, hostile names, the JSON Schema editors use,
and the `validate` command.

YAML texts below start on line 1 (the backslash after the opening quotes), so the
expected line:column can be read off the text: columns count from 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from textwrap import dedent

import pytest
import yaml

from sqltransport_schema import cli
from sqltransport_schema.schema import Kind, TableName, blueprint
from sqltransport_schema.topology import TopologyError, json_schema, load, loads

from .support.topology import validator

REPO = Path(__file__).resolve().parents[1]
FILE = "t.yaml"


# --------------------------------------------------------------------------- helpers
def problems(text: str) -> list:
    with pytest.raises(TopologyError) as info:
        loads(dedent(text), FILE)
    assert info.value.problems, "a TopologyError must carry at least one problem"
    return info.value.problems


def one_problem(text: str):
    found = problems(text)
    assert len(found) == 1, "expected exactly one problem, got:\n" + "\n".join(map(str, found))
    return found[0]


def where(problem) -> tuple[int, int]:
    return problem.mark.line, problem.mark.column


def assert_problem(text: str, line: int, column: int, *fragments: str):
    problem = one_problem(text)
    assert problem.mark.path == FILE
    assert where(problem) == (line, column), str(problem)
    for fragment in fragments:
        assert fragment in problem.message, f"{fragment!r} not in {problem.message!r}"
    assert str(problem) == f"{FILE}:{line}:{column}: {problem.message}"
    return problem


def valid(text: str):
    return loads(dedent(text), FILE)


def tables(text: str) -> dict[TableName, Kind]:
    return {spec.name: spec.kind for spec in blueprint(valid(text)).tables}


# --------------------------------------------------------------------------- structure
def test_unknown_top_level_key_suggests_the_known_one():
    assert_problem(
        """\
        transport_version: "9.1"
        endpoint:
          - name: Sales
        """,
        2,
        1,
        "unknown key 'endpoint'",
        "did you mean 'endpoints'?",
        "allowed keys: transport_version, engines",
    )


def test_unknown_key_inside_an_endpoint_suggests_the_known_one():
    assert_problem(
        """\
        transport_version: "9.1"
        endpoints:
          - name: Sales
            instance: [host-a]
        """,
        4,
        5,
        "unknown key 'instance' in endpoint",
        "did you mean 'instances'?",
        "allowed keys: name, schema",
    )


def test_unknown_key_without_a_close_match_lists_the_allowed_keys():
    problem = assert_problem(
        """\
        transport_version: "9.1"
        queues:
          - name: audit
            colour: red
        """,
        4,
        5,
        "unknown key 'colour' in queue",
        "allowed keys: name, schema, catalog",
    )
    assert "did you mean" not in problem.message


def test_a_misspelt_required_key_is_one_problem():
    # Not also "queue needs a 'name' key" at the same place: the hint already says it.
    assert_problem(
        """\
        transport_version: "9.1"
        queues:
          - nme: audit
        """,
        3,
        5,
        "unknown key 'nme'",
        "did you mean 'name'?",
    )


def test_a_missing_required_key_is_named():
    assert_problem(
        """\
        transport_version: "9.1"
        queues:
          - schema: ops
        """,
        3,
        5,
        "queue needs a 'name' key",
    )
    assert_problem('engines: [mssql]\n', 1, 1, "needs a 'transport_version' key")


@pytest.mark.parametrize(
    "value, line, column, fragments",
    [
        pytest.param("name: [Sales]", 3, 11, ["endpoints[0].name must be a name (a string)", "not a list"], id="list-for-name"),
        pytest.param("name: 42", 3, 11, ["endpoints[0].name must be a name (a string)", "not a number"], id="number-for-name"),
        pytest.param("name: {a: b}", 3, 11, ["must be a name (a string)", "not a mapping"], id="mapping-for-name"),
        pytest.param(
            "name: Sales\n    send_only: \"yes\"",
            4,
            16,
            ["endpoints[0].send_only must be true or false", "not a string"],
            id="yes-as-string",
        ),
        pytest.param(
            "name: Sales\n    instances: host-a", 4, 16, ["endpoints[0].instances must be a list", "not a string"], id="string-for-list"
        ),
        pytest.param(
            "name: Sales\n    instances: [7]", 4, 17, ["endpoints[0].instances[0] must be a name", "not a number"], id="number-in-list"
        ),
    ],
)
def test_wrong_types_inside_an_endpoint(value, line, column, fragments):
    assert_problem(f'transport_version: "9.1"\nendpoints:\n  - {value}\n', line, column, *fragments)


def test_a_mapping_where_a_list_is_expected():
    assert_problem(
        """\
        transport_version: "9.1"
        endpoints:
          name: Sales
        """,
        3,
        3,
        "endpoints must be a list, not a mapping",
    )


def test_a_topology_that_is_not_a_mapping():
    assert_problem("- transport_version\n", 1, 1, "topology must be a mapping, not a list")


def test_subscriptions_must_be_a_mapping_or_false():
    assert_problem(
        'transport_version: "9.1"\nsubscriptions: SubscriptionRouting\n',
        2,
        16,
        "subscriptions must be a mapping or false, not a string",
    )


def test_an_unknown_engine_suggests_the_known_one():
    assert_problem(
        'transport_version: "9.1"\nengines: [mssql, postgres]\n',
        2,
        18,
        "engines[1] is 'postgres'",
        "expected one of mssql, postgresql, sqlite",
        "did you mean 'postgresql'?",
    )


def test_an_engine_listed_twice():
    assert_problem('transport_version: "9.1"\nengines: [sqlite, sqlite]\n', 2, 19, "engine 'sqlite' is listed twice; keep one")


@pytest.mark.parametrize("name", ['""', '"   "', "'\t'"], ids=["empty", "spaces", "tab"])
def test_empty_and_blank_names(name):
    assert_problem(f'transport_version: "9.1"\nqueues:\n  - name: {name}\n', 3, 11, "queues[0].name must not be empty")


def test_empty_instance_and_suffix_and_subscription_table():
    found = problems(
        """\
        transport_version: "9.1"
        delayed_table_suffix: " "
        subscriptions:
          table: ""
        endpoints:
          - name: Sales
            instances: [""]
        """
    )
    assert [(where(p), p.message) for p in found] == [
        ((2, 23), "delayed_table_suffix must not be empty"),
        ((4, 10), "subscriptions.table must not be empty"),
        ((7, 17), "endpoints[0].instances[0] must not be empty"),
    ]


def test_a_null_name_is_not_a_name():
    assert_problem('transport_version: "9.1"\nqueues:\n  - name:\n', 3, 10, "queues[0].name must be a name (a string), not nothing (null)")


# --------------------------------------------------------------------------- versions
@pytest.mark.parametrize("written, shown", [("9.1", '"9.1"'), ("4.10", '"4.10"'), ("8", '"8"')])
def test_an_unquoted_version_is_to_be_quoted(written, shown):
    assert_problem(
        f"engines: [mssql]\ntransport_version: {written}\n",
        2,
        20,
        "transport_version must be a string",
        f"write it quoted, e.g. transport_version: {shown}",
    )


def test_an_unknown_major_version():
    assert_problem('transport_version: "10.0"\n', 1, 20, "transport version '10.0' is unknown", "versions 1.x to 9.x")


@pytest.mark.parametrize(
    "second",
    ["  - name: Sales\n    send_only: true\n", "  - name: Sales\n", "  - name: Sales\n    instances: [a]\n    outbox: true\n"],
    ids=["send-only", "same", "with-tables"],
)
def test_a_duplicate_endpoint_name_names_both_places(second):
    text = 'transport_version: "9.1"\nendpoints:\n  - name: Sales\n    outbox: true\n  - name: Billing\n' + second
    problem = assert_problem(text, 6, 11, "duplicate endpoint 'Sales'", f"first declared at {FILE}:3:11", "remove or rename this one")
    assert "same table" not in problem.message


@pytest.mark.parametrize("version", ["9.9", "9.2", "9.1.1"])
def test_a_version_past_the_latest_known_release(version):
    assert_problem(f'transport_version: "{version}"\n', 1, 20, f"transport version '{version}' is past the latest release", 'write "9.1"')


def test_a_version_that_is_no_version():
    assert_problem('transport_version: "abc"\n', 1, 20, "transport version 'abc' is not of the form MAJOR.MINOR", '"9.1"')


def test_a_null_version():
    assert_problem("transport_version:\n", 1, 19, 'transport_version must be a version string such as "9.1"')


# --------------------------------------------------------------------------- duplicate keys
def test_a_duplicate_top_level_key():
    assert_problem(
        'transport_version: "9.1"\nengines: [mssql]\ntransport_version: "9.0"\n',
        3,
        1,
        "'transport_version' is given twice in topology (first at line 1); keep one",
    )


def test_a_duplicate_key_inside_an_endpoint():
    assert_problem(
        """\
        transport_version: "9.1"
        endpoints:
          - name: Sales
            send_only: false
            send_only: true
        """,
        5,
        5,
        "'send_only' is given twice in endpoints[0] (first at line 4); keep one",
    )


# --------------------------------------------------------------------------- tables that are one table
def test_two_endpoints_with_the_same_name_are_one_problem():
    # Their delayed tables and indexes collide too; that is the same problem.
    assert_problem(
        """\
        transport_version: "9.1"
        endpoints:
          - name: Sales
          - name: Sales
        """,
        4,
        11,
        "duplicate endpoint 'Sales' (first declared at t.yaml:3:11)",
        "remove or rename this one",
    )


def test_an_instance_queue_colliding_with_a_queue():
    assert_problem(
        """\
        transport_version: "9.1"
        endpoints:
          - name: Sales
            instances: [x]
        queues:
          - name: Sales.x
        """,
        6,
        11,
        "queue 'Sales.x' is the same table as instance queue 'Sales.x' (at t.yaml:4:17)",
        "on mssql, postgresql, sqlite",
        "rename one",
    )


def test_the_later_of_two_places_is_reported_whatever_the_key_order():
    # queues written before endpoints: the instance (line 6) is the later place.
    assert_problem(
        """\
        transport_version: "9.1"
        queues:
          - name: Sales.x
        endpoints:
          - name: Sales
            instances: [x]
        """,
        6,
        17,
        "instance queue 'Sales.x' is the same table as queue 'Sales.x' (at t.yaml:3:11)",
    )


CASE_ONLY = """\
transport_version: "9.1"
{engines}
queues:
  - name: audit
  - name: AUDIT
"""


def test_names_differing_only_in_case_collide_on_mssql_and_sqlite():
    assert_problem(
        CASE_ONLY.format(engines=""),
        5,
        11,
        "queue 'AUDIT' is the same table as queue 'audit' (at t.yaml:4:11) on mssql, sqlite",
        "differ only in case",
        "rename one",
    )
    assert_problem(CASE_ONLY.format(engines="engines: [sqlite]"), 5, 11, "on sqlite:", "differ only in case")


def test_names_differing_only_in_case_are_two_tables_on_postgresql():
    topo = valid(CASE_ONLY.format(engines="engines: [postgresql]"))
    assert [q.name for q in topo.queues] == ["audit", "AUDIT"]


OTHER_SCHEMA = """\
transport_version: "9.1"
{engines}
queues:
  - name: audit
  - name: audit
    schema: ops
"""


def test_the_same_name_in_another_schema_collides_on_sqlite_only():
    problem = assert_problem(
        OTHER_SCHEMA.format(engines=""),
        5,
        11,
        "queue 'audit' is the same table as queue 'audit' (at t.yaml:4:11) on sqlite:",
        "sqlite ignores the schema",
        "remove that engine from engines",
    )
    assert "mssql" not in problem.message and "postgresql" not in problem.message
    assert "place it in another schema" not in problem.message  # it already is


def test_the_same_name_in_another_schema_is_fine_on_mssql_and_postgresql():
    topo = valid(OTHER_SCHEMA.format(engines="engines: [mssql, postgresql]"))
    assert {q.table_name for q in topo.queues} == {TableName("audit"), TableName("audit", "ops")}


def test_the_same_name_in_another_catalog_collides_on_postgresql_only():
    assert_problem(
        """\
        transport_version: "9.1"
        engines: [mssql, postgresql]
        queues:
          - name: audit
            catalog: one
          - name: audit
            catalog: two
        """,
        6,
        11,
        "on postgresql:",
        "postgresql ignores the catalog",
    )


def test_a_schema_left_out_is_the_engine_default_schema():
    assert_problem(
        'transport_version: "9.1"\nengines: [mssql]\nqueues:\n  - name: a\n  - name: a\n    schema: dbo\n',
        5,
        11,
        "queue 'a' is the same table as queue 'a' (at t.yaml:4:11) on mssql",
        "rename one or place it in another schema",
    )


def test_a_delayed_table_colliding_with_a_queue():
    assert_problem(
        """\
        transport_version: "9.1"
        endpoints:
          - name: Sales
        queues:
          - name: Sales.Delayed
        """,
        5,
        11,
        "queue 'Sales.Delayed' is the same table as delayed table 'Sales.Delayed' (at t.yaml:3:11)",
        "on mssql, postgresql, sqlite",
    )


def test_no_delayed_table_no_collision():
    valid('transport_version: "9.1"\nendpoints:\n  - name: Sales\n    delayed_delivery: false\nqueues:\n  - name: Sales.Delayed\n')


PG_INDEX = """\
transport_version: "9.1"
engines: [{engines}]
endpoints:
  - name: Sales
queues:
  - name: Sales.Delayed_Due
"""


def test_the_postgresql_due_index_collides_with_a_queue():
    assert_problem(
        PG_INDEX.format(engines="postgresql"),
        6,
        11,
        "queue 'Sales.Delayed_Due' is the same table as index 'Sales.Delayed_Due' of delayed table 'Sales.Delayed' "
        "(at t.yaml:4:11) on postgresql",
        "rename one",
    )


def test_an_index_collides_only_on_the_engines_that_create_it():
    # SQL Server indexes belong to their table: no collision there.
    valid(PG_INDEX.format(engines="mssql"))
    problem = assert_problem(PG_INDEX.format(engines="mssql, postgresql"), 6, 11, "on postgresql:")
    assert "mssql" not in problem.message
    # SQLite indexes share the namespace of tables, and its Due index has the same name.
    assert_problem(PG_INDEX.format(engines="mssql, postgresql, sqlite"), 6, 11, "on postgresql, sqlite:")


def test_the_sqlite_expires_index_collides_with_a_queue():
    assert_problem(
        'transport_version: "9.1"\nengines: [sqlite]\nqueues:\n  - name: audit\n  - name: audit_Expires\n',
        5,
        11,
        "queue 'audit_Expires' is the same table as index 'audit_Expires' of queue 'audit' (at t.yaml:4:11) on sqlite",
    )


def test_a_subscription_table_has_no_expires_index():
    valid('transport_version: "9.1"\nengines: [sqlite]\nqueues:\n  - name: SubscriptionRouting_Expires\n')


def test_a_queue_colliding_with_the_default_subscription_table_points_at_the_version():
    assert_problem(
        'transport_version: "9.1"\nengines: [mssql]\nqueues:\n  - name: subscriptionrouting\n',
        4,
        11,
        "queue 'subscriptionrouting' is the same table as subscription table 'SubscriptionRouting' (at t.yaml:1:20)",
    )


# --------------------------------------------------------------------------- '@'
@pytest.mark.parametrize(
    "text, line, column, fragment",
    [
        pytest.param('endpoints:\n  - name: "Sa@les"\n', 3, 11, "'Sa@les' contains '@'", id="endpoint"),
        pytest.param(
            'endpoints:\n  - name: Sales\n    instances: [host-a, "host@b"]\n', 4, 25, "instance 'host@b' contains '@'", id="instance"
        ),
        pytest.param('queues:\n  - name: "err@r"\n', 3, 11, "'err@r' contains '@'", id="queue"),
        pytest.param('subscriptions:\n  table: "Sub@scriptions"\n', 3, 10, "'Sub@scriptions' contains '@'", id="subscriptions"),
        pytest.param('delayed_table_suffix: "De@layed"\n', 2, 23, "delayed_table_suffix contains '@'", id="suffix"),
    ],
)
def test_at_sign_in_a_table_name(text, line, column, fragment):
    assert_problem('transport_version: "9.1"\n' + text, line, column, fragment, "cannot appear in a table name")


# --------------------------------------------------------------------------- name limits
def test_a_129_character_name_is_too_long_on_mssql():
    assert_problem(
        f'transport_version: "9.1"\nengines: [mssql]\nqueues:\n  - name: {"q" * 129}\n',
        4,
        11,
        "table name of queue",
        "is 129 characters long; SQL Server names hold at most 128",
        "shorten it",
    )


def test_a_128_character_name_fits_on_mssql():
    topo = valid(f'transport_version: "9.1"\nengines: [mssql]\nqueues:\n  - name: {"q" * 128}\n')
    assert len(topo.queues[0].name) == 128


def test_a_long_schema_on_mssql():
    problem = one_problem(f'transport_version: "9.1"\nengines: [mssql]\nqueues:\n  - name: q\n    schema: {"s" * 129}\n')
    assert "schema name of queue 'q' is 129 characters long" in problem.message


def test_a_56_byte_name_is_too_long_on_postgresql():
    assert_problem(
        f'transport_version: "9.1"\nengines: [postgresql]\nqueues:\n  - name: {"é" * 28}\n',
        4,
        11,
        "is 56 bytes in UTF-8; PostgreSQL transport table names hold at most 55",
        "shorten it",
    )


def test_a_55_byte_name_fits_on_postgresql_and_56_bytes_fit_elsewhere():
    valid(f'transport_version: "9.1"\nengines: [postgresql]\nqueues:\n  - name: {"é" * 27}a\n')
    valid(f'transport_version: "9.1"\nengines: [mssql, sqlite]\nqueues:\n  - name: {"é" * 28}\n')


def test_the_delayed_table_suffix_counts_towards_the_limit():
    # 47 + len(".Delayed") = 55 bytes fits; one more does not.
    valid(f'transport_version: "9.1"\nengines: [postgresql]\nendpoints:\n  - name: {"e" * 47}\n')
    assert_problem(
        f'transport_version: "9.1"\nengines: [postgresql]\nendpoints:\n  - name: {"e" * 48}\n',
        4,
        11,
        "table name of delayed table",
        "is 56 bytes",
    )


# --------------------------------------------------------------------------- features by version
def test_delayed_delivery_before_3_1():
    assert_problem(
        'transport_version: "3.0"\nengines: [mssql]\nendpoints:\n  - name: Sales\n    delayed_delivery: true\n',
        5,
        23,
        "delayed_delivery needs transport version 3.1 or later",
        "uses 3.0",
        "Raise transport_version or remove it",
    )


def test_body_string_before_4_1():
    assert_problem(
        'transport_version: "4.0"\nengines: [mssql]\nendpoints:\n  - name: Sales\n    body_string: true\n',
        5,
        18,
        "body_string needs transport version 4.1 or later",
        "uses 4.0",
    )


def test_a_subscription_table_before_5_0():
    assert_problem(
        'transport_version: "4.3.1"\nengines: [mssql]\nsubscriptions:\n  table: Subscriptions\n',
        4,
        3,
        "a subscription table needs transport version 5.0 or later",
        "uses 4.3.1",
        "Raise transport_version or remove it",
    )


def test_subscriptions_false_is_fine_before_5_0():
    assert valid('transport_version: "4.3.1"\nengines: [mssql]\nsubscriptions: false\n').subscriptions_disabled


def test_a_catalog_before_3_1():
    assert_problem(
        'transport_version: "3.0"\nengines: [mssql]\nqueues:\n  - name: audit\n    catalog: ops\n',
        5,
        14,
        "catalog 'ops' (three-part names) needs transport version 3.1 or later",
    )


def test_a_default_catalog_before_3_1_is_one_problem_at_default_catalog():
    assert_problem(
        'transport_version: "3.0"\nengines: [mssql]\ndefault_catalog: ops\nqueues:\n  - name: a\n  - name: b\n',
        3,
        18,
        "default_catalog 'ops' (three-part names) needs transport version 3.1 or later",
    )
    # ... also when no table is listed: it would still place the tables added later.
    assert_problem('transport_version: "3.0"\nengines: [mssql]\ndefault_catalog: ops\n', 3, 18, "default_catalog 'ops'")


@pytest.mark.parametrize("version", ["8.0", "4.0"])
def test_postgresql_before_8_1(version):
    body = f'transport_version: "{version}"\nengines: [{{engines}}]\nendpoints:\n  - name: Sales\n'
    assert_problem(
        body.format(engines="mssql, postgresql"),
        1,
        20,
        "the PostgreSQL transport starts at version 8.1",
        f"transport version {version} has no PostgreSQL layout",
        "remove postgresql from engines or raise transport_version",
    )
    assert valid(body.format(engines="mssql, sqlite")).engines == ("mssql", "sqlite")


def test_postgresql_before_8_1_when_engines_is_left_out():
    assert_problem(
        'transport_version: "8.0"\n',
        1,
        20,
        "engines is not set, so it defaults to all of mssql, postgresql, sqlite",
        "write engines: [mssql, sqlite]",
    )


# --------------------------------------------------------------------------- contradictions
def test_send_only_with_delayed_delivery():
    assert_problem(
        'transport_version: "9.1"\nendpoints:\n  - name: Web\n    send_only: true\n    delayed_delivery: true\n',
        5,
        23,
        "endpoint 'Web' is send-only and so has no delayed table",
        "remove delayed_delivery or send_only",
    )


def test_send_only_with_instances():
    assert_problem(
        'transport_version: "9.1"\nendpoints:\n  - name: Web\n    send_only: true\n    instances: [a]\n',
        5,
        16,
        "endpoint 'Web' is send-only and receives nothing",
        "remove instances or send_only",
    )


def test_send_only_with_body_string():
    assert_problem(
        'transport_version: "9.1"\nendpoints:\n  - name: Web\n    send_only: true\n    body_string: true\n',
        5,
        18,
        "endpoint 'Web' is send-only",
        "remove body_string",
    )


def test_discarding_a_table_that_is_still_in_the_topology():
    assert_problem(
        """\
        transport_version: "9.1"
        endpoints:
          - name: Sales
            instances: [host-a]
        discard:
          - name: Sales.host-a
          - name: Sales.host-b
        """,
        6,
        11,
        "'Sales.host-a' is listed under discard but is still instance queue 'Sales.host-a' (at t.yaml:4:17)",
        "remove one of them",
    )


def test_discard_compares_names_as_the_engines_do():
    text = 'transport_version: "9.1"\nengines: [{engines}]\nqueues:\n  - name: audit\ndiscard:\n  - name: AUDIT\n'
    assert_problem(text.format(engines="postgresql, sqlite"), 6, 11, "'AUDIT' is listed under discard but is still queue 'audit'")
    assert valid(text.format(engines="postgresql")).discard[0].name == "AUDIT"


def test_drop_protected_names_a_queue_that_is_gone():
    assert_problem(
        'transport_version: "9.1"\nqueues:\n  - name: audit\ndrop_protected:\n  - name: audit\n',
        5,
        11,
        "'audit' is listed under drop_protected but is still queue 'audit' (at t.yaml:3:11)",
        "remove one of them",
    )


def test_protected_is_true_or_false():
    assert_problem(
        'transport_version: "9.1"\nqueues:\n  - name: archive\n    protected: yes please\n', 4, 16, "protected must be true or false"
    )


def test_error_and_audit_are_protected_by_default_and_others_when_marked():
    from sqltransport_schema.schema import blueprint

    topo = valid(
        'transport_version: "9.1"\nendpoints:\n  - name: Sales\n    instances: [a]\n    protected: true\n  - name: Billing\n'
        "queues:\n  - name: Error\n  - name: audit\n    protected: false\n  - name: archive\n    protected: true\n  - name: dead\n"
    )
    protected = {spec.name.table for spec in blueprint(topo).tables if spec.protected}
    assert protected == {"Sales", "Sales.a", "Error", "archive"}


# --------------------------------------------------------------------------- all problems at once
def test_every_problem_of_a_file_is_reported_once_in_line_order():
    text = dedent(
        """\
        transport_version: "4.0"
        engines: [mssql, sqlite]
        endpoints:
          - name: Sales
            body_string: true
            instances: [a, 7]
          - name: Sales
            colour: red
          - name: ""
        queues:
          - name: "err@r"
          - name: Sales.a
        subscriptions:
          table: Subscriptions
        """
    )
    with pytest.raises(TopologyError) as info:
        loads(text, FILE)
    found = [(where(p), p.message.split(" ")[0]) for p in info.value.problems]
    assert found == [
        ((5, 18), "body_string"),  # version lacks it
        ((6, 20), "endpoints[0].instances[1]"),  # wrong type
        ((7, 11), "duplicate"),  # duplicate endpoint Sales
        ((8, 5), "unknown"),  # unknown key
        ((9, 11), "endpoints[2].name"),  # empty name
        ((11, 11), "'err@r'"),  # '@'
        ((12, 11), "queue"),  # same table as instance queue Sales.a
        ((14, 3), "a"),  # subscription table before 5.0
    ], str(info.value)
    assert str(info.value).splitlines() == [str(p) for p in info.value.problems]


# --------------------------------------------------------------------------- files
@pytest.mark.parametrize(
    "text, line, column, fragments",
    [
        pytest.param(
            'transport_version: "9.1"\nengines: [mssql, sqlite\nendpoints:\n  - name: Sales\n',
            3,
            10,
            ["not valid YAML", "expected ',' or ']'", "flow sequence at line 2"],
            id="unclosed-bracket",
        ),
        pytest.param(
            'transport_version: "9.1\nendpoints:\n  - name: Sales\n',
            4,
            1,
            ["not valid YAML", "end of stream", "quoted scalar at line 1"],
            id="unclosed-quote",
        ),
        pytest.param(
            'transport_version: "9.1"\nendpoints:\n  - name: Sales\n   instances: [a]\n',
            4,
            4,
            ["not valid YAML", "expected '-' indicator"],
            id="indentation",
        ),
        pytest.param(
            'transport_version: "9.1"\nendpoints:\n  - name: Sales: x\n',
            3,
            16,
            ["not valid YAML", "mapping values are not allowed"],
            id="colon",
        ),
        pytest.param(
            'transport_version: "9.1"\nendpoints:\n\t- name: Sales\n', 3, 1, ["a tab in the indentation", "spaces only"], id="tab"
        ),
        pytest.param(
            'transport_version: "9.1"\nendpoints:\n  - name: Sales\n\tinstances: [a]\n', 4, 1, ["a tab in the indentation"], id="tab-key"
        ),
        pytest.param(
            'transport_version: "9.1"\nendpoints:\n  - name: Sales\n    instances:\n    \t- a\n',
            5,
            5,
            ["a tab in the indentation"],
            id="tab-after-spaces",
        ),
    ],
)
def test_yaml_syntax_errors_report_the_line(text, line, column, fragments):
    assert_problem(text, line, column, *fragments)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"], ids=["empty", "blank", "comment"])
def test_an_empty_file(text):
    assert_problem(text, 1, 1, "the file is empty", "it needs at least transport_version")


def test_a_missing_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(TopologyError) as info:
        load(path)
    [problem] = info.value.problems
    assert (problem.mark.path, problem.mark.line, problem.mark.column) == (str(path), None, None)  # no line to point at
    assert "file not found" in problem.message and "--topology" in problem.message
    assert str(problem) == f"{path}: {problem.message}"


def test_every_located_error_is_one_form_and_only_a_writing_command_says_nothing_was_written(project, tmp_path, capsys):
    """`error: FILE[:LINE:COLUMN]: message`, as every other error line (`error: message`); validate and
    compile --check never write, so they do not say nothing was written."""
    absent = tmp_path / "absent.yaml"
    assert cli.main(["validate", "--topology", str(absent)]) == 2
    assert capsys.readouterr().err == f"error: {absent}: file not found; create it or pass --topology PATH\n"
    project.write_topology('transport_version: "9.1"\nqueues:\n  - name: error\n    colour: red\n')
    located = f"error: {project.topology}:4:5: unknown key 'colour'"
    for args, written in (
        (["validate", "--topology", str(project.topology)], False),
        (["compile", "--check", "-c", str(project.ini), "--topology", str(project.topology)], False),
        (["compile", "-m", "x", "-c", str(project.ini), "--topology", str(project.topology)], True),
    ):
        assert cli.main(args) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(located) and line.endswith(" (nothing was written)") is written, line
    assert cli.main(["validate", "--topology", str(project.topology), "--format", "json"]) == 2
    (problem,) = json.loads(capsys.readouterr().out)["problems"]
    assert (problem["file"], problem["line"], problem["column"]) == (str(project.topology), 4, 5)


def test_load_marks_problems_with_the_file_path(tmp_path):
    path = tmp_path / "topology.yaml"
    path.write_text('transport_version: "9.1"\nqueues:\n  - name: "Заказы"\n  - name: "заказы"\n', encoding="utf-8")
    with pytest.raises(TopologyError) as info:
        load(path)
    assert [str(p.mark) for p in info.value.problems] == [f"{path}:4:11"]


# --------------------------------------------------------------------------- defaults
def test_delayed_tables_by_default_from_3_1_on():
    text = 'transport_version: "{}"\nengines: [mssql, sqlite]\nendpoints:\n  - name: Sales\n'
    assert tables(text.format("3.1"))[TableName("Sales.Delayed")] is Kind.DELAYED
    assert tables(text.format("9.1"))[TableName("Sales.Delayed")] is Kind.DELAYED
    assert tables(text.format("3.0")) == {TableName("Sales"): Kind.QUEUE}


def test_the_delayed_table_suffix_and_opting_out():
    found = tables(
        'transport_version: "9.1"\nengines: [mssql]\ndelayed_table_suffix: Timeouts\nsubscriptions: false\n'
        "endpoints:\n  - name: Sales\n  - name: Billing\n    delayed_delivery: false\n"
    )
    assert found == {TableName("Sales"): Kind.QUEUE, TableName("Billing"): Kind.QUEUE, TableName("Sales.Timeouts"): Kind.DELAYED}


def test_the_subscription_table_by_default_from_5_0_on():
    text = 'transport_version: "{}"\nengines: [mssql, sqlite]\n{}'
    subscriptions = lambda found: {name for name, kind in found.items() if kind is Kind.SUBSCRIPTIONS}  # noqa: E731
    assert subscriptions(tables(text.format("5.0", ""))) == {TableName("SubscriptionRouting")}
    assert subscriptions(tables(text.format("9.1", ""))) == {TableName("SubscriptionRouting")}
    assert subscriptions(tables(text.format("4.3.1", ""))) == set()
    assert subscriptions(tables(text.format("9.1", "subscriptions: false\n"))) == set()
    assert subscriptions(tables(text.format("9.1", "subscriptions:\n  table: Subs\n  schema: pubsub\n"))) == {TableName("Subs", "pubsub")}


def test_send_only_endpoints_own_no_tables():
    found = tables(
        'transport_version: "9.1"\nengines: [mssql]\nsubscriptions: false\n'
        "endpoints:\n  - name: Web\n    send_only: true\n    delayed_delivery: false\n    instances: []\n"
    )
    assert found == {}


def test_schema_and_catalog_defaults_flow_to_every_table():
    topo = valid(
        """\
        transport_version: "9.1"
        engines: [mssql]
        default_schema: ops
        default_catalog: bus
        endpoints:
          - name: Sales
            instances: [a]
          - name: Billing
            schema: billing
          - name: Shipping
            catalog: logistics
        queues:
          - name: error
        discard:
          - name: old
        """
    )
    assert (topo.default_schema, topo.default_catalog) == ("ops", "bus")
    assert set(tables_of(topo)) == {
        TableName("Sales", "ops", "bus"),
        TableName("Sales.a", "ops", "bus"),
        TableName("Sales.Delayed", "ops", "bus"),
        TableName("Billing", "billing", "bus"),
        TableName("Billing.Delayed", "billing", "bus"),
        TableName("Shipping", "ops", "logistics"),
        TableName("Shipping.Delayed", "ops", "logistics"),
        TableName("error", "ops", "bus"),
        TableName("SubscriptionRouting", "ops", "bus"),
    }
    assert blueprint(topo).discarded == {TableName("old", "ops", "bus")}


def tables_of(topo) -> list[TableName]:
    return [spec.name for spec in blueprint(topo).tables]


def test_no_default_schema_leaves_the_engine_default():
    topo = valid('transport_version: "9.1"\nqueues:\n  - name: error\n')
    assert topo.engines == ("mssql", "postgresql", "sqlite")
    assert tables_of(topo) == [TableName("error"), TableName("SubscriptionRouting")]


def test_explicit_null_means_the_default():
    topo = valid('transport_version: "9.1"\nengines:\ndelayed_table_suffix:\nendpoints:\n  - name: Sales\n    instances:\n')
    assert topo.engines == ("mssql", "postgresql", "sqlite")
    assert TableName("Sales.Delayed") in tables_of(topo)


# --------------------------------------------------------------------------- hostile names
HOSTILE = ["a.b", "two words", "br]acket", 'quo"te', "apo'strophe", "semi;colon", "Fäktura", "Заказы"]


def test_hostile_names_load_and_survive_into_the_blueprint():
    quoted = [json.dumps(name, ensure_ascii=False) for name in HOSTILE]  # a JSON string is a YAML string
    text = (
        'transport_version: "9.1"\n'
        f"default_schema: {json.dumps('my schema]', ensure_ascii=False)}\n"
        "subscriptions:\n  table: \"Sub'scrip;tions\"\n"
        "endpoints:\n"
        + "".join(f"  - name: {q}\n    instances: [{q}]\n" for q in quoted[:4])
        + "queues:\n"
        + "".join(f"  - name: {q}\n" for q in quoted[4:])
    )
    topo = valid(text)
    assert [ep.name for ep in topo.endpoints] == HOSTILE[:4]
    assert [ep.instances for ep in topo.endpoints] == [(name,) for name in HOSTILE[:4]]
    assert [q.name for q in topo.queues] == HOSTILE[4:]
    expected = (
        [TableName(table, "my schema]") for name in HOSTILE[:4] for table in (name, f"{name}.{name}")]
        + [TableName(name, "my schema]") for name in HOSTILE[4:]]
        + [TableName(f"{name}.Delayed", "my schema]") for name in HOSTILE[:4]]
        + [TableName("Sub'scrip;tions", "my schema]")]
    )
    assert tables_of(topo) == expected


def test_non_ascii_names_in_the_file_as_written(tmp_path):
    path = tmp_path / "topology.yaml"
    path.write_text(
        'transport_version: "9.1"\nendpoints:\n  - name: Fäktura\n    schema: Заказы\nqueues:\n  - name: Заказы\n',
        encoding="utf-8",
    )
    assert tables_of(load(path)) == [
        TableName("Fäktura", "Заказы"),
        TableName("Заказы"),
        TableName("Fäktura.Delayed", "Заказы"),
        TableName("SubscriptionRouting"),
    ]


def test_the_committed_json_schema_is_generated_from_the_format():
    committed = json.loads((REPO / "topology.schema.json").read_text(encoding="utf-8"))
    assert committed == json_schema(), "topology.schema.json is stale: run `sqltransport-schema json-schema -o topology.schema.json`"


def test_the_example_topology_is_valid_for_both():
    path = REPO / "topology.yaml"
    load(path)
    errors = list(validator().iter_errors(yaml.safe_load(path.read_text(encoding="utf-8"))))
    assert errors == []
    assert "$schema=./topology.schema.json" in path.read_text(encoding="utf-8").splitlines()[0]


STRUCTURALLY_BAD = {
    "unknown-top-level-key": 'transport_version: "9.1"\nendpoint: []\n',
    "unknown-endpoint-key": 'transport_version: "9.1"\nendpoints:\n  - name: Sales\n    instance: [a]\n',
    "list-for-name": 'transport_version: "9.1"\nendpoints:\n  - name: [Sales]\n',
    "number-for-name": 'transport_version: "9.1"\nqueues:\n  - name: 42\n',
    "mapping-for-list": 'transport_version: "9.1"\nendpoints:\n  name: Sales\n',
    "yes-as-string": 'transport_version: "9.1"\nendpoints:\n  - name: Sales\n    send_only: "yes"\n',
    "empty-name": 'transport_version: "9.1"\nqueues:\n  - name: ""\n',
    "blank-name": 'transport_version: "9.1"\nqueues:\n  - name: "   "\n',
    "unquoted-version": "transport_version: 9.1\n",
    "version-abc": 'transport_version: "abc"\n',
    "version-10": 'transport_version: "10.0"\n',
    "missing-name": 'transport_version: "9.1"\nqueues:\n  - schema: ops\n',
    "missing-version": "engines: [mssql]\n",
    "unknown-engine": 'transport_version: "9.1"\nengines: [postgres]\n',
    "subscriptions-string": 'transport_version: "9.1"\nsubscriptions: Subs\n',
}


@pytest.mark.parametrize("text", list(STRUCTURALLY_BAD.values()), ids=list(STRUCTURALLY_BAD))
def test_the_json_schema_rejects_what_the_loader_rejects(text):
    problems(text)
    assert list(validator().iter_errors(yaml.safe_load(text))), "the editor schema accepts what the loader rejects"


@pytest.mark.parametrize(
    "text",
    [
        'transport_version: "9.1"\n',
        'transport_version: "4.3.1"\nengines: [mssql]\nsubscriptions: false\ndefault_schema: null\n',
        'transport_version: "9.1"\nendpoints:\n  - name: "Заказы"\n    instances: ["a;b"]\n    send_only: false\n',
    ],
)
def test_the_json_schema_accepts_what_the_loader_accepts(text):
    valid(text)
    assert list(validator().iter_errors(yaml.safe_load(text))) == []


# --------------------------------------------------------------------------- the validate command
def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "topology.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_validate_a_valid_topology(tmp_path, capsys):
    path = write(tmp_path, 'transport_version: "9.1"\nendpoints:\n  - name: Sales\n')
    assert cli.main(["validate", "--topology", path]) == 0
    assert f"{path}: valid (3 tables)" in capsys.readouterr().out
    assert cli.main(["validate", "--topology", path, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"status": "valid", "file": path, "tables": 3}


def test_validate_the_example(capsys):
    assert cli.main(["validate", "--topology", str(REPO / "topology.yaml")]) == 0


def test_validate_an_invalid_topology(tmp_path, capsys):
    path = write(tmp_path, 'transport_version: "9.1"\nqueues:\n  - name: ""\n  - name: error\n    colour: red\n')
    assert cli.main(["validate", "--topology", path]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}:3:11: queues[0].name must not be empty" in err
    assert f"error: {path}:5:5: unknown key 'colour'" in err
    assert err.splitlines()[-1] == "2 problem(s)."  # validate writes nothing, so it does not say so


def test_validate_reports_json_for_ci(tmp_path, capsys):
    path = write(tmp_path, 'transport_version: 9.1\nqueues:\n  - name: "a@b"\n')
    assert cli.main(["validate", "--topology", path, "--format", "json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "invalid"
    [problem] = report["problems"]
    assert problem["file"] == path
    assert (problem["line"], problem["column"]) == (1, 20)
    assert 'write it quoted, e.g. transport_version: "9.1"' in problem["message"]


def test_validate_a_missing_file(tmp_path, capsys):
    path = str(tmp_path / "absent.yaml")
    assert cli.main(["validate", "--topology", path, "--format", "json"]) == 2
    [problem] = json.loads(capsys.readouterr().out)["problems"]
    assert (problem["file"], problem["line"], problem["column"]) == (path, None, None)
    assert "file not found" in problem["message"]


def test_empty_engines_list_is_refused():
    with pytest.raises(TopologyError) as exc:
        loads('transport_version: "9.1"\nengines: []\n')
    [problem] = exc.value.problems
    assert (problem.mark.line, problem.mark.column) == (2, 10)
    assert "engines is empty" in problem.message


@pytest.mark.parametrize(
    "bad, message",
    [
        (b"\x00", "the character U+0000 is not allowed in a YAML file; remove it"),
        (b"\xff", "not UTF-8 text (byte 0xff): save the file as UTF-8, or remove or retype the character here"),
    ],
    ids=["nul", "invalid-utf8"],
)
@pytest.mark.parametrize("command", ["validate", "compile", "script"])
def test_an_unreadable_character_is_reported_at_its_line_and_column(project, capsys, bad, message, command):
    text = 'transport_version: "9.1"\nendpoints:\n  - name: Sa{}les\n'
    project.topology.write_bytes(text.replace("{}", "\0").encode().replace(b"\0", bad))
    before = sorted(project.versions.iterdir())
    args = {
        "validate": ["validate", "--topology", str(project.topology)],
        "compile": ["compile", "-m", "x", "-c", str(project.ini), "--topology", str(project.topology)],
        "script": ["script", "--engine", "postgresql", "-c", str(project.ini), "--topology", str(project.topology), "--split", "out"],
    }[command]
    if command == "script":
        project.topology.write_text(text.replace("{}", ""), encoding="utf-8")
        assert project.compile("initial") == 0
        project.topology.write_bytes(text.replace("{}", "\0").encode().replace(b"\0", bad))
        before = sorted(project.versions.iterdir())
        args[-1] = str(project.root / "split")
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {project.topology}:3:13: {message}")
    assert sorted(project.versions.iterdir()) == before and not (project.root / "split").exists()
