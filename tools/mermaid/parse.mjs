// Parse Mermaid text (stdin) with Mermaid's own parser and print what it read, as JSON:
// {"vertices": {id: {"text", "classes", "type"}}, "edges": [{"start", "end", "text"}],
//  "subgraphs": [{"id", "title", "nodes"}]}; exit 1 with the parser's message on a syntax error.
// Used by tests/support/mermaid.py; `npm ci --prefix tools/mermaid` installs what it imports.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });

const text = readFileSync(0, "utf8");
let diagram;
try {
  diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
} catch (error) {
  process.stderr.write(String(error.message || error) + "\n");
  process.exit(1);
}
const db = diagram.db;
const found = db.getVertices();
const entries = found instanceof Map ? [...found.entries()] : Object.entries(found);
const vertices = Object.fromEntries(entries.map(([id, v]) => [id, { text: v.text, classes: v.classes, type: v.type }]));
const edges = db.getEdges().map((e) => ({ start: e.start, end: e.end, text: e.text, stroke: e.stroke }));
const subgraphs = db.getSubGraphs().map((s) => ({ id: s.id, title: s.title, nodes: s.nodes }));
process.stdout.write(JSON.stringify({ type: diagram.type, vertices, edges, subgraphs }) + "\n");
