"""`sqltransport-schema pipeline ...`: move, plan, run, export, replay, backfill, tenants.

Progress goes to stderr, the summary to stdout (`--format json` for machines). Exit 1 means work
is left (plan: moves pending; move and run: messages remain in a source, or a resumed partition's keys
differ from its ledger row's). Nothing here imports pyspark:
the pipeline modules start a session only when a command runs one.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

from .. import errors
from ..defaults import ARCHIVE_PARTITIONS, BACKFILL_BATCH, DEFAULT_ROWS_PER_PARTITION, TENANT_BATCH
from ..schema import Kind
from ..urls import DEFAULT, ENVIRONMENT, URL_VARIABLE, chosen_url, database_url, display_url
from .options import DEFAULT_CONFIG, LAYOUTS, Subcommands, add_command, add_options, add_renamed, add_spark_options, load_config
from .output import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, emit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..pipeline.connect import Endpoint
    from ..pipeline.move import MoveResult
    from ..pipeline.plan import DataPlan
    from ..pipeline.results import JobResult


# --------------------------------------------------------------------------- from options to values


def _session(args: argparse.Namespace, *urls: str) -> SparkSession | None:
    """The Spark session the command runs its partitions in (None under --no-spark); urls: the
    databases it reads through JDBC, whose driver jars are checked before Spark starts (a missing
    one would fail only after Spark's start-up)."""
    if getattr(args, "no_spark", False):
        return None
    from ..pipeline.connect import missing_jar
    from ..pipeline.session import SparkUnavailable, get_session

    if not args.jars:
        for problem in filter(None, map(missing_jar, urls)):
            no_spark = "; or run it in this process, without Spark: --no-spark" if hasattr(args, "no_spark") else ""
            raise SparkUnavailable(problem + no_spark)

    spark, seconds = get_session(args.master, args.conf, [j for j in args.jars.split(",") if j])
    if args.format == "text" and seconds:
        sys.stderr.write(f"[spark] session started in {seconds:.1f} s ({spark.sparkContext.master})\n")
    return spark


def _endpoint(url: str, table: str, layout: str | None, kind: str | Kind) -> Endpoint:
    from ..pipeline.connect import Endpoint, engine_of, table_name

    return Endpoint(url, table_name(table, engine_of(url)), Kind(kind), layout)


def _mapping(pairs: list[str] | None) -> dict[str, str]:
    """--map OLD=NEW pairs as a dict."""
    out = {}
    for pair in pairs or ():
        old, sep, new = pair.partition("=")
        if not sep:
            raise errors.UsageError(f"--map {pair!r}: expected OLD=NEW")
        out[old.strip()] = new.strip()
    return out


def _url(args: argparse.Namespace) -> str:
    """The database of a job on one table (export, replay, backfill): --url, else SQLTRANSPORT_URL, else
    sqlalchemy.url in the Alembic configuration when there is one, as every command finds it;
    neither: a usage error (a job reads or writes no SQLite file it was not named)."""
    from pathlib import Path

    config = load_config(args.config) if Path(args.config).is_file() else None
    url, origin = chosen_url(args.url, config)
    if origin == DEFAULT:
        raise errors.UsageError(f"no database: pass --url URL (or set {URL_VARIABLE}), or run where {args.config} names one")
    return url


def _plan(args: argparse.Namespace) -> tuple[DataPlan, str]:
    """(the data plan between the database's revision and --to, the database URL)."""
    from ..pipeline import plan as planning

    config = load_config(args.config)
    url = database_url(args.url, config)
    return planning.plan(config, url, args.to_rev, _mapping(args.map)), url


# --------------------------------------------------------------------------- commands
def cmd_move(args: argparse.Namespace) -> int:
    """move messages between queue tables, exactly once (resumable)

    Move every message of a queue or delayed table (or the rows of a subscription table) into
    another table, in the same database or another, of another engine or layout, keeping FIFO order.
    Each partition's rows commit in the destination together with a ledger row, then leave the
    source, so a move that stopped resumes where it was and no message is lost or written twice.
    Exit 1 when messages arrived in the source meanwhile (a second pass, or switch the endpoints over
    first), or when a resumed partition's keys differ from its ledger row's.
    """
    from ..pipeline.move import move, move_subscriptions, parse_rewrites

    source = _endpoint(args.from_url, args.from_table, args.from_layout, args.kind)
    dest = _endpoint(args.to_url or args.from_url, args.to_table or args.from_table, args.to_layout, args.kind)
    rewrites = parse_rewrites(args.rewrite_address)
    if args.kind == Kind.SUBSCRIPTIONS:
        count = move_subscriptions(source, dest, rewrites, delete_source=args.delete_source)
        emit(args, {"status": "done", "rows": count}, [f"{count} subscription row(s) written to {dest.describe()}"])
        return EXIT_OK
    spark = _session(args)
    result = move(
        source,
        dest,
        spark=spark,
        rows_per_partition=args.rows_per_partition,
        partitions=args.partitions,
        rewrites=rewrites,
        move_id=args.move_id,
        progress=None if args.format == "text" else False,
    )
    lines = [
        f"moved {result.rows:,} message(s) in {result.partitions} partition(s) "
        f"({'resumed, ' + str(result.skipped_partitions) + ' partition(s) already done, ' if result.resumed else ''}"
        f"{result.seconds:.1f} s, {result.rows_per_second:,.0f} rows/s)",
        f"  from {result.source}",
        f"  to   {result.destination}",
        f"  move id {result.move_id}, ledger checksum {result.checksum}",
    ]
    again = "sqltransport-schema pipeline move " + " ".join(shlex.quote(a) for a in _move_again(args))
    lines += _job_end(result, again)
    emit(args, {"status": _status(result), **result.to_json()}, lines)
    return EXIT_CHANGES if _status(result) != "done" else EXIT_OK


def _move_again(args: argparse.Namespace) -> list[str]:
    """The arguments of this `pipeline move`, URLs' passwords masked, for a second pass."""
    words = ["--from-url", display_url(args.from_url), "--from-table", args.from_table]
    if args.to_url:
        words += ["--to-url", display_url(args.to_url)]
    if args.to_table:
        words += ["--to-table", args.to_table]
    if args.kind != Kind.QUEUE.value:
        words += ["--kind", args.kind]
    for pair in args.rewrite_address:
        words += ["--rewrite-address", pair]
    return words


def _status(result: MoveResult) -> str:
    """How a move ended (`move` and `run` alike): work left in the source, resumed partitions whose keys
    differ from the ledger's, or done."""
    return "remaining" if result.remaining_in_source else ("mismatch" if result.mismatched else "done")


def _job_end(result: MoveResult, again: str) -> list[str]:
    """What `move` and `run` say at a move's end: each partition a rerun settled from the ledger (the
    keys it expected and found), and messages that arrived in the source meanwhile with what to do."""
    lines = []
    for settled in result.settled:
        differ = settled["found"] != settled["expected"]
        lines.append(
            f"  partition {settled['part']} (committed by an earlier run): the ledger expected {settled['expected']:,} key(s), "
            f"found {settled['found']:,} ({settled['note']})" + ("; they differ: see docs/pipeline.md#reruns" if differ else "")
        )
    if result.remaining_in_source:
        lines.append(
            f"  {result.remaining_in_source:,} message(s) arrived in {result.source} during the move and are still there: "
            f"run `{again}` again for a second pass; once the endpoints are switched over to {result.destination}, "
            "the last pass leaves it empty (docs/pipeline.md#live-traffic-during-a-move)"
        )
    return lines


def _upgrade_command(args: argparse.Namespace) -> str:
    """The `alembic upgrade` that follows the moves, on the database and configuration given."""
    words = ["alembic"]
    if args.config != DEFAULT_CONFIG:
        words += ["-c", shlex.quote(args.config)]
    if args.url:
        words += [f"-x {shlex.quote('url=' + display_url(args.url))}"]
    return " ".join(words + ["upgrade", shlex.quote(getattr(args, "to_rev", None) or "head")])


def _run_command(args: argparse.Namespace) -> str:
    """The `pipeline run` that performs what `plan` listed: the same configuration, database (its
    password masked), target and --map, so that pasted it acts where the plan looked."""
    words = ["sqltransport-schema", "pipeline", "run"]
    if args.config != DEFAULT_CONFIG:
        words += ["-c", args.config]
    if args.url:
        words += ["--url", display_url(args.url)]
    if args.to_rev:
        words += ["--to", args.to_rev]
    for pair in args.map:
        words += ["--map", pair]
    return " ".join(shlex.quote(word) for word in words)


def _environment_note(args: argparse.Namespace) -> str:
    """Where the database came from when the printed commands do not say it (SQLTRANSPORT_URL)."""
    url, origin = chosen_url(args.url, None)
    return f", with {URL_VARIABLE} set as now ({display_url(url)})" if origin == ENVIRONMENT else ""


def _holds_files(folder: str) -> bool:
    """A local folder that is not empty (remote archives are left to Spark's own check)."""
    from pathlib import Path

    path = Path(folder)
    return "://" not in folder and path.is_dir() and any(path.iterdir())


def cmd_plan(args: argparse.Namespace) -> int:
    """list the message moves the pending revisions need (exit 1 when there are some)

    List the message moves the revisions between the database's stamp and --to need before their
    guarded drops pass: a retired instance queue into its endpoint's, a renamed or re-homed queue
    (--map names the destination of a removed one). Nothing is moved; exit 1 when moves are pending
    or a destination is unresolved.
    """
    result, _url = _plan(args)
    lines = [f"data steps from revision {result.from_revision or '<none>'} to {result.to_revision}:"]
    lines += [f"  move {m.describe()}" for m in result.moves] or ["  no messages to move"]
    lines += [f"  moved already (source empty): {m.describe()}" for m in result.done]
    lines += [f"  discarded with its messages: {d}" for d in result.discarded]
    lines += [f"  unresolved: {u}" for u in result.unresolved]
    if result.moves:
        lines.append(f"Run: {_run_command(args)} (then {_upgrade_command(args)}){_environment_note(args)}")
    elif result.done and not result.unresolved:
        lines.append(f"Now: {_upgrade_command(args)}{_environment_note(args)}")
    status = "unresolved" if result.unresolved else ("pending" if result.moves else "nothing")
    emit(args, {"status": status, **result.to_json()}, lines)
    return EXIT_CHANGES if (result.moves or result.unresolved) else EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """perform the planned moves, so the revision's guarded drops pass

    Perform the moves `pipeline plan` lists, each exactly once and resumable, then print the
    `alembic upgrade` that follows; nothing is moved while a destination is unresolved. Exit 1, as
    `pipeline move`, when messages arrived in a source meanwhile (run it again, or switch the endpoints
    over first) or a resumed partition's keys differ from its ledger row's.
    """
    from ..pipeline import plan as planning

    result, url = _plan(args)
    if result.unresolved:
        lines = [f"unresolved: {u}" for u in result.unresolved] + ["nothing was moved"]
        emit(args, {"status": "unresolved", **result.to_json()}, lines)
        return EXIT_ERROR
    spark = _session(args) if result.moves else None
    moves = planning.run(result, url, spark=spark, progress=None if args.format == "text" else False)
    lines = []
    for step, moved in zip(result.moves, moves):
        lines += [f"moved {moved.rows:,} message(s): {step.describe()}", *_job_end(moved, _run_command(args))]
    lines = lines or ["no messages to move"]
    ends = [_status(moved) for moved in moves]
    status = next((end for end in ("remaining", "mismatch") if end in ends), "done")
    if status == "remaining":
        lines.append(f"the guarded drops refuse while a source holds messages: {_upgrade_command(args)} after the last pass")
    elif result.moves or result.done:
        lines.append(f"Now: {_upgrade_command(args)}{_environment_note(args)}")
    emit(args, {"status": status, **result.to_json(), "results": [r.to_json() for r in moves]}, lines)
    return EXIT_CHANGES if status != "done" else EXIT_OK


def _report(args: argparse.Namespace, result: JobResult, summary: str, status: str = "done") -> None:
    """A job's end: its result's fields as JSON under --format json, else its one summary line."""
    emit(args, {"status": status, **result.to_json()}, [summary])


def cmd_export(args: argparse.Namespace) -> int:
    """export a queue's rows to Parquet partitioned by date, headers as columns

    Read every message of a queue (audit, error) through Spark's JDBC reader and write it to Parquet
    partitioned by date (of TimeSent, else TimeOfFailure), with the standard NServiceBus headers as
    columns beside the raw headers and body (--no-spark: read through the driver and written with
    pyarrow, in this process). An export copies; it deletes nothing (the error queue's archive is
    another thing: the archive command).
    """
    from ..pipeline.archive import archive

    if args.mode == "errorifexists" and _holds_files(args.out_dir):
        raise errors.Refused(f"{args.out_dir} holds an export already: pass --mode append to add to it, or --mode overwrite to replace it")
    url = _url(args)
    spark = _session(args, url)
    if args.format == "text":
        how = "through JDBC" if spark is not None else "through the driver, in this process"
        sys.stderr.write(f"[export] reading {args.table} {how}, writing Parquet to {args.out_dir}\n")
    endpoint = _endpoint(url, args.table, args.layout, Kind.QUEUE)
    result = archive(spark, endpoint, args.out_dir, mode=args.mode, partitions=args.read_partitions)
    summary = f"exported {result.rows:,} message(s) of {result.source} to {result.path} "
    _report(args, result, summary + f"({len(result.dates)} date partition(s), {result.seconds:.1f} s)")
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    """send exported messages back into a queue (exactly once per replay id)

    Send messages of an export (pipeline export's Parquet) back into a queue in exported order, with their original Id, Headers
    and Body, all of them or those the filters select (ids, types, dates, a Spark SQL condition), in
    batches each committed with a ledger row: rerunning the same replay skips what committed.
    """
    from ..pipeline.archive import replay

    spark = _session(args)  # reads Parquet, writes through the driver: no JDBC
    result = replay(
        spark,
        args.in_dir,
        _endpoint(_url(args), args.table, args.layout, Kind.QUEUE),
        replay_id=args.replay_id,
        message_ids=args.message_id,
        message_types=args.message_type,
        since=args.since,
        until=args.until,
        where=args.where,
        progress=None if args.format == "text" else False,
    )
    done = f"{result.skipped_batches} of {result.batches} batch(es) already done; replay id {result.replay_id}"
    _report(args, result, f"replayed {result.rows:,} message(s) into {result.destination} ({done})")
    return EXIT_OK


def cmd_backfill(args: argparse.Namespace) -> int:
    """fill a saga's correlation column from its JSON Data

    Fill a saga table's transitional correlation column from a property of each row's JSON Data, in
    batches of one transaction, each row updated only if its Concurrency has not changed meanwhile.
    Rows whose column is filled already are left alone unless --overwrite; exit 1 when some rows'
    Data cannot be read.
    """
    from ..pipeline.backfill import backfill

    url = _url(args)
    result = backfill(
        url,
        args.table,
        args.property,
        args.column,
        spark=_session(args, url),
        batch_size=args.batch_size,
        overwrite=args.overwrite,
    )
    counts = f"{result.missing} without the property, {result.unreadable} unreadable"
    line = f"backfilled {result.updated:,} row(s) of {result.table}.{result.column} from Data.{result.property} ({counts})"
    _report(args, result, line, "incomplete" if result.unreadable else "done")
    return EXIT_CHANGES if result.unreadable else EXIT_OK


def _tenant_urls(args: argparse.Namespace):  # noqa: ANN202 - pipeline.tenants.TenantUrls
    """The tenants' databases: --tenant-url's template, else the fleet file's tenant targets."""
    from ..pipeline.tenants import TenantUrls
    from ..schema import TENANT

    if args.tenant_url is not None:
        if args.fleet is not None:
            raise errors.UsageError("--tenant-url and --fleet both name the tenants' databases: give one")
        if "{name}" not in args.tenant_url:
            raise errors.UsageError(f"--tenant-url {display_url(args.tenant_url)}: put {{name}} where the tenant goes")
        return TenantUrls(template=args.tenant_url)
    from .fleet import targets

    named = {target.name: target.url for target in targets(args) if target.role == TENANT}
    if not named:
        raise errors.UsageError("the fleet file names no tenant database (a url_template's or a query's target, or role: tenant)")
    return TenantUrls(named=named)


def cmd_tenants(args: argparse.Namespace) -> int:
    """carry the shared database's saga and outbox rows to their tenants' databases

    After compiling tenant placement and upgrading the tenant databases: write each row of the
    shared database's placed saga (and outbox) tables to the same table in its tenant's database,
    the tenant read from a column, a property of the saga's Data or a header of an outbox row's
    first message, its database from the fleet file or --tenant-url. Reruns write nothing twice;
    --delete-source deletes each row from the shared table once its copy is read back equal, so the
    shared database's upgrade then drops the emptied tables. Exit 1 when rows are left whose tenant
    is unknown, whose tenant database failed or holds them with other values.
    """
    from ..pipeline import tenants

    tenant_of = tenants.TenantOf(args.tenant_column, args.tenant_property, args.tenant_header)
    if args.tenant_column is not None and args.tenant_property is not None:
        raise errors.UsageError("--tenant-column and --tenant-property both name a saga's tenant: give one")
    if tenant_of == tenants.TenantOf():
        raise errors.UsageError(
            "name where a row's tenant is: --tenant-column NAME or --tenant-property PATH (sagas), --tenant-header NAME (outbox)"
        )
    if args.fleet is None and args.tenant_url is None:
        raise errors.UsageError("name the tenants' databases: --fleet [FILE] (its tenant targets) or --tenant-url TEMPLATE with {name}")
    config = load_config(args.config)
    url = database_url(args.url, config)
    tables, left_out = tenants.placed_tables(config, [args.table] if args.table else [], tenant_of)
    urls = _tenant_urls(args)
    spark = _session(args)

    def progress(table: str, outcome: tenants.TenantOutcome) -> None:
        if args.format == "text":
            state = "failed" if outcome.error else f"{outcome.carried} carried, {outcome.present} there already, {outcome.deleted} deleted"
            sys.stderr.write(f"tenants: {table}: {outcome.tenant}: {outcome.rows} row(s): {state}\n")
            sys.stderr.flush()

    result = tenants.move(url, tables, tenant_of, urls, tenants.MoveSettings(spark, args.delete_source, args.batch_size, progress))
    lines = tenants.summary(result) + [f"not carried (no option names its tenant): {name}" for name in left_out]
    if result.unsettled:
        lines.append(f"{result.unsettled} row(s) not in their tenant's database: they stay in the shared one")
    elif not args.delete_source and any(table.rows for table in result.tables):
        lines.append("every row is in its tenant's database; rerun with --delete-source to empty the shared tables")
    else:
        lines.append(f"Now: {_upgrade_command(args)}{_environment_note(args)}")
    payload = {"status": "left" if result.unsettled else "done", **result.to_json(), "unsettled": result.unsettled, "not_carried": left_out}
    emit(args, payload, lines)
    return EXIT_CHANGES if result.unsettled else EXIT_OK


# --------------------------------------------------------------------------- parsers
# Options several subcommands share: a revision range's (plan, run), a queue's (export, replay).
_DATABASE_OPTIONS = ("url", "config", "to_rev", "map", "format")
_QUEUE_OPTIONS = ("url", "config", "table", "layout", "format")
_QUEUE_TABLE = {"note": "the queue: audit, error@[dbo]"}


def _add_move(psub: argparse._SubParsersAction) -> None:
    """`pipeline move`."""
    p = add_command(
        psub,
        "move",
        cmd_move,
        "sqltransport-schema pipeline move --from-url sqlite:///sqltransport.db --from-table Sales "
        "--to-url postgresql://postgres@127.0.0.1/app",
    )
    # --from and --to name revisions elsewhere (script, pipeline plan/run): here the URLs are --from-url/--to-url
    add_renamed(p, "--from-url", renamed_from=("--from",), required=True, metavar="URL", help="source database URL")
    p.add_argument("--from-table", required=True, help="source table as an address: Sales, Sales@[dbo], Sales@[dbo]@[nsb]")
    p.add_argument("--from-layout", choices=LAYOUTS, help="source layout (default: its engine's)")
    add_renamed(p, "--to-url", renamed_from=("--to",), metavar="URL", help="destination database URL (default: the source's)")
    p.add_argument("--to-table", help="destination table (default: the source's name)")
    p.add_argument("--to-layout", choices=LAYOUTS, help="destination layout (default: its engine's)")
    kinds = tuple(kind.value for kind in (Kind.QUEUE, Kind.DELAYED, Kind.SUBSCRIPTIONS))  # the kinds a move converts
    p.add_argument("--kind", choices=kinds, default=Kind.QUEUE.value, help="the tables' kind (default: %(default)s)")
    p.add_argument(
        "--rewrite-address",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="rewrite NServiceBus.ReplyToAddress / ForwardDestination (and subscription QueueAddress) equal to OLD",
    )
    p.add_argument(
        "--rows-per-partition", type=int, default=DEFAULT_ROWS_PER_PARTITION, help="messages per partition (default: %(default)s)"
    )
    add_options(p, "partitions", partitions={"shown": "default: rows / --rows-per-partition"})
    p.add_argument("--move-id", help="resume this move (default: the unfinished move between these tables, else a new one)")
    add_options(p, "delete_source", delete_source={"note": "subscription tables (a queue's messages leave the source as they move)"})
    add_options(p, "format")
    add_spark_options(p)


def _add_plan(psub: argparse._SubParsersAction) -> None:
    """`pipeline plan`."""
    p = add_command(
        psub, "plan", cmd_plan, "sqltransport-schema pipeline plan --url postgresql://postgres@127.0.0.1/app --map Billing=Invoicing"
    )
    add_options(p, *_DATABASE_OPTIONS)


def _add_run(psub: argparse._SubParsersAction) -> None:
    """`pipeline run`."""
    p = add_command(
        psub, "run", cmd_run, "sqltransport-schema pipeline run --url postgresql://postgres@127.0.0.1/app --map Billing=Invoicing"
    )
    add_options(p, *_DATABASE_OPTIONS)
    add_spark_options(p)


def _add_export(psub: argparse._SubParsersAction) -> None:
    """`pipeline export` (once `pipeline archive`: the error queue's archive is the archive command's)."""
    p = add_command(
        psub,
        "export",
        cmd_export,
        "sqltransport-schema pipeline export --url postgresql://postgres@127.0.0.1/app --table error --out-dir /data/error",
    )
    psub.rename("archive", "export")
    add_options(p, *_QUEUE_OPTIONS, table=_QUEUE_TABLE)
    out_dir = {"note": "Parquet (a local path, hdfs://, s3a://...)", "renamed_from": ("-o", "--output")}
    add_options(p, "out_dir", out_dir=out_dir)
    p.add_argument(
        "--mode",
        choices=("errorifexists", "append", "overwrite"),
        default="errorifexists",
        help="when the folder holds an export: fail, add to it, or replace it (default: %(default)s)",
    )
    add_options(p, "read_partitions", read_partitions={"default": ARCHIVE_PARTITIONS, "renamed_from": ("--partitions",)})
    add_spark_options(p)


def _add_replay(psub: argparse._SubParsersAction) -> None:
    """`pipeline replay`."""
    p = add_command(
        psub,
        "replay",
        cmd_replay,
        "sqltransport-schema pipeline replay --url postgresql://postgres@127.0.0.1/app --table Sales --in-dir /data/error "
        "--since 2026-11-01",
    )
    add_options(p, *_QUEUE_OPTIONS, table=_QUEUE_TABLE)
    # --archive: the error queue's archive is another thing (the archive command)
    add_renamed(
        p, "--in-dir", renamed_from=("--archive",), required=True, metavar="FOLDER", help="the Parquet folder pipeline export wrote"
    )
    add_options(p, "message_id", message_id={"note": "NServiceBus.MessageId"})
    p.add_argument("--message-type", action="append", help="only these message types (repeatable)")
    p.add_argument("--since", help="first date (YYYY-MM-DD)")
    p.add_argument("--until", help="last date (YYYY-MM-DD)")
    p.add_argument("--where", help="a Spark SQL condition on the export's columns")
    p.add_argument("--replay-id", help="resume this replay (default: derived from the export, filters and queue)")
    add_spark_options(p)


def _add_backfill(psub: argparse._SubParsersAction) -> None:
    """`pipeline backfill`."""
    p = add_command(
        psub,
        "backfill",
        cmd_backfill,
        "sqltransport-schema pipeline backfill --url postgresql://postgres@127.0.0.1/app --table Sales_OrderSaga "
        "--property OrderId --column Correlation_OrderId",
    )
    add_options(p, "url", "config", "table", table={"note": "the saga's: Sales_OrderSaga@[public]"})
    p.add_argument("--property", required=True, help="JSON property of Data (dots for nested: Order.Id)")
    p.add_argument("--column", required=True, help="the correlation column, e.g. Correlation_OrderId")
    add_options(p, "batch_size", batch_size={"default": BACKFILL_BATCH, "note": "saga rows"})
    p.add_argument("--overwrite", action="store_true", help="also rewrite rows whose column is already filled")
    add_options(p, "format")
    add_spark_options(p)


def _add_tenants(psub: argparse._SubParsersAction) -> None:
    """`pipeline tenants`."""
    p = add_command(
        psub,
        "tenants",
        cmd_tenants,
        "sqltransport-schema pipeline tenants --url postgresql://postgres@127.0.0.1/app --tenant-property TenantId --fleet",
    )
    add_options(p, "url", "config", "fleet", url={"note": "the shared database"})
    add_options(
        p, "table", table={"required": False, "note": "only this placed table", "shown": "default: every placed table an option names"}
    )
    p.add_argument("--tenant-column", metavar="NAME", help="saga tables: the column holding the tenant, e.g. Correlation_TenantId")
    p.add_argument("--tenant-property", metavar="PATH", help="saga tables: the property of Data holding the tenant (dots for nested)")
    p.add_argument("--tenant-header", metavar="NAME", help="outbox tables: the header of the row's first message holding the tenant")
    p.add_argument("--tenant-url", metavar="TEMPLATE", help="a tenant's database URL, {name} the tenant (instead of --fleet)")
    add_options(p, "delete_source", delete_source={"note": "each row of the shared table once its copy is read back equal"})
    add_options(p, "batch_size", batch_size={"default": TENANT_BATCH, "note": "a tenant's"})
    add_options(p, "format")
    add_spark_options(p)


def add_pipeline(sub: argparse._SubParsersAction) -> None:
    """Spark data pipelines over queue tables: move, plan, run, export, replay, backfill, tenants

    Data jobs over queue tables, run in Spark partitions (pyspark is the `spark` extra; --no-spark
    runs them in this process): move messages between tables exactly once, the moves a revision
    needs before its drops (plan, run), export a queue to Parquet and replay it, fill a saga's
    correlation column, carry saga and outbox rows to their tenants' databases (tenants). Progress
    goes to stderr, the summary to stdout (docs/pipeline.md).
    """
    pipeline = add_command(
        sub, "pipeline", add_pipeline, "sqltransport-schema pipeline plan --url postgresql://postgres@127.0.0.1/app", group=True
    )
    psub = pipeline.add_subparsers(dest="pipeline_command", required=True, action=Subcommands)
    for add in (_add_move, _add_plan, _add_run, _add_export, _add_replay, _add_backfill, _add_tenants):
        add(psub)


PARSERS = {"pipeline": add_pipeline}
