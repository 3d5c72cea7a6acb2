#!/usr/bin/env python3
"""Conformance self-check: is the SQL this project prints and deploys token-equal to the SQL that the
NServiceBus SQL Server and PostgreSQL transports execute?

Run from the project root (standard library only):

    python ../shared/conformance/check.py [--sqltransport-schema PATH] [--alembic PATH]
                                          [--format text|json] [--engine E] [--release TAG ...]

The upstream side is `digests.json` next to this file: for each release and SQL constant of the
transport, the sha256 of its normalised text, rendered with fixed names (catalog `nservicebus`, schema
`dbo` or `public`, queue `Sales`, delayed table `Sales.Delayed`, subscription table
`SubscriptionRouting`, peek batch 1000, one topic `@Topic_0`). No upstream SQL text is kept.

The project side is read through its public commands only, from a scratch copy of the working tree
(`git ls-files`: tracked and untracked, not ignored, so uncommitted work counts):

  runtime  `sqltransport-schema statements --engine E --transport-version TAG ... --format json`
  DDL      a one-endpoint topology.yaml, `sqltransport-schema compile`, then
           `alembic -x url=E:// upgrade head --sql`, split into T-SQL batches (at GO) or PostgreSQL
           statements (at ';' outside quotes, dollar quotes and comments).

Normalisation (both sides): tokens by the regex \\w+|[^\\w\\s], lower-cased, joined with one space, a
final ';' token dropped. A runtime constant matches when the digest of the project statement it maps to
is equal (two statements joined by ' ; ' for PostgreSQL's move of due delayed messages); a DDL constant
matches when some batch, or on PostgreSQL some run of one to three consecutive statements, has its
digest, as printed or with its leading comment lines removed.

Exit status: 0 when every upstream statement is matched, 1 when some are not, 2 when the check could
not run (a tool missing, a command failing).
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOKEN = re.compile(r"\w+|[^\w\s]")
ENGINES = ("mssql", "postgresql")
LABEL = {"mssql": "SQL Server", "postgresql": "PostgreSQL"}
NAMES = {
    "mssql": {"queue": "Sales", "schema": "dbo", "catalog": "nservicebus"},
    "postgresql": {"queue": "Sales", "schema": "public"},
}
# project statements that no public command prints: reported as not rendered, not counted
NOT_PUBLIC = {
    "send_norec": "no public command prints the send into a queue whose Recoverable column was dropped "
    "(`statements` prints only the send with Recoverable)",
}
DDL_UNIT_OF = {"create_queue": "queue", "create_delayed": "delayed", "create_subscriptions": "subscriptions"}


def normalize(sql):
    toks = [t.lower() for t in TOKEN.findall(sql)]
    if toks and toks[-1] == ";":
        toks.pop()
    return " ".join(toks)


def sha(norm):
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()


def ntokens(norm):
    return len(norm.split(" ")) if norm else 0


def vkey(tag):
    return tuple(int(x) for x in tag.split("."))


# ---------------------------------------------------------------- tools and scratch copy
def find_tool(explicit, name, option):
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return str(path.resolve())
        print(f"check.py: {option} {explicit}: not an executable file", file=sys.stderr)
        raise SystemExit(2)
    for local in (Path(".venv/bin") / name, Path(".venv/Scripts") / (name + ".exe")):
        if local.is_file():
            return str(local.resolve())
    found = shutil.which(name)
    if found:
        return found
    print(
        f"check.py: `{name}` not found in .venv/bin nor on PATH; install the project (pip install -e .) or pass {option} PATH",
        file=sys.stderr,
    )
    raise SystemExit(2)


def tool_env(tools):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("SQLTRANSPORT_URL", None)  # offline only: never reach a database
    dirs = []
    for t in tools:
        d = str(Path(t).parent)
        if d not in dirs:
            dirs.append(d)
    env["PATH"] = os.pathsep.join(dirs + [env.get("PATH", "")])
    return env


def run(cmd, cwd, env, timeout=300):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout} s"
    return p.returncode, p.stdout, p.stderr


def scratch_copy(project):
    """A copy of the working tree's files (tracked + untracked, not ignored) with no compiled revisions."""
    root = Path(tempfile.mkdtemp(prefix="conformance."))
    base = root / "project"
    files = None
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=project, capture_output=True, check=True
        ).stdout
        files = [f for f in out.decode("utf-8", "surrogateescape").split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        pass
    if files is None:  # not a git checkout: copy everything but the usual local state
        shutil.copytree(
            project, base, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", "*.db", "*.sqlite", ".pytest_cache")
        )
    else:
        for f in files:
            src = project / f
            if not src.is_file():  # deleted in the working tree, or a submodule
                continue
            dst = base / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    versions = base / "migrations" / "versions"
    if versions.is_dir():
        for f in versions.glob("*.py"):
            f.unlink()
    return root, base


# ---------------------------------------------------------------- project side
def runtime_statements(sts, cwd, env, engine, tag, render):
    n = NAMES[engine]
    cmd = [
        sts,
        "statements",
        "--engine",
        engine,
        "--transport-version",
        tag,
        "--queue",
        n["queue"],
        "--schema",
        n["schema"],
        "--subscription-table",
        "SubscriptionRouting",
        "--delayed-suffix",
        "Delayed",
        "--topics",
        "1",
        "--format",
        "json",
    ]
    if engine == "mssql":
        cmd += ["--catalog", n["catalog"], "--peek-batch-size", str(render["mssql"]["peek_batch_size"])]
    rc, out, err = run(cmd, cwd, env, timeout=120)
    if rc != 0:
        return None, f"statements --engine {engine} --transport-version {tag}: exit {rc}: {(out + err).strip()[-400:]}"
    try:
        return {k: v["sql"] for k, v in json.loads(out)["statements"].items()}, ""
    except (ValueError, KeyError, TypeError) as e:
        return None, f"statements --engine {engine} --transport-version {tag}: unreadable JSON ({e!r})"


def topology(engine, tag, consts):
    subs = "CreateSubscriptionTableText" in consts
    body = "AddMessageBodyStringColumn" in consts
    if engine == "mssql":
        lines = [
            f'transport_version: "{tag}"',
            "engines: [mssql]",
            "delayed_table_suffix: Delayed",
            "subscriptions: {table: SubscriptionRouting, schema: dbo, catalog: nservicebus}" if subs else "subscriptions: false",
            "endpoints:",
            "  - name: Sales",
            "    schema: dbo",
            "    catalog: nservicebus",
        ]
    else:
        lines = [
            f'transport_version: "{tag}"',
            "engines: [postgresql]",
            "delayed_table_suffix: Delayed",
            "subscriptions: {table: SubscriptionRouting, schema: public}" if subs else "subscriptions: false",
            "endpoints:",
            "  - name: Sales",
            "    schema: public",
        ]
    if body:
        lines.append("    body_string: true")
    return "\n".join(lines) + "\n"


def ddl_script(base, engine, tag, consts, tools, env):
    d = base.parent / f"{engine}-{tag}"
    shutil.copytree(base, d)
    try:
        (d / "topology.yaml").write_text(topology(engine, tag, consts))
        rc, out, err = run([tools["sts"], "compile", "-m", "conformance"], d, env)
        if rc != 0:
            return None, f"compile ({engine} {tag}): exit {rc}: {(out + err).strip()[-400:]}"
        rc, out, err = run([tools["alembic"], "-x", f"url={engine}://", "upgrade", "head", "--sql"], d, env)
        if rc != 0:
            return None, f"alembic upgrade head --sql ({engine} {tag}): exit {rc}: {err.strip()[-400:]}"
        return out, ""
    finally:
        shutil.rmtree(d, ignore_errors=True)


def strip_leading_comments(text):
    lines = text.strip().splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "\n".join(lines)


def split_tsql(script):
    return [b for b in re.split(r"(?im)^\s*GO\s*;?\s*$", script) if b.strip()]


def split_pg(script):
    """Statements at ';' outside quotes, dollar quotes and comments (comments stay in their statement)."""
    out, buf, i, n = [], [], 0, len(script)
    dollar = re.compile(r"\$[A-Za-z_]?\w*\$")
    while i < n:
        c = script[i]
        if script.startswith("--", i):
            j = script.find("\n", i)
            j = n if j < 0 else j
        elif c in "'\"":
            j = i + 1
            while j < n:
                if script[j] == c:
                    if j + 1 < n and script[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            j = min(j + 1, n)
        elif c == "$" and dollar.match(script, i):
            tag = dollar.match(script, i).group(0)
            j = script.find(tag, i + len(tag))
            j = n if j < 0 else j + len(tag)
        elif c == ";":
            out.append("".join(buf))
            buf = []
            i += 1
            continue
        else:
            j = i + 1
        buf.append(script[i:j])
        i = j
    out.append("".join(buf))
    return [s for s in out if s.strip()]


def ddl_candidates(engine, script):
    """{digest: tokens} of every batch / statement (and PostgreSQL runs of 2-3 statements), plus the
    normalised units with leading comments removed, to name the project's counterpart of a miss."""
    units = split_tsql(script) if engine == "mssql" else split_pg(script)
    stripped = [strip_leading_comments(u) for u in units]
    cands = {}
    for u in units + stripped:
        nu = normalize(u)
        cands[sha(nu)] = ntokens(nu)
    if engine == "postgresql":
        for k in (2, 3):
            for i in range(len(stripped) - k + 1):
                nu = " ; ".join(normalize(s) for s in stripped[i : i + k])
                cands[sha(nu)] = ntokens(nu)
    return cands, [normalize(s) for s in stripped if s.strip()]


def ddl_counterpart(project, units, render, engine):
    if project == "add_body_string":
        hits = [u for u in units if "bodystring" in u.split(" ") and "alter table" in u]
    else:
        which = DDL_UNIT_OF.get(project)
        if which is None:
            return None
        pat = re.compile(r"create table (if not exists )?" + re.escape(normalize(render[engine][which])) + r" \(")
        hits = [u for u in units if pat.search(u)]
    return hits[0] if hits else None


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(
        description="Token-level conformance of the project's SQL with the upstream transports' SQL (digests in digests.json)."
    )
    ap.add_argument(
        "--sqltransport-schema",
        dest="sts",
        metavar="PATH",
        help="the project's CLI (default: .venv/bin/sqltransport-schema, else from PATH)",
    )
    ap.add_argument("--alembic", metavar="PATH", help="alembic (default: .venv/bin/alembic, else from PATH)")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    ap.add_argument("--engine", choices=ENGINES, action="append", help="only this engine (repeatable)")
    ap.add_argument("--release", action="append", metavar="TAG", help="only this release, e.g. 9.1.0 (repeatable)")
    ap.add_argument("--digests", metavar="FILE", default=str(HERE / "digests.json"))
    ap.add_argument("--jobs", type=int, default=0, help="parallel compiles (default: CPU count)")
    ap.add_argument("--show-project", action="store_true", help="text format: print the project's normalised tokens under each mismatch")
    a = ap.parse_args()

    project = Path.cwd()
    if not (project / "pyproject.toml").is_file() or not (project / "alembic.ini").is_file():
        print("check.py: run it from the project root (pyproject.toml and alembic.ini not found here)", file=sys.stderr)
        return 2
    tools = {
        "sts": find_tool(a.sts, "sqltransport-schema", "--sqltransport-schema"),
        "alembic": find_tool(a.alembic, "alembic", "--alembic"),
    }
    env = tool_env(tools.values())
    dig = json.loads(Path(a.digests).read_text(encoding="utf-8"))
    render = dig["render"]

    jobs = []
    for engine in a.engine or ENGINES:
        for tag in sorted(dig["engines"].get(engine, {}), key=vkey):
            if not a.release or tag in a.release:
                jobs.append((engine, tag))
    if not jobs:
        print("check.py: no release of digests.json matches the filters", file=sys.stderr)
        return 2

    errors, scripts, stmts = [], {}, {}
    root, base = scratch_copy(project)
    try:
        workers = a.jobs or min(len(jobs), os.cpu_count() or 2)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
            futs = {ex.submit(ddl_script, base, e, t, dig["engines"][e][t], tools, env): (e, t) for e, t in jobs}
            for e, t in jobs:
                stmts[(e, t)], why = runtime_statements(tools["sts"], base, env, e, t, render)
                if why:
                    errors.append(why)
            for f, key in futs.items():
                script, why = f.result()
                if why:
                    errors.append(why)
                scripts[key] = script
    finally:
        shutil.rmtree(root, ignore_errors=True)

    mismatches, not_rendered, per_release = [], {}, []
    tally = {e: [0, 0] for e in ENGINES}
    for engine, tag in jobs:
        consts = dig["engines"][engine][tag]
        st = stmts.get((engine, tag)) or {}
        script = scripts.get((engine, tag))
        cands, units = ddl_candidates(engine, script) if script is not None else ({}, [])
        got = want = 0
        for name in sorted(consts, key=lambda c: (consts[c]["kind"], c)):
            c = consts[name]
            project_name = c["project"]
            if project_name in NOT_PUBLIC:
                not_rendered.setdefault((engine, name, project_name), []).append(tag)
                continue
            want += 1
            detail = None
            if c["kind"] == "runtime":
                parts = project_name.split(";") if project_name else []
                ok = False
                if parts and all(p in st for p in parts):
                    norm = " ; ".join(normalize(st[p]) for p in parts)
                    ok = sha(norm) == c["sha256"]
                    detail = norm
            else:
                ok = c["sha256"] in cands
                detail = ddl_counterpart(project_name, units, render, engine) if project_name else None
            if ok:
                got += 1
                continue
            mismatches.append(
                {
                    "engine": engine,
                    "release": tag,
                    "upstream": name,
                    "project": project_name,
                    "kind": c["kind"],
                    "status": "missing" if detail is None else "diff",
                    "upstream_tokens": c["tokens"],
                    "project_tokens": None if detail is None else ntokens(detail),
                    "project_normalized": detail,
                }
            )
        tally[engine][0] += got
        tally[engine][1] += want
        per_release.append({"engine": engine, "release": tag, "matched": got, "total": want})

    matched = sum(v[0] for v in tally.values())
    total = sum(v[1] for v in tally.values())
    skipped = [
        {"engine": e, "upstream": n, "project": p, "releases": tags, "why": NOT_PUBLIC[p]}
        for (e, n, p), tags in sorted(not_rendered.items())
    ]

    if a.format == "json":
        for m in mismatches:
            m.pop("project_normalized", None)
        json.dump(
            {
                "matched": matched,
                "total": total,
                "per_engine": {e: {"matched": v[0], "total": v[1]} for e, v in tally.items() if v[1]},
                "per_release": per_release,
                "mismatches": mismatches,
                "not_rendered": skipped,
                "errors": errors,
            },
            sys.stdout,
            indent=1,
        )
        print()
    else:
        for m in mismatches:
            proj = m["project"] or "(no project statement)"
            if m["status"] == "diff":
                print(
                    f"DIFF     {m['engine']:<10} {m['release']:<7} {m['upstream']} -> {proj} "
                    f"(upstream {m['upstream_tokens']} tokens, project {m['project_tokens']})"
                )
            else:
                where = "no such statement printed" if m["kind"] == "runtime" else "no such batch deployed"
                print(
                    f"MISSING  {m['engine']:<10} {m['release']:<7} {m['upstream']} -> {proj} "
                    f"(upstream {m['upstream_tokens']} tokens; {where})"
                )
            if a.show_project and m["project_normalized"]:
                print(f"         project: {m['project_normalized']}")
        for s in skipped:
            print(f"not rendered: {s['engine']} {s['upstream']} -> {s['project']} ({', '.join(s['releases'])}): {s['why']}")
        for e in errors:
            print(f"could not run: {e}")
        print(", ".join(f"{LABEL[e]} {v[0]}/{v[1]}" for e, v in tally.items() if v[1]))
        print(f"conformance: {matched} of {total} upstream statements token-equal")
    if errors:
        return 2
    return 0 if matched == total else 1


if __name__ == "__main__":
    sys.exit(main())
