// Parse Mermaid text (stdin) with Mermaid's own parser and print what it read, as JSON:
// {"vertices": {id: {"text", "classes", "type"}}, "edges": [{"start", "end", "text"}],
//  "subgraphs": [{"id", "title", "nodes"}]}; exit 1 with the parser's message on a syntax error.
// With --lines, many texts in one process (a JSON string per line in, a line of JSON out, {"error"} for
// a syntax error). Used by tests/support/pictures.py; `npm ci --prefix tools/mermaid` installs what it imports.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });

// What Mermaid's parser read of text, or {error} for a syntax error.
async function parse(text) {
  let diagram;
  try {
    diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
  } catch (error) {
    return { error: String(error.message || error) };
  }
  const db = diagram.db;
  const found = db.getVertices();
  const entries = found instanceof Map ? [...found.entries()] : Object.entries(found);
  const vertices = Object.fromEntries(entries.map(([id, v]) => [id, { text: v.text, classes: v.classes, type: v.type }]));
  const edges = db.getEdges().map((e) => ({ start: e.start, end: e.end, text: e.text, stroke: e.stroke }));
  const subgraphs = db.getSubGraphs().map((s) => ({ id: s.id, title: s.title, nodes: s.nodes }));
  return { type: diagram.type, vertices, edges, subgraphs };
}

if (process.argv.includes("--lines")) {
  // One process for many texts (loading Mermaid and jsdom is most of a parse's cost): each stdin line a
  // JSON string, each answer one line of JSON, in order, until stdin closes.
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    process.stdout.write(JSON.stringify(await parse(JSON.parse(line))) + "\n");
  }
} else {
  const parsed = await parse(readFileSync(0, "utf8"));
  if (parsed.error !== undefined) {
    process.stderr.write(parsed.error + "\n");
    process.exit(1);
  }
  process.stdout.write(JSON.stringify(parsed) + "\n");
}
