"""`sqltransport-schema pipeline ...`: move, plan, run, archive, replay, backfill.

Progress goes to stderr, the summary to stdout (`--format json` for machines). Exit codes: 0 done,
1 work left (plan: moves pending; move: messages remain in the source), 2 error.
"""

from __future__ import annotations

import json
import sys

EXIT_OK, EXIT_PENDING, EXIT_ERROR = 0, 1, 2


def _spark_options(p) -> None:
    g = p.add_argument_group("Spark")
    g.add_argument("--master", help="Spark master (default: local[*]; under spark-submit: its master)")
    g.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark configuration (repeatable)")
    g.add_argument("--jars", default="", help="extra JDBC driver jars, comma-separated (Debian's /usr/share/java ones are added)")
    g.add_argument("--no-spark", action="store_true", help="run the partitions in this process, without Spark")


def _session(args):
    if getattr(args, "no_spark", False):
        return None
    from .session import get_session

    spark, seconds = get_session(args.master, args.conf, [j for j in args.jars.split(",") if j])
    if args.format == "text" and seconds:
        sys.stderr.write(f"[spark] session started in {seconds:.1f} s ({spark.sparkContext.master})\n")
    return spark


def _endpoint(url: str, table: str, layout: str | None, kind: str):
    from ..schema import Kind
    from .connect import Endpoint, engine_of, table_name

    return Endpoint(url, table_name(table, engine_of(url)), Kind(kind), layout)


def _emit(args, payload: dict, lines: list[str]) -> None:
    if args.format == "json":
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    else:
        sys.stdout.write("".join(line + "\n" for line in lines))


def _guard(func):
    def run(args) -> int:
        from .move import MoveError
        from .session import SparkUnavailable

        try:
            return func(args)
        except (FileNotFoundError, ValueError):
            raise  # the top-level handler reports these (exit 2)
        except (MoveError, SparkUnavailable, LookupError) as exc:
            message = str(exc)
        except Exception as exc:  # a database or Spark failure: one readable line, exit 2
            first = str(exc).strip().splitlines()
            message = f"{type(exc).__name__}: {first[0] if first else ''}"
        if args.format == "json":
            sys.stdout.write(json.dumps({"status": "error", "message": message}, indent=2) + "\n")
        else:
            sys.stderr.write(f"error: {message}\n")
        return EXIT_ERROR

    return run


# --------------------------------------------------------------------------- move
def cmd_move(args) -> int:
    from .move import move, move_subscriptions, parse_rewrites

    source = _endpoint(args.from_url, args.from_table, args.from_layout, args.kind)
    dest = _endpoint(args.to_url or args.from_url, args.to_table or args.from_table, args.to_layout, args.kind)
    rewrites = parse_rewrites(args.rewrite_address)
    if args.kind == "subscriptions":
        count = move_subscriptions(source, dest, rewrites, delete_source=args.delete_source)
        _emit(args, {"status": "done", "rows": count}, [f"{count} subscription row(s) written to {dest.describe()}"])
        return EXIT_OK
    spark = _session(args)
    result = move(source, dest, spark=spark, rows_per_partition=args.rows_per_partition, partitions=args.partitions,
                  rewrites=rewrites, move_id=args.move_id, progress=None if args.format == "text" else False)
    payload = {"status": "done" if not result.remaining_in_source else "remaining", **result.to_json()}
    lines = [
        f"moved {result.rows:,} message(s) in {result.partitions} partition(s) "
        f"({'resumed, ' + str(result.skipped_partitions) + ' partition(s) already done, ' if result.resumed else ''}"
        f"{result.seconds:.1f} s, {result.rows_per_second:,.0f} rows/s)",
        f"  from {result.source}",
        f"  to   {result.destination}",
        f"  move id {result.move_id}, ledger checksum {result.checksum}",
    ]
    if result.remaining_in_source:
        lines.append(f"  {result.remaining_in_source} message(s) arrived in the source meanwhile: run the move again")
    _emit(args, payload, lines)
    return EXIT_PENDING if result.remaining_in_source else EXIT_OK


def add_parser(sub) -> None:
    """Register `pipeline` and its subcommands on the top-level subparsers."""
    pipeline = sub.add_parser("pipeline", help="Spark data pipelines over queue tables: move, plan, run, archive, replay, backfill")
    psub = pipeline.add_subparsers(dest="pipeline_command", required=True)

    p = psub.add_parser("move", help="move messages between queue tables, exactly once (resumable)")
    p.add_argument("--from", dest="from_url", required=True, help="source database URL")
    p.add_argument("--from-table", required=True, help="source table as an address: Sales, Sales@[dbo], Sales@[dbo]@[nsb]")
    p.add_argument("--from-layout", choices=("mssql", "postgresql"), help="source layout (default: its engine's)")
    p.add_argument("--to", dest="to_url", help="destination database URL (default: the source's)")
    p.add_argument("--to-table", help="destination table (default: the source's name)")
    p.add_argument("--to-layout", choices=("mssql", "postgresql"), help="destination layout (default: its engine's)")
    p.add_argument("--kind", choices=("queue", "delayed", "subscriptions"), default="queue")
    p.add_argument("--rewrite-address", action="append", default=[], metavar="OLD=NEW",
                   help="rewrite NServiceBus.ReplyToAddress / ForwardDestination (and subscription QueueAddress) equal to OLD")
    p.add_argument("--rows-per-partition", type=int, default=25_000)
    p.add_argument("--partitions", type=int, help="number of partitions (default: rows / --rows-per-partition)")
    p.add_argument("--move-id", help="resume this move (default: the unfinished move between these tables, else a new one)")
    p.add_argument("--delete-source", action="store_true", help="subscriptions: delete the source rows once copied")
    p.add_argument("--format", choices=("text", "json"), default="text")
    _spark_options(p)
    p.set_defaults(func=_guard(cmd_move))

    try:
        from . import cli_more
    except ImportError:  # pragma: no cover
        return
    cli_more.add_parsers(psub, _spark_options, _guard)
