"""The batchlog command line: ``python -m batchlog COMMAND ...``.

Argument parsing and printing only; every command calls the JVM through the Python API, except
``files`` on a local sink, which :mod:`batchlog.arrow` answers without starting a JVM (a JVM's
start takes 20-40 s here; this takes well under one).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import batchlog
from batchlog import _cli_render as render
from batchlog._cli_util import human_bytes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _session(confs: list[str]) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .appName("batchlog-cli")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for kv in confs:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise SystemExit(f"batchlog: --conf takes KEY=VALUE, got {kv!r}")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cmd_inspect(spark: SparkSession, args: argparse.Namespace) -> int:
    render.inspect(batchlog.SinkLog(spark, args.path).inspect(args.checkpoint))
    return 0


def cmd_history(spark: SparkSession, args: argparse.Namespace) -> int:
    h = batchlog.SinkLog(spark, args.path).history(rows=args.rows)
    if args.json:
        print(json.dumps(h.to_dict(), indent=2))
    else:
        render.history(h, args.limit)
    return 0


def cmd_report(spark: SparkSession, args: argparse.Namespace) -> int:
    from batchlog import _report

    log = batchlog.SinkLog(spark, args.path)
    page = _report.write(log.history(rows=not args.no_rows), log.inspect(), args.html)
    print(f"wrote {page} ({human_bytes(page.stat().st_size)})")
    return 0


def cmd_files(spark: SparkSession, args: argparse.Namespace) -> int:
    for path in batchlog.SinkLog(spark, args.path).files(args.batch):
        print(path)
    return 0


def _flush() -> None:
    """The plan reaches the terminal before the operation starts (and prints its progress)."""
    sys.stdout.flush()


def cmd_rewind(spark: SparkSession, args: argparse.Namespace) -> int:
    if args.cascade:
        return _cascade(spark, args)
    if args.downstream:
        raise batchlog.InvalidArgumentError(
            "--downstream names readers of a cascade: add --cascade"
        )
    action = batchlog.rewind_action(spark, args.path, args.checkpoint, args.to_batch, args.force)
    render.rewind_plan(action.plan(), args.dry_run)
    if not args.dry_run:
        _flush()
        result = action.execute().result
        assert result is not None
        render.rewind_result(result)
    return 0


def _cascade(spark: SparkSession, args: argparse.Namespace) -> int:
    action = batchlog.cascade_action(
        spark, args.path, args.checkpoint, args.to_batch, args.downstream, args.force
    )
    render.cascade_plan(action.plan(), args.dry_run)
    if not args.dry_run:
        _flush()
        render.cascade_result(action.execute())
    return 0


def cmd_takeover(spark: SparkSession, args: argparse.Namespace) -> int:
    action = batchlog.takeover_action(spark, args.path, args.checkpoint, args.force)
    plan = action.plan()
    render.takeover_plan(plan)
    if plan.already_owner:
        return 0
    if args.dry_run:
        print("\nDRY RUN: nothing changed; run without --dry-run to take the sink over.")
    else:
        _flush()
        action.execute()
        print("\ndone: the sink now refuses its previous owner.")
    return 0


def cmd_adopt(spark: SparkSession, args: argparse.Namespace) -> int:
    render.adopt(batchlog.adopt(spark, args.path, dry_run=args.dry_run))
    return 0


# ---- reliability: verify, repair, vacuum ---------------------------------------------------


def cmd_verify(spark: SparkSession, args: argparse.Namespace) -> int:
    r = batchlog.verify(spark, args.path)
    render.verify(r)
    return 0 if r.healthy else 1


def cmd_repair(spark: SparkSession, args: argparse.Namespace) -> int:
    action = batchlog.repair_action(spark, args.path, args.force, args.compact_interval)
    plan = action.plan()
    render.repair_state(plan)
    if not plan.needed and not args.force:
        print("nothing to do: the log is healthy (--force rebuilds it anyway)")
        return 0
    if plan.runs_only and not args.force:
        render.repair_runs(plan, args.dry_run)
        if not args.dry_run:
            _flush()
            action.execute()
            print("done: restart the query with its checkpoint.")
        return 0
    if plan.indexes_only and not args.force:
        head = "would rewrite" if args.dry_run else "rewriting"
        print(f"{head} only the damaged compact-file indexes, from their compact files:")
        for p in plan.index_problems:
            print(f"  {p.file}")
        if not args.dry_run:
            _flush()
            action.execute()
            print("done.")
        return 0
    render.repair_plan(plan, args.dry_run)
    if not args.dry_run:
        _flush()
        render.repair_outcome(action.execute())
    return 0


def cmd_vacuum(spark: SparkSession, args: argparse.Namespace) -> int:
    dry = not args.apply
    action = batchlog.vacuum_action(spark, args.path, args.older_than)
    plan = action.plan()
    render.vacuum_plan(plan, args.older_than, dry)
    if dry:
        if plan.candidate_files or plan.uploads_to_abort:
            print("\nDRY RUN: nothing deleted; add --apply to delete.")
    else:
        _flush()
        r = action.execute()
        print(f"\ndeleted {r.deleted_files} orphan files ({human_bytes(r.candidate_bytes)}).")
        if r.uploads_to_abort:
            print(f"aborted {r.aborted_uploads} of {len(r.uploads_to_abort)} open uploads.")
    return 0


def _plan_options(s: argparse.ArgumentParser) -> None:
    s.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    s.add_argument(
        "--force",
        action="store_true",
        help="ignore a live writer lease: only for a writer known to be dead",
    )
    _wait_option(s)


def _wait_option(s: argparse.ArgumentParser, default: str = "lease") -> None:
    s.add_argument(
        "--wait",
        default=default,
        metavar="DURATION",
        help="how long to watch a writer lease it finds before it refuses (e.g. 30s, 2m): a "
        "lease seen unchanged for its timeout is a dead writer's, a refreshed one a live "
        "writer's (default: the lease's own timeout; 0s: do not watch)",
    )


def version_text() -> str:
    """``batchlog <version>`` and the jar chosen for the installed pyspark (or why there is none):
    what ``--version`` prints, without starting a JVM."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("batchlog")
    except PackageNotFoundError:
        mine = "(not installed)"
    try:
        import pyspark

        from batchlog._jars import jar_path

        try:
            jar = f"jar {jar_path()} for pyspark {pyspark.__version__}"
        except batchlog.BatchLogError as e:
            jar = f"no jar for pyspark {pyspark.__version__}: {e}"
    except ImportError:
        jar = "pyspark is not installed (batchlog.arrow reads sinks without it)"
    return f"batchlog {mine}\n{jar}"


class _Version(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_text())
        parser.exit()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m batchlog", description=__doc__)
    p.add_argument(
        "--version",
        nargs=0,
        action=_Version,
        help="print batchlog's version and the jar chosen for the installed pyspark",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark or Hadoop setting for the CLI's session (repeatable), "
        "e.g. spark.hadoop.fs.s3a.endpoint=...",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("inspect", help="batches, entry counts, sizes and compaction state")
    s.add_argument("path", help="the sink's output directory (holds _spark_metadata)")
    s.add_argument("--checkpoint", help="the query's checkpointLocation, to include its horizon")
    s.set_defaults(fn=cmd_inspect)
    s = sub.add_parser(
        "history", help="what happened to the sink: batches, compactions, operations, by whom"
    )
    s.add_argument("path", help="the sink's output directory")
    s.add_argument(
        "--limit", type=int, default=100, help="show the newest N events (default 100; 0: all)"
    )
    s.add_argument("--json", action="store_true", help="the whole history as JSON")
    s.add_argument(
        "--rows",
        action="store_true",
        help="also count the rows of batches whose commit did not record them (reads their files)",
    )
    s.set_defaults(fn=cmd_history)
    s = sub.add_parser(
        "report", help="one self-contained HTML page: batches over time, operations, readers"
    )
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--html", required=True, metavar="FILE", help="the page to write")
    s.add_argument(
        "--no-rows",
        action="store_true",
        help="do not count rows (for a sink in JSON, CSV or text, whose rows Spark reads whole)",
    )
    s.set_defaults(fn=cmd_report)
    s = sub.add_parser("files", help="the live files one batch wrote")
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--batch", type=int, required=True, help="micro-batch id")
    s.set_defaults(fn=cmd_files)
    s = sub.add_parser(
        "rewind",
        help="delete the output of batches >= N and rewind the checkpoint to re-run N",
    )
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--checkpoint", required=True, help="the query's checkpointLocation")
    s.add_argument("--to-batch", type=int, required=True, help="first batch to run again")
    s.add_argument(
        "--cascade",
        action="store_true",
        help="rewind every query downstream of the sink too, each to its first batch that read "
        "a rewound batch",
    )
    s.add_argument(
        "--downstream",
        action="append",
        default=[],
        metavar="SINK=CHECKPOINT",
        help="with --cascade: a downstream query that never registered with the sink it reads "
        "(=CHECKPOINT for one that writes no file sink); repeat for more",
    )
    _plan_options(s)
    s.set_defaults(fn=cmd_rewind)
    s = sub.add_parser("takeover", help="make another query (its checkpoint) the sink's one writer")
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--checkpoint", required=True, help="the new writer's checkpointLocation")
    _plan_options(s)
    s.set_defaults(fn=cmd_takeover)
    s = sub.add_parser(
        "adopt", help="tag the entries of a plain-Spark sink whose batch is provable"
    )
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--dry-run", action="store_true", help="count only, change nothing")
    s.set_defaults(fn=cmd_adopt)
    # ---- reliability: verify, repair, vacuum
    s = sub.add_parser(
        "verify", help="check the log against the output (exit 1 if unhealthy); list orphans"
    )
    s.add_argument("path", help="the sink's output directory")
    s.set_defaults(fn=cmd_verify)
    s = sub.add_parser(
        "repair", help="rebuild a lost or damaged _spark_metadata from batch-tagged file names"
    )
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--dry-run", action="store_true", help="print what would be written")
    s.add_argument(
        "--force",
        action="store_true",
        help="rebuild even a healthy log; ignore a live writer lease (a writer known dead)",
    )
    _wait_option(s)
    s.add_argument(
        "--compact-interval",
        type=int,
        metavar="N",
        help="the query's spark.sql.streaming.fileSink.log.compactInterval (default: from the "
        "sink's record or compact files)",
    )
    s.set_defaults(fn=cmd_repair)
    s = sub.add_parser(
        "vacuum",
        help="delete orphan data files (not in the log) and abort uploads left open under the "
        "log (S3), older than a duration",
    )
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 30m, 1h, 7d")
    s.add_argument("--apply", action="store_true", help="delete (default: dry run)")
    # vacuum refuses nothing: a lease not seen dead only keeps the files of a batch after the
    # latest logged one, so it does not wait unless asked to
    _wait_option(s, default="0s")
    s.set_defaults(fn=cmd_vacuum)
    return p


def fence_wait_key(spark: SparkSession) -> str:
    """``spark.batchlog.writer.fenceWait``, as the JVM defines it."""
    from batchlog._jvm import batchlog_package

    return str(batchlog_package(spark).BatchLogConf.FenceWaitKey())


@contextmanager
def _session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` on ``spark`` for the block, then as it was."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    """Runs the parsed command on ``spark``: its exit status; a batchlog error is printed to
    stderr as ``batchlog: <Error>: <message>`` (status 2)."""
    try:
        if getattr(args, "wait", None) is None:
            return int(args.fn(spark, args))
        # The commands that fence a writer watch its lease themselves: a CLI call is a new
        # process, which has watched nothing yet (a session keeps what it has watched).
        with _session_conf(spark, fence_wait_key(spark), args.wait):
            return int(args.fn(spark, args))
    except batchlog.BatchLogError as e:
        print(f"batchlog: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def _without_jvm(args: argparse.Namespace) -> bool:
    """Whether :mod:`batchlog.arrow` answers the command: a read-only one it serves (``files``),
    on a local sink (a store's settings are the JVM's ``--conf``), when pyarrow is installed."""
    if args.fn is not cmd_files or args.conf or urlparse(args.path).scheme not in ("", "file"):
        return False
    try:
        import batchlog.arrow  # noqa: F401
    except ImportError:
        return False
    return True


def _files_without_jvm(args: argparse.Namespace) -> int:
    from batchlog import arrow

    try:
        for path in arrow.SinkLog(args.path).files(args.batch):
            print(path)
    except batchlog.BatchLogError as e:
        # as the JVM's reads say it: a read changes nothing
        print(f"batchlog: {type(e).__name__}: {e} Nothing was changed.", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if _without_jvm(args):
        return _files_without_jvm(args)
    spark = _session(args.conf)
    try:
        return run(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
