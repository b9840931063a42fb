"""The batchlog command line: ``python -m batchlog COMMAND ...``.

Argument parsing and printing only; every command calls the JVM through the Python API.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pyspark.sql import SparkSession

import batchlog
from batchlog._cli_util import human_bytes, table


def _session(confs: list[str]) -> SparkSession:
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
    info = batchlog.SinkLog(spark, args.path).inspect(args.checkpoint)
    latest = info["latestBatch"]
    print(f"sink            {info['outputPath']}")
    print(f"latest batch    {latest if latest >= 0 else '(none)'}")
    print(
        f"compaction      every {info['compactInterval']} batches; latest "
        f"{info.get('latestCompact') or '(none yet)'}; next at batch {info['nextCompactionBatch']}"
    )
    print(f"log files       {info['logFiles']} ({human_bytes(info['logBytes'])})")
    h = info["horizon"]
    if h.get("checkpointHorizon") is None:
        where = f"sink lineage {h['sinkHorizon']}; pass --checkpoint for the checkpoint's"
    else:
        where = (
            f"sink lineage {h['sinkHorizon']}, checkpoint {h['checkpointHorizon']} "
            f"(minBatchesToRetain {h['minBatchesToRetain']})"
        )
    print(f"rewind horizon  batch {h['horizon']} ({where})")
    if h.get("owner"):
        print(f"written by      query {h['owner']} (from batch {h['ownerSince']})")
    cq = h.get("checkpointQueryId")
    if cq and h.get("owner") and cq != h["owner"]:
        print(
            f"WARNING         the checkpoint is query {cq}'s, not the sink owner's: the sink "
            "refuses that query, and Spark's sink skips its batch ids up to the latest"
        )
    batches = info["batches"]
    files = sum(b["files"] for b in batches) + info["untaggedFiles"]
    size = sum(b["bytes"] for b in batches) + info["untaggedBytes"]
    print(f"live files      {files} ({human_bytes(size)}) in {len(batches)} batches")
    if info["untaggedFiles"]:
        print(
            f"untagged        {info['untaggedFiles']} files "
            f"({human_bytes(info['untaggedBytes'])}) have no provable batch"
        )
    print()
    rows = [[b["batchId"], b["files"], b["bytes"], human_bytes(b["bytes"])] for b in batches]
    print(table(["batch", "files", "bytes", "size"], rows) if rows else "(no live files)")
    return 0


def cmd_files(spark: SparkSession, args: argparse.Namespace) -> int:
    for path in batchlog.SinkLog(spark, args.path).files(args.batch):
        print(path)
    return 0


def _span(ids: list[int]) -> str:
    if not ids:
        return "none"
    lo, hi = min(ids), max(ids)
    return f"{lo}..{hi} ({len(ids)})" if len(ids) == hi - lo + 1 else ", ".join(map(str, ids))


def print_rewind_plan(plan: dict[str, Any], dry_run: bool) -> None:
    n = plan["toBatch"]
    head = "DRY RUN: would rewind" if dry_run else "rewinding"
    print(
        f"{head} {plan['sink']} to batch {n}"
        + ("  (resuming an unfinished rewind)" if plan["resuming"] else "")
    )
    print(f"checkpoint      {plan['checkpoint']}")
    print(f"rewind horizon  batch {plan['horizon']} (oldest batch a rewind can reach)")
    affected = plan["affectedBatches"]
    print(f"batches redone  {_span(affected)}")
    print(
        f"data files      {plan['dataFiles']} to delete ({human_bytes(plan['dataBytes'])})"
        + (
            f", of which {plan['orphanFiles']} orphans not in the log"
            if plan["orphanFiles"]
            else ""
        )
    )
    sink_log = plan["sinkLog"]
    print(
        f"sink log        delete {', '.join(sink_log['delete']) or 'nothing'}"
        + (f"; rebuild {', '.join(sink_log['rebuild'])}" if sink_log["rebuild"] else "")
    )
    print(f"offsets/        delete {_span(plan['offsetsToDelete'])}")
    print(f"commits/        delete {_span(plan['commitsToDelete'])}")
    for s in plan["sourceLogs"]:
        print(
            f"sources/{s['source']}/      keep log offsets <= {s['keepUpTo']}: delete "
            f"{', '.join(s['delete']) or 'nothing'}"
            + (f"; rebuild {', '.join(s['rebuild'])}" if s["rebuild"] else "")
        )
    if plan["removeStateDir"]:
        print("state/          remove entirely (rewind to batch 0)")
    else:
        print(
            f"state/          delete {len(plan['stateFiles'])} files "
            f"({human_bytes(plan['stateBytes'])}) of versions > {n}"
        )
    rows = [[b["batchId"], b["files"], human_bytes(b["bytes"])] for b in plan["dataFilesPerBatch"]]
    if rows:
        print()
        print(table(["batch", "files", "size"], rows))


def cmd_rewind(spark: SparkSession, args: argparse.Namespace) -> int:
    report = batchlog.rewind(
        spark, args.path, args.checkpoint, args.to_batch, dry_run=args.dry_run, force=args.force
    )
    print_rewind_plan(report["plan"], args.dry_run)
    if report["result"]:
        r = report["result"]
        print(
            f"\ndone: deleted {r['dataFilesDeleted']} data files in {r['elapsedMs'] / 1000:.1f} s. "
            f"Restart the query with the same checkpoint to re-run batch {r['toBatch']}."
        )
    return 0


def cmd_takeover(spark: SparkSession, args: argparse.Namespace) -> int:
    r = batchlog.takeover(spark, args.path, args.checkpoint, dry_run=args.dry_run, force=args.force)
    print(f"sink            {r['sink']}")
    print(f"checkpoint      {r['checkpoint']} (query {r['queryId']})")
    if r["alreadyOwner"]:
        print("owner           already this query; nothing to do")
        return 0
    previous = r["previousOwner"]
    print(
        "previous owner  "
        + (f"query {previous} (from batch {r['previousOwnerSince']})" if previous else "(none)")
    )
    print(f"new owner from  batch {r['fromBatch']} (the sink's latest is {r['sinkLatestBatch']})")
    if r["skippedBatches"]:
        print(
            f"warning         Spark's file sink skips batch ids <= {r['sinkLatestBatch']}: the "
            f"query's next {r['skippedBatches']} batches (from {r['checkpointNextBatch']}) "
            "will not be written to this sink"
        )
    if r["dryRun"]:
        print("\nDRY RUN: nothing changed; run without --dry-run to take the sink over.")
    else:
        print("\ndone: the sink now refuses its previous owner.")
    return 0


def cmd_adopt(spark: SparkSession, args: argparse.Namespace) -> int:
    r = batchlog.adopt(spark, args.path, dry_run=args.dry_run)
    verb = "would tag" if args.dry_run else "tagged"
    print(
        f"{verb} {r['entriesTagged']} entries in {r['compactFiles']} compact files; "
        f"{r['entriesUntagged']} stay untagged (no provable batch)"
    )
    print(f"rewind horizon from the sink log: batch {r['untaggedHorizon']}")
    return 0


# ---- reliability: verify, repair, vacuum ---------------------------------------------------

_SHOWN = 20  # paths listed per category; the counts are complete


def _batch(b: Any) -> str:
    return "-" if b is None else str(b)


def cmd_verify(spark: SparkSession, args: argparse.Namespace) -> int:
    r = batchlog.verify(spark, args.path)
    print(f"sink            {r['sink']}")
    print(f"verdict         {'HEALTHY' if r['healthy'] else 'UNHEALTHY'}")
    print(f"latest batch    {r['latestBatch'] if r['latestBatch'] >= 0 else '(none)'}")
    print(f"live files      {r['liveFiles']} ({human_bytes(r['liveBytes'])})")
    rows = [
        ["missing (logged, not on disk)", r["missingCount"], "unhealthy"],
        ["size differs from the log", r["sizeMismatchCount"], "unhealthy"],
        ["name's batch differs from the log", r["wrongBatchCount"], "unhealthy"],
        ["log errors", len(r["logErrors"]), "unhealthy"],
        ["damaged compact-file indexes", len(r["indexProblems"]), "unhealthy; see repair"],
        ["indexes rebuilt in memory", r["indexesRebuiltInMemory"], "ok (missing or legacy v1)"],
        ["orphans (on disk, not logged)", r["orphanCount"], "ok; see vacuum"],
    ]
    print()
    print(table(["check", "files", "meaning"], rows))
    for msg in r["logErrors"]:
        print(f"\nlog error: {msg}")
    for p in r["indexProblems"]:
        print(f"\nindex not used: {p['file']}: {p['problem']}")
    if r["indexProblems"]:
        print(r["indexAdvice"])
    listed = [("missing", e["path"], e.get("batchId"), e["size"]) for e in r["missing"]]
    listed += [
        ("size", e["path"], e.get("batchId"), f"{e['size']} logged, {e['actualSize']} on disk")
        for e in r["sizeMismatch"]
    ]
    listed += [
        ("batch", e["path"], e.get("batchId"), f"name says batch {e['nameBatchId']}")
        for e in r["wrongBatch"]
    ]
    listed += [("orphan", o["path"], o.get("batchId"), o["size"]) for o in r["orphans"]]
    if listed:
        print()
        print(
            table(
                ["problem", "batch", "size/detail", "path"],
                [[k, _batch(b), d, p] for k, p, b, d in listed[:_SHOWN]],
            )
        )
        if len(listed) > _SHOWN:
            print(f"... and {len(listed) - _SHOWN} more")
    index_only = (
        not r["logErrors"]
        and not r["missingCount"]
        and not r["sizeMismatchCount"]
        and not r["wrongBatchCount"]
    )
    if not r["healthy"] and index_only:
        print("\nOnly indexes are damaged. `python -m batchlog repair PATH` rewrites them.")
    elif not r["healthy"]:
        print("\nThe log does not match the output. `python -m batchlog repair PATH` rebuilds it.")
    return 0 if r["healthy"] else 1


def cmd_repair(spark: SparkSession, args: argparse.Namespace) -> int:
    r = batchlog.repair(
        spark,
        args.path,
        dry_run=args.dry_run,
        force=args.force,
        compact_interval=args.compact_interval,
    )
    print(f"sink            {r['sink']}")
    state = (
        "missing"
        if not r["logExists"]
        else ("healthy" if r["logHealthy"] else "damaged: " + "; ".join(r["logProblems"]))
    )
    print(f"log             {state}")
    if not r["needed"] and not args.force:
        print("nothing to do: the log is healthy (--force rebuilds it anyway)")
        return 0
    if r["indexesOnly"] and not args.force:
        head = "would rewrite" if args.dry_run else "rewrote"
        print(f"{head} only the damaged compact-file indexes, from their compact files:")
        for p in r["indexProblems"]:
            print(f"  {p['file']}")
        return 0
    assumed = " -- ASSUMED" if r["compactIntervalAssumed"] else ""
    print(
        f"compaction      every {r['compactInterval']} batches "
        f"(from {r['compactIntervalSource']}){assumed}"
    )
    if r.get("rewindInProgress") is not None:
        print(
            f"rewind          unfinished, to batch {r['rewindInProgress']}: finish it first "
            "(re-run the same rewind command)"
        )
    print(
        f"data files      {r['dataFiles']} ({human_bytes(r['dataBytes'])}) in "
        f"{len(r['batches'])} batches; latest batch {r['latestBatch']}"
    )
    if r["untaggedCount"]:
        print(f"not batch-tagged (left out, not guessed): {r['untaggedCount']} files")
        for p in r["untagged"][:_SHOWN]:
            print(f"  {p}")
    if r["suspectBatches"]:
        print(
            "WARNING: batches with files of more than one attempt (an orphaned attempt cannot "
            f"be told from the committed one without a log): {r['suspectBatches']}"
        )
    head = "would write" if args.dry_run else "wrote"
    print(f"\n{head} {len(r['logFiles'])} log files:")
    rows = [[f["name"], f["batches"], f["entries"]] for f in r["logFiles"]]
    print(table(["log file", "batches", "entries"], rows) if rows else "(none)")
    if r.get("movedAside"):
        print(f"\nthe damaged log was moved to {r['movedAside']}")
    if r["written"]:
        print("done: restart the query with its checkpoint.")
    return 0


def cmd_vacuum(spark: SparkSession, args: argparse.Namespace) -> int:
    dry = not args.apply
    r = batchlog.vacuum(spark, args.path, older_than=args.older_than, dry_run=dry)
    print(f"sink            {r['sink']}   (latest batch {r['latestBatch']})")
    rows = [
        [
            "would delete" if dry else "deleted",
            r["candidateFiles"] if dry else r["deletedFiles"],
            human_bytes(r["candidateBytes"]),
        ],
        [
            "kept: newer than " + args.older_than,
            r["skippedRecentFiles"],
            human_bytes(r["skippedRecentBytes"]),
        ],
        [
            "kept: batch may be running",
            r["skippedRunningFiles"],
            human_bytes(r["skippedRunningBytes"]),
        ],
    ]
    print(f"orphan files    {r['orphanFiles']} ({human_bytes(r['orphanBytes'])}) not in the log")
    print()
    print(table(["orphans", "files", "size"], rows))
    for c in r["candidates"][:_SHOWN]:
        print(f"  {c['path']}")
    if dry and r["candidateFiles"]:
        print("\nDRY RUN: nothing deleted; add --apply to delete.")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m batchlog", description=__doc__)
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
    s.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    s.add_argument(
        "--force",
        action="store_true",
        help="ignore a live writer lease: only for a writer known to be dead",
    )
    s.set_defaults(fn=cmd_rewind)
    s = sub.add_parser("takeover", help="make another query (its checkpoint) the sink's one writer")
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--checkpoint", required=True, help="the new writer's checkpointLocation")
    s.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    s.add_argument(
        "--force",
        action="store_true",
        help="ignore a live writer lease: only for a writer known to be dead",
    )
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
    s.add_argument(
        "--compact-interval",
        type=int,
        metavar="N",
        help="the query's spark.sql.streaming.fileSink.log.compactInterval (default: from the "
        "sink's record or compact files)",
    )
    s.set_defaults(fn=cmd_repair)
    s = sub.add_parser(
        "vacuum", help="delete orphan data files (not in the log) older than a duration"
    )
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 30m, 1h, 7d")
    s.add_argument("--apply", action="store_true", help="delete (default: dry run)")
    s.set_defaults(fn=cmd_vacuum)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark = _session(args.conf)
    try:
        return int(args.fn(spark, args))
    except batchlog.BatchLogError as e:
        print(f"batchlog: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
