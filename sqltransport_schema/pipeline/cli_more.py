"""The pipeline subcommands beyond move: plan, run, archive, replay, backfill."""

from __future__ import annotations

import sys

from .cli import EXIT_ERROR, EXIT_OK, EXIT_PENDING, _emit, _endpoint, _session


def _config(args):
    from ..cli import _config as load_config

    return load_config(args.config)


def _mapping(pairs) -> dict[str, str]:
    out = {}
    for pair in pairs or ():
        old, sep, new = pair.partition("=")
        if not sep:
            raise ValueError(f"--map {pair!r}: expected OLD=NEW")
        out[old.strip()] = new.strip()
    return out


def _url(args, config) -> str:
    from ..urls import database_url

    return database_url(args.url, config)


def cmd_plan(args) -> int:
    from . import plan as planning

    config = _config(args)
    result = planning.plan(config, _url(args, config), args.to_rev, _mapping(args.map))
    lines = [f"data steps from revision {result.from_revision or '<none>'} to {result.to_revision}:"]
    lines += [f"  move {m.describe()}" for m in result.moves] or ["  no messages to move"]
    lines += [f"  discarded with its messages: {d}" for d in result.discarded]
    lines += [f"  unresolved: {u}" for u in result.unresolved]
    if result.moves:
        lines.append("Run: sqltransport-schema pipeline run (then alembic upgrade)")
    _emit(args, {"status": "unresolved" if result.unresolved else ("pending" if result.moves else "nothing"), **result.to_json()}, lines)
    return EXIT_PENDING if (result.moves or result.unresolved) else EXIT_OK


def cmd_run(args) -> int:
    from . import plan as planning

    config = _config(args)
    url = _url(args, config)
    result = planning.plan(config, url, args.to_rev, _mapping(args.map))
    if result.unresolved:
        lines = [f"unresolved: {u}" for u in result.unresolved] + ["nothing was moved"]
        _emit(args, {"status": "unresolved", **result.to_json()}, lines)
        return EXIT_ERROR
    spark = _session(args) if result.moves else None
    moves = planning.run(result, url, spark=spark, progress=None if args.format == "text" else False)
    lines = [f"moved {r.rows:,} message(s): {m.describe()}" for m, r in zip(result.moves, moves)] or ["no messages to move"]
    if result.moves:
        lines.append("Now: alembic upgrade " + (args.to_rev or "head"))
    _emit(args, {"status": "done", **result.to_json(), "results": [r.to_json() for r in moves]}, lines)
    return EXIT_OK


def cmd_archive(args) -> int:
    from .archive import archive

    spark = _session(args)
    if args.format == "text":
        sys.stderr.write(f"[archive] reading {args.table} through JDBC, writing Parquet to {args.output}\n")
    result = archive(spark, _endpoint(args.url, args.table, args.layout, "queue"), args.output, mode=args.mode,
                     partitions=args.partitions)
    _emit(args, {"status": "done", **result.to_json()},
          [f"archived {result.rows:,} message(s) of {result.source} to {result.path} "
           f"({len(result.dates)} date partition(s), {result.seconds:.1f} s)"])
    return EXIT_OK


def cmd_replay(args) -> int:
    from .archive import replay

    spark = _session(args)
    result = replay(spark, args.archive, _endpoint(args.url, args.table, args.layout, "queue"), replay_id=args.replay_id,
                    message_ids=args.message_id, message_types=args.message_type, since=args.since, until=args.until,
                    where=args.where, progress=None if args.format == "text" else False)
    _emit(args, {"status": "done", **result.to_json()},
          [f"replayed {result.rows:,} message(s) into {result.destination} "
           f"({result.skipped_batches} of {result.batches} batch(es) already done; replay id {result.replay_id})"])
    return EXIT_OK


def cmd_backfill(args) -> int:
    from .backfill import backfill

    spark = None if args.no_spark else _session(args)
    result = backfill(args.url, args.table, args.property, args.column, spark=spark, batch_size=args.batch_size,
                      overwrite=args.overwrite)
    _emit(args, {"status": "done" if not result.unreadable else "incomplete", **result.to_json()},
          [f"backfilled {result.updated:,} row(s) of {result.table}.{result.column} from Data.{result.property} "
           f"({result.missing} without the property, {result.unreadable} unreadable)"])
    return EXIT_PENDING if result.unreadable else EXIT_OK


def add_parsers(psub, spark_options, guard) -> None:
    def db_options(p):
        p.add_argument("--url", help="database URL (default: SQLTRANSPORT_URL, else sqlalchemy.url in alembic.ini)")
        p.add_argument("--config", "-c", default="alembic.ini", help="Alembic configuration (default: alembic.ini)")
        p.add_argument("--to", dest="to_rev", help="target revision (default: head)")
        p.add_argument("--map", action="append", default=[], metavar="OLD=NEW", help="destination of a removed queue (addresses)")
        p.add_argument("--format", choices=("text", "json"), default="text")

    p = psub.add_parser("plan", help="list the message moves the pending revisions need (exit 1 when there are some)")
    db_options(p)
    p.set_defaults(func=guard(cmd_plan))

    p = psub.add_parser("run", help="perform the planned moves, so the revision's guarded drops pass")
    db_options(p)
    spark_options(p)
    p.set_defaults(func=guard(cmd_run))

    def queue_options(p):
        p.add_argument("--url", required=True, help="database URL")
        p.add_argument("--table", required=True, help="queue table as an address: audit, error@[dbo]")
        p.add_argument("--layout", choices=("mssql", "postgresql"), help="table layout (default: its engine's)")
        p.add_argument("--format", choices=("text", "json"), default="text")

    p = psub.add_parser("archive", help="export a queue's rows to Parquet partitioned by date, headers as columns")
    queue_options(p)
    p.add_argument("-o", "--output", required=True, help="Parquet folder (local path, hdfs://, s3a://...)")
    p.add_argument("--mode", choices=("errorifexists", "append", "overwrite"), default="errorifexists")
    p.add_argument("--partitions", type=int, default=4, help="parallel JDBC reads")
    spark_options(p)
    p.set_defaults(func=guard(cmd_archive))

    p = psub.add_parser("replay", help="send archived messages back into a queue (exactly once per replay id)")
    queue_options(p)
    p.add_argument("--archive", required=True, help="Parquet folder written by archive")
    p.add_argument("--message-id", action="append", help="only these message ids (repeatable)")
    p.add_argument("--message-type", action="append", help="only these message types (repeatable)")
    p.add_argument("--since", help="first date (YYYY-MM-DD)")
    p.add_argument("--until", help="last date (YYYY-MM-DD)")
    p.add_argument("--where", help="a Spark SQL condition on the archive's columns")
    p.add_argument("--replay-id", help="resume this replay (default: derived from the archive, filters and queue)")
    spark_options(p)
    p.set_defaults(func=guard(cmd_replay))

    p = psub.add_parser("backfill", help="fill a saga's correlation column from its JSON Data")
    p.add_argument("--url", required=True, help="database URL")
    p.add_argument("--table", required=True, help="saga table as an address: Sales_OrderSaga@[public]")
    p.add_argument("--property", required=True, help="JSON property of Data (dots for nested: Order.Id)")
    p.add_argument("--column", required=True, help="the correlation column, e.g. Correlation_OrderId")
    p.add_argument("--batch-size", type=int, default=5_000)
    p.add_argument("--overwrite", action="store_true", help="also rewrite rows whose column is already filled")
    p.add_argument("--format", choices=("text", "json"), default="text")
    spark_options(p)
    p.set_defaults(func=guard(cmd_backfill))

