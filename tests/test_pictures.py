"""graph and the pictures of the markdown reports, read back by their renderers: DOT laid out by
Graphviz's dot, Mermaid read by Mermaid's own parser; of the example topology, of names holding
quotes, brackets, dots, spaces and markup, and of live SQLite and PostgreSQL databases."""

from __future__ import annotations

import os
import sys
import uuid
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from sqltransport_schema import cli, pictures, topology, wire
from sqltransport_schema.db import make_engine
from sqltransport_schema.runtime.transport import Transport
from sqltransport_schema.schema import Kind, TableName, TableSpec, blueprint

from .support.pictures import dot_drawn_labels, dot_layout, mermaid_blocks, mermaid_lines, parse_mermaid
from .support.projects import REPO

EXAMPLE = REPO / "topology.yaml"
DOCS = REPO / "docs" / "pictures.md"
# The example topology's groups, as topology.yaml makes them (WebFrontend sends only: no tables).
EXAMPLE_GROUPS = {
    "endpoint Sales": {"Sales", "Sales.host-a", "Sales.host-b", "Sales.Delayed", "Sales_OrderSaga"},
    "endpoint Billing": {"Billing", "Billing.Delayed", "Bill_Invoices", "Bill_OutboxData"},
    "endpoint Shipping": {"Shipping"},
}
UNGROUPED = {"error", "audit", "SubscriptionRouting", "error_archive", "ConsoleActions"}
# Deployed by the live tests: two endpoints, one with instances and a saga, the plain queues.
LIVE = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a]
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
  - name: Billing
queues:
  - name: error
  - name: audit
"""
TOPIC = "Shop.OrderPlaced"


def run_cli(*argv: str, capsys, code: int = 0) -> str:
    capsys.readouterr()
    assert cli.main(list(argv)) == code
    return capsys.readouterr().out


def example_tables() -> set[str]:
    return {spec.name.table for spec in blueprint(topology.load(EXAMPLE)).tables}


# ------------------------------------------------------------------------------- the example topology
def test_dot_of_the_example_is_laid_out_by_dot_every_table_a_node_in_its_endpoints_cluster(capsys):
    text = run_cli("graph", "--format", "dot", "--topology", str(EXAMPLE), capsys=capsys)
    layout = dot_layout(text)
    drawn = dot_drawn_labels(text)
    names = {node: lines[0] for node, lines in drawn.items()}
    assert sorted(names.values()) == sorted(example_tables())  # every table once, nothing else
    objects = layout["objects"]
    clusters = {o["label"]: {names[objects[i]["name"]] for i in o["nodes"]} for o in objects if o["name"].startswith("cluster_")}
    assert clusters == EXAMPLE_GROUPS
    assert drawn[next(n for n, name in names.items() if name == "Billing.Delayed")] == ["Billing.Delayed", "schema billing", "delayed"]
    assert {e.get("style") for e in layout.get("edges", [])} <= {"invis"}  # no subscriptions without a database


def test_mermaid_of_the_example_is_read_by_mermaid_every_table_a_vertex_in_its_endpoints_subgraph(capsys):
    text = run_cli("graph", "--topology", str(EXAMPLE), capsys=capsys)
    parsed = parse_mermaid(text)
    assert parsed["type"] == "flowchart-v2"
    names = {key: mermaid_lines(v["text"])[0] for key, v in parsed["vertices"].items()}
    assert sorted(names.values()) == sorted(example_tables())
    groups = {s["title"]: {names[n] for n in s["nodes"]} for s in parsed["subgraphs"]}
    assert groups == EXAMPLE_GROUPS
    assert set(names.values()) - set().union(*groups.values()) == UNGROUPED


def test_the_docs_show_the_example_as_graph_draws_it(capsys, monkeypatch):
    """docs/pictures.md's picture of topology.yaml is what `sqltransport-schema graph` prints in the
    repository folder; SQLTRANSPORT_UPDATE_GOLDEN=1 writes it there again."""
    monkeypatch.chdir(REPO)
    block = "```mermaid\n" + run_cli("graph", capsys=capsys) + "```\n"
    text, start, end = docs_picture()
    if os.environ.get("SQLTRANSPORT_UPDATE_GOLDEN"):
        DOCS.write_text(text[:start] + block + text[end:], encoding="utf-8")
        text, start, end = docs_picture()
    assert text[start:end] == block, (
        "docs/pictures.md shows a stale picture of topology.yaml; write it again with "
        "SQLTRANSPORT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_pictures.py -k docs"
    )


def docs_picture() -> tuple[str, int, int]:
    """docs/pictures.md, and where its ```mermaid block after EXAMPLE_MARK starts and ends."""
    text = DOCS.read_text(encoding="utf-8")
    start = text.index(EXAMPLE_MARK) + len(EXAMPLE_MARK) + 1
    return text, start, text.index("```\n", text.index("```mermaid", start) + 3) + 4


EXAMPLE_MARK = "<!-- the example topology: sqltransport-schema graph (tests/test_pictures.py keeps it current) -->"


# -------------------------------------------------------------------------------------------- names
ODD_NAMES = [
    'Sales "EU"',
    "orders[1].v2 (old)",
    "C:\\queues\\new\\N",
    "#35; <b>bold</b> &amp; | `tick`",
    "O'Brien's queue",
    "{curly} %% not a comment",
]


def odd_diagram() -> pictures.Diagram:
    specs = [TableSpec(Kind.QUEUE, TableName(name, "my schema")) for name in ODD_NAMES]
    owners = {spec.name: 'endpoint "A" [x].y' for spec in specs[:3]}
    rows = [pictures.Subscription('Topic "1" <T>', "Sub #1 | x", wire.Address(ODD_NAMES[0]).format(), specs[0].name)]
    return pictures.draw('title "with" quotes', specs, owners=owners, subscriptions=rows, notes={specs[1].name: "depth 3, oldest 1.0h"})


def test_odd_names_reach_dots_drawing_as_written():
    text = pictures.dot(odd_diagram())
    drawn = dot_drawn_labels(text)
    assert sorted(lines[0] for lines in drawn.values()) == sorted([*ODD_NAMES, 'Topic "1" <T>'])
    assert ["orders[1].v2 (old)", "schema my schema", "queue", "depth 3, oldest 1.0h"] in drawn.values()
    layout = dot_layout(text)
    assert [o["label"] for o in layout["objects"] if o["name"].startswith("cluster_")] == ['endpoint "A" [x].y']
    assert [e["label"] for e in layout["edges"] if e.get("style") != "invis"] == ["Sub #1 | x"]


def test_odd_names_reach_mermaids_parser_as_written():
    parsed = parse_mermaid(pictures.mermaid(odd_diagram()))
    lines = {key: mermaid_lines(v["text"]) for key, v in parsed["vertices"].items()}
    assert sorted(label[0] for label in lines.values()) == sorted([*ODD_NAMES, 'Topic "1" <T>'])
    assert ["orders[1].v2 (old)", "schema my schema", "queue", "depth 3, oldest 1.0h"] in lines.values()
    assert [mermaid_lines(s["title"]) for s in parsed["subgraphs"]] == [['endpoint "A" [x].y']]
    (edge,) = [e for e in parsed["edges"] if e["stroke"] != "invisible"]
    assert mermaid_lines(edge["text"]) == ["Sub #1 | x"]
    assert lines[edge["start"]][0] == 'Topic "1" <T>' and lines[edge["end"]][0] == 'Sales "EU"'


# ---------------------------------------------------------------------------------- svg and files
def test_svg_and_dot_go_to_the_file_given(tmp_path, capsys):
    svg, dot = tmp_path / "topology.svg", tmp_path / "topology.dot"
    assert run_cli("graph", "--format", "svg", "--topology", str(EXAMPLE), "-o", str(svg), capsys=capsys) == ""
    root = ET.fromstring(svg.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")} >= example_tables()
    assert run_cli("graph", "--format", "dot", "--topology", str(EXAMPLE), "-o", str(dot), capsys=capsys) == ""
    assert dot.read_text(encoding="utf-8") == run_cli("graph", "--format", "dot", "--topology", str(EXAMPLE), capsys=capsys)


@pytest.mark.parametrize("missing", ["dot program", "python package"])
def test_svg_without_graphviz_is_one_error_line_naming_what_to_install(missing, tmp_path, capsys, monkeypatch):
    if missing == "dot program":
        monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without Graphviz's dot
    else:
        monkeypatch.setitem(sys.modules, "graphviz", None)  # as without the package: its import fails
    target = tmp_path / "topology.svg"
    capsys.readouterr()
    assert cli.main(["graph", "--format", "svg", "--topology", str(EXAMPLE), "-o", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("error: ")
    assert "apt-get install graphviz" in err and "pip install 'sqltransport-schema[graph]'" in err
    assert ("dot program is not on PATH" if missing == "dot program" else "graphviz package is not installed") in err
    assert not target.exists()


# ----------------------------------------------------------------------------------- live databases
@pytest.fixture
def live(project, db_url, monkeypatch):
    """LIVE deployed and in use: messages waiting, two subscribers of TOPIC; Billing's delayed table
    dropped (missing) and a table no revision names (unmanaged)."""
    project.deploy(db_url, LIVE)
    monkeypatch.chdir(project.root)
    transport = Transport.from_database(make_engine(db_url))
    sales, billing = transport.queue("Sales"), transport.queue("Billing")
    two_hours_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    sent = [wire.standard_headers(message_id=str(uuid.uuid4()), enclosed_types=[TOPIC], reply_to=None, now=two_hours_ago) for _ in range(3)]
    with transport.engine.begin() as conn:
        sales.send_many(conn, [(b"x", headers) for headers in sent])
        subscriptions = transport.subscriptions()
        subscriptions.subscribe(conn, "Sales", sales.address, TOPIC)
        subscriptions.subscribe(conn, "Billing", billing.address, TOPIC)
        delayed = transport.dialect.qualified(transport.name("Billing.Delayed"), transport.profile)
        conn.exec_driver_sql(f"DROP TABLE {delayed}")
        conn.exec_driver_sql('CREATE TABLE "stray table" (id integer)')
    transport.engine.dispose()
    return db_url


def stray(url: str) -> str:
    """The unmanaged table as check names it: with its schema where the engine has schemas."""
    return "public.stray table" if url.startswith("postgresql") else "stray table"


def vertices(parsed: dict) -> dict[str, list[str]]:
    return {key: mermaid_lines(v["text"]) for key, v in parsed["vertices"].items()}


def by_name(parsed: dict, name: str) -> tuple[str, list[str], list[str]]:
    """(id, lines, classes) of the vertex whose first line is name."""
    return next((key, lines, parsed["vertices"][key]["classes"]) for key, lines in vertices(parsed).items() if lines[0] == name)


def test_graph_of_a_live_database_draws_subscribers_depths_missing_and_unmanaged_tables(live, capsys):
    text = run_cli("graph", "--url", live, capsys=capsys)
    parsed = parse_mermaid(text)
    topic, _, _ = by_name(parsed, TOPIC)
    sales, sales_lines, _ = by_name(parsed, "Sales")
    billing, _, _ = by_name(parsed, "Billing")
    edges = {(e["start"], e["end"], e["text"]) for e in parsed["edges"] if e["stroke"] != "invisible"}
    assert edges == {(topic, sales, "Sales"), (topic, billing, "Billing")}
    assert sales_lines[-1].startswith("depth 3, oldest 2.0h")
    _, lines, classes = by_name(parsed, "Billing.Delayed")
    assert lines[-1] == "delayed (missing)" and classes == ["missing"]
    _, lines, classes = by_name(parsed, stray(live))
    assert lines[-1] == "table (unmanaged)" and classes == ["unmanaged"]
    groups = {s["title"]: {vertices(parsed)[n][0] for n in s["nodes"]} for s in parsed["subgraphs"]}
    assert groups == {
        "endpoint Sales": {"Sales", "Sales.host-a", "Sales.Delayed", "Sales_OrderSaga"},
        "endpoint Billing": {"Billing", "Billing.Delayed"},
    }
    drawn = dot_drawn_labels(run_cli("graph", "--url", live, "--format", "dot", capsys=capsys))
    assert [TOPIC, "topic"] in drawn.values()


def test_status_and_check_in_markdown_draw_depths_and_drift(live, capsys):
    status = run_cli("status", "--url", live, "--format", "markdown", capsys=capsys, code=1)  # a table is missing
    (block,) = mermaid_blocks(status)
    parsed = parse_mermaid(block)
    assert by_name(parsed, "Sales")[1][-1].startswith("depth 3")
    assert by_name(parsed, "Billing.Delayed")[2] == ["missing"]
    assert any(e["text"] == "Billing" for e in parsed["edges"])
    with make_engine(live).begin() as conn:  # drift in a table's columns too
        conn.execute(sa.text('ALTER TABLE "Sales" ADD COLUMN "Extra" integer'))
    check = run_cli("check", "--url", live, "--format", "markdown", capsys=capsys, code=1)
    (block,) = mermaid_blocks(check)
    parsed = parse_mermaid(block)
    assert by_name(parsed, "Sales")[2] == ["changed"]
    assert by_name(parsed, "Billing.Delayed")[2] == ["missing"]
    assert by_name(parsed, stray(live))[2] == ["unmanaged"]
    assert by_name(parsed, "audit")[2] == []


# ------------------------------------------------------------------------------------ compile's change
def test_compile_in_markdown_draws_the_change_added_removed_and_changed_apart(project, capsys):
    project.write_topology(LIVE)
    args = ("-c", str(project.ini), "--topology", str(project.topology), "--format", "markdown")
    pending = run_cli("compile", "--check", *args, capsys=capsys, code=1)
    assert pending.startswith("### sqltransport-schema compile: pending")
    (block,) = mermaid_blocks(pending)
    assert {tuple(v["classes"]) for v in parse_mermaid(block)["vertices"].values()} == {("added",)}
    compiled = run_cli("compile", "-m", "initial", *args, capsys=capsys)
    assert compiled.startswith("### sqltransport-schema compile: compiled") and len(mermaid_blocks(compiled)) == 1
    project.write_topology(
        LIVE.replace("instances: [host-a]", "instances: [host-b]").replace('"9.1"', '"9.1"\npostgresql: {seq_type: bigserial}')
    )
    changed = run_cli("compile", "--check", *args, capsys=capsys, code=1)
    (block,) = mermaid_blocks(changed)
    parsed = parse_mermaid(block)
    assert by_name(parsed, "Sales.host-b")[2] == ["added"]
    assert by_name(parsed, "Sales.host-a")[2] == ["removed"]
    assert by_name(parsed, "Sales")[2] == ["changed"]  # its Seq widened
    assert by_name(parsed, "Sales.Delayed")[2] == []
    assert {s["title"] for s in parsed["subgraphs"]} == {"endpoint Sales", "endpoint Billing"}
    assert "- `` create queue \"Sales.host-b\" (transport 9.1) ``" in changed


# ---------------------------------------------------------------------------------- who owns what
GROUPED = """\
transport_version: "9.1"
endpoints:
  - name: Sales
    instances: [host-a, host-b]
    sagas:
      - name: OrderSaga
        correlation: {name: OrderId, type: guid}
  - name: Sales.EU                  # an endpoint of its own (its own delayed table), not an instance of Sales
    instances: [eu-1]
  - name: Billing
    schema: billing
    table_prefix: Bill_             # no endpoint's default prefix: the one endpoint in its schema
    outbox: true
    sagas:
      - name: InvoiceSaga
        correlation: {name: InvoiceNumber, type: int}
queues:
  - name: error
  - name: audit
"""


def test_a_blueprint_alone_groups_its_tables_as_the_topology_does():
    """What graph --url, check and the removed tables of compile have is a blueprint, which records
    no endpoints: the guess from its names gives each table the endpoint the topology gives it."""
    loaded = topology.loads(GROUPED)
    assert pictures.guess_owners(blueprint(loaded).tables) == pictures.topology_owners(loaded)
    assert pictures.topology_owners(loaded)[TableName("Sales.EU.eu-1")] == "endpoint Sales.EU"
    assert pictures.topology_owners(loaded)[TableName("Bill_OutboxData", "billing")] == "endpoint Billing"


def test_a_large_change_in_markdown_draws_only_the_tables_it_touches(project, capsys):
    """A pull-request comment's picture holds at most MARKDOWN_TABLES tables: past that, those the
    change adds, removes or changes, and its title says how many of how many."""
    endpoints = "".join(f"  - name: Endpoint{i}\n" for i in range(100))  # 200 tables: a queue and a delayed table each
    project.write_topology(f'transport_version: "9.1"\nendpoints:\n{endpoints}')
    assert project.compile("initial") == 0
    project.write_topology(f'transport_version: "9.1"\nendpoints:\n{endpoints}  - name: Shipping\n')
    args = ("-c", str(project.ini), "--topology", str(project.topology), "--format", "markdown")
    (block,) = mermaid_blocks(run_cli("compile", "--check", *args, capsys=capsys, code=1))
    parsed = parse_mermaid(block)
    assert {lines[0]: parsed["vertices"][key]["classes"] for key, lines in vertices(parsed).items()} == {
        "Shipping": ["added"],
        "Shipping.Delayed": ["added"],
    }
    assert "2 of 203 tables drawn: those it adds, removes or changes" in block
