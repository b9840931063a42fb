"""How the CLI prints each plan and report: readable lines and tables, no batchlog logic."""

from __future__ import annotations

import datetime
from pathlib import Path

from batchlog._cli_util import human_bytes, table
from batchlog._cli_util import when as _when
from batchlog.reports import (
    AdoptReport,
    CascadeHopSummary,
    CascadePlanSummary,
    CascadeReport,
    RepairReport,
    RewindPlanSummary,
    RewindResult,
    SinkHistory,
    SinkSummary,
    TakeoverReport,
    VacuumReport,
    VerifyReport,
)

#: Paths listed per category; the counts are complete.
SHOWN = 20


def span(ids: list[int]) -> str:
    """``[3, 4, 5]`` -> ``'3..5 (3)'``; other lists comma-separated."""
    if not ids:
        return "none"
    lo, hi = min(ids), max(ids)
    return f"{lo}..{hi} ({len(ids)})" if len(ids) == hi - lo + 1 else ", ".join(map(str, ids))


def _batch(b: int | None) -> str:
    return "-" if b is None else str(b)


def _names(names: list[str]) -> str:
    return ", ".join(names) or "nothing"


def inspect(info: SinkSummary) -> None:
    latest = info.latest_batch
    print(f"sink            {info.output_path}")
    print(f"latest batch    {latest if latest >= 0 else '(none)'}")
    print(
        f"compaction      every {info.compact_interval} batches; latest "
        f"{info.latest_compact or '(none yet)'}; next at batch {info.next_compaction_batch}"
    )
    print(f"log files       {info.log_files} ({human_bytes(info.log_bytes)})")
    print(f"log publish     {info.log_publish}")
    print(f"compaction copy {info.compaction}")
    h = info.horizon
    if h.checkpoint_horizon is None:
        where = f"sink lineage {h.sink_horizon}; pass --checkpoint for the checkpoint's"
    else:
        where = (
            f"sink lineage {h.sink_horizon}, checkpoint {h.checkpoint_horizon} "
            f"(minBatchesToRetain {h.min_batches_to_retain})"
        )
        if h.owner == h.checkpoint_query_id and (h.owner_since or 0) > max(
            h.sink_horizon, h.checkpoint_horizon
        ):
            where += f", owner since {h.owner_since} (a takeover)"
    print(f"rewind horizon  batch {h.horizon} ({where})")
    if info.retained_from > 0:
        print(
            f"retained from   batch {info.retained_from} (retention dropped entries of older "
            "batches: spark.batchlog.retention.*)"
        )
    if h.owner:
        print(f"written by      query {h.owner} (from batch {h.owner_since})")
    lease = info.lease
    if lease is None:
        print("lease holder    none (no writer's lease)")
    else:
        print(
            f"lease holder    query {lease.query_id} (run {lease.run_id}, driver pid {lease.pid} "
            f"on {lease.host}), at batch {lease.batch_id}; lease refreshed "
            f"{_utc(lease.refreshed_at_ms)} by its clock"
        )
    if h.checkpoint_query_id and h.owner and h.checkpoint_query_id != h.owner:
        print(
            f"WARNING         the checkpoint is query {h.checkpoint_query_id}'s, not the sink "
            "owner's: the sink refuses that query, and Spark's sink skips its batch ids up to "
            "the latest"
        )
    if h.checkpoint_skipped_batches:
        print(
            f"WARNING         {h.checkpoint_skipped_batches} committed batches of the checkpoint "
            f"(from {h.checkpoint_skipped_first} to {h.checkpoint_skipped_last}) were skipped by "
            "Spark's sink (their ids were already logged by another writer): their rows are not "
            "in the sink"
        )
    batches = info.batches
    files = sum(b.files for b in batches) + info.untagged_files
    size = sum(b.bytes for b in batches) + info.untagged_bytes
    print(f"live files      {files} ({human_bytes(size)}) in {len(batches)} batches")
    if info.untagged_files:
        print(
            f"untagged        {info.untagged_files} files "
            f"({human_bytes(info.untagged_bytes)}) have no provable batch"
        )
    print()
    rows = [[b.batch_id, b.files, b.bytes, human_bytes(b.bytes)] for b in batches]
    print(table(["batch", "files", "bytes", "size"], rows) if rows else "(no live files)")
    if info.readers:
        print()
        readers = [
            [r.query_id, r.source_index, r.kind, r.checkpoint, r.sink or "-"]
            + [_utc(r.seen_ms)]
            + ["stale" if r.stale else ""]
            for r in info.readers
        ]
        print(table(["reader query", "source", "kind", "checkpoint", "sink", "seen", ""], readers))


def history(h: SinkHistory, limit: int) -> None:
    """The sink's events by time, newest last: batches, compactions and operations; the newest
    ``limit`` of them (0: all)."""
    events: list[tuple[int, int, list[object]]] = []
    with_rows = any(b.rows is not None for b in h.batches)
    with_took = any(b.duration_ms is not None for b in h.batches)
    blank = [""] * (with_rows + with_took)
    for b in h.batches:
        row: list[object] = [_when(b.time_ms), "batch", b.batch_id, b.files, human_bytes(b.bytes)]
        row += [b.rows if b.rows is not None else ""] if with_rows else []
        row += [_seconds(b.duration_ms)] if with_took else []
        ids = [f"{k} {v[:8]}" for k, v in (("query", b.query_id), ("run", b.run_id)) if v]
        events.append((b.time_ms, 0, row + ["", ", ".join(ids)]))
    for c in h.compactions:
        row = [_when(c.time_ms), "compaction", c.batch_id, "", human_bytes(c.bytes)]
        events.append((c.time_ms, 1, row + blank + ["", c.file]))
    for o in h.operations:
        args = " ".join(f"{k}={v}" for k, v in sorted(o.arguments.items()))
        changed = " ".join(f"{k}={v}" for k, v in sorted(o.changed.items()))
        detail = "; ".join(x for x in (o.outcome, args, changed) if x)
        who = f"{o.user}@{o.host}"
        row = [_when(o.time_ms), o.operation, "", "", "", *blank]
        events.append((o.time_ms, 2, row + [who, detail]))
    events.sort(key=lambda e: (e[0], e[1]))
    shown = events if limit <= 0 else events[-limit:]
    latest = h.latest_batch if h.latest_batch >= 0 else "(none)"
    print(f"sink            {h.sink}")
    print(f"latest batch    {latest}")
    print(
        f"events          {_count(len(h.batches), 'live batch', 'live batches')}, "
        f"{_count(len(h.compactions), 'live compaction')}, "
        f"{_count(len(h.operations), 'operation')} "
        f"(operations kept {h.operations_retention_ms / 86_400_000:g} days)"
    )
    if h.untagged_files:
        print(f"untagged        {h.untagged_files} live files have no provable batch")
    print()
    if len(shown) < len(events):
        print(f"({len(events) - len(shown)} earlier events not shown; --limit 0 shows all)")
    headers = ["time", "event", "batch", "files", "size"] + (["rows"] if with_rows else [])
    headers += (["took"] if with_took else []) + ["by", "details"]
    print(table(headers, [e[2] for e in shown]) if shown else "(nothing yet)")


def _seconds(ms: int | None) -> str:
    return "" if ms is None else f"{ms / 1000:.1f} s"


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _utc(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"
    )


def rewind_plan(plan: RewindPlanSummary, dry_run: bool) -> None:
    n = plan.to_batch
    head = "DRY RUN: would rewind" if dry_run else "rewinding"
    print(
        f"{head} {plan.sink} to batch {n}"
        + ("  (resuming an unfinished rewind)" if plan.resuming else "")
    )
    print(f"checkpoint      {plan.checkpoint}")
    print(f"rewind horizon  batch {plan.horizon} (oldest batch a rewind can reach)")
    print(f"batches redone  {span(plan.affected_batches)}")
    orphans = f", of which {plan.orphan_files} orphans not in the log" if plan.orphan_files else ""
    print(f"data files      {plan.data_files} to delete ({human_bytes(plan.data_bytes)}){orphans}")
    cut = plan.sink_log
    rebuild = f"; rebuild {', '.join(cut.rebuild)}" if cut.rebuild else ""
    print(f"sink log        delete {_names(cut.delete)}{rebuild}")
    print(f"offsets/        delete {span(plan.offsets_to_delete)}")
    print(f"commits/        delete {span(plan.commits_to_delete)}")
    for s in plan.source_logs:
        rebuild = f"; rebuild {', '.join(s.rebuild)}" if s.rebuild else ""
        print(
            f"sources/{s.source}/      keep log offsets <= {s.keep_up_to}: delete "
            f"{_names(s.delete)}{rebuild}"
        )
    if plan.remove_state_dir:
        print("state/          remove entirely (rewind to batch 0)")
    else:
        print(
            f"state/          delete {len(plan.state_files)} files "
            f"({human_bytes(plan.state_bytes)}) of versions > {n}"
        )
    rows = [[b.batch_id, b.files, human_bytes(b.bytes)] for b in plan.data_files_per_batch]
    if rows:
        print()
        print(table(["batch", "files", "size"], rows))


def rewind_result(r: RewindResult) -> None:
    print(
        f"\ndone in {r.elapsed_ms / 1000:.1f} s (deleting {r.data_files_deleted} data files: "
        f"{r.data_files_ms / 1000:.1f} s). "
        f"Restart the query with the same checkpoint to re-run batch {r.to_batch}."
    )


def _hop_line(h: CascadeHopSummary) -> str:
    if h.depth == 0:
        how = "the sink rewound"
    else:
        how = f"{h.kind} source {h.source_index} read batch {h.upstream_from}+ upstream"
        if not h.registered:
            how += ", named by --downstream"
    if h.plan is None:
        return (
            f"(no file sink)  to batch {h.to_batch}: batches {h.to_batch}..{h.last_batch} run "
            f"again, their writes outside batchlog too  [{how}]"
            f"\n    checkpoint {h.checkpoint} (rewound)"
        )
    p = h.plan
    files = f"{p.data_files} data files ({human_bytes(p.data_bytes)})"
    resuming = ", resuming" if p.resuming else ""
    return (
        f"{h.sink}  to batch {h.to_batch}: {files}  [{how}{resuming}]"
        f"\n    checkpoint {h.checkpoint}"
    )


def cascade_plan(plan: CascadePlanSummary, dry_run: bool) -> None:
    head = "DRY RUN: would rewind" if dry_run else "rewinding"
    print(
        f"{head} the pipeline below {plan.sink} to batch {plan.to_batch}: {len(plan.hops)} "
        "hop(s)" + ("  (resuming an unfinished cascade)" if plan.resuming else "")
    )
    print()
    children: dict[str | None, list[CascadeHopSummary]] = {}
    for h in plan.hops[1:]:
        children.setdefault(h.upstream, []).append(h)

    def show(h: CascadeHopSummary, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└─ " if last else "├─ ")
        first, *rest = _hop_line(h).split("\n")
        print(prefix + branch + first)
        inner = prefix + ("" if top else ("   " if last else "│  "))
        below = children.get(h.sink, []) if h.sink else []
        for line in rest:
            print(inner + ("│" if below else " ") + line)
        for i, c in enumerate(below):
            show(c, inner, i == len(below) - 1, False)

    show(plan.hops[0], "", True, True)
    if plan.unaffected:
        print()
        rows = [[u.checkpoint, u.upstream, u.why] for u in plan.unaffected]
        print(table(["reader left as it is", "reads", "why"], rows))
    if dry_run:
        print("\nDRY RUN: nothing changed; run without --dry-run to rewind every hop.")


def cascade_result(r: CascadeReport) -> None:
    print()
    for h, res in zip(r.plan.hops, r.results or []):
        if h.plan is None:
            print(
                f"{h.checkpoint}: checkpoint back to batch {h.to_batch} (no file sink: batches "
                f"{h.to_batch}..{h.last_batch} write again wherever they write)"
            )
        elif res is not None:
            print(
                f"{h.sink}: back to batch {h.to_batch}, {res.data_files_deleted} data files "
                f"deleted ({human_bytes(res.data_bytes)})"
            )
    print(
        f"\ndone in {r.elapsed_ms / 1000:.1f} s. Restart each hop's query with its checkpoint, "
        "in any order: each re-runs its first rewound batch and reads its upstream's new "
        "batches once."
    )


def takeover_plan(r: TakeoverReport) -> None:
    print(f"sink            {r.sink}")
    print(f"checkpoint      {r.checkpoint} (query {r.query_id})")
    if r.already_owner:
        print("owner           already this query; nothing to do")
        return
    previous = r.previous_owner
    print(
        "previous owner  "
        + (f"query {previous} (from batch {r.previous_owner_since})" if previous else "(none)")
    )
    print(f"new owner from  batch {r.from_batch} (the sink's latest is {r.sink_latest_batch})")
    if r.skipped_batches:
        print(
            f"warning         Spark's file sink skips batch ids <= {r.sink_latest_batch}: the "
            f"query's next {r.skipped_batches} batches (from {r.checkpoint_next_batch}) "
            "will not be written to this sink"
        )


def adopt(r: AdoptReport) -> None:
    verb = "would tag" if r.dry_run else "tagged"
    print(
        f"{verb} {r.entries_tagged} entries in {r.compact_files} compact files; "
        f"{r.entries_untagged} stay untagged (no provable batch)"
    )
    print(f"rewind horizon from the sink log: batch {r.untagged_horizon}")


def verify(r: VerifyReport) -> None:
    print(f"sink            {r.sink}")
    print(f"verdict         {'HEALTHY' if r.healthy else 'UNHEALTHY'}")
    print(f"latest batch    {r.latest_batch if r.latest_batch >= 0 else '(none)'}")
    print(f"live files      {r.live_files} ({human_bytes(r.live_bytes)})")
    rows = [
        ["missing (logged, not on disk)", r.missing_count, "unhealthy"],
        ["size differs from the log", r.size_mismatch_count, "unhealthy"],
        ["name's batch differs from the log", r.wrong_batch_count, "unhealthy"],
        ["log errors", len(r.log_errors), "unhealthy"],
        ["damaged compact-file indexes", len(r.index_problems), "unhealthy; see repair"],
        ["damaged compact-file runs", len(r.damaged_runs), "unhealthy; see repair"],
        ["indexes rebuilt in memory", r.indexes_rebuilt_in_memory, "ok (absent, v1 or newer)"],
        ["logged outside the output", r.foreign_count, "unhealthy; see repair"],
        ["orphans (on disk, not logged)", r.orphan_count, "ok; see vacuum"],
        ["symbolic links (not followed)", len(r.links), "ok; never followed or deleted"],
        ["other files (not data)", r.other_file_count, "ok; never deleted"],
    ]
    if r.open_uploads:  # only on a store with multipart uploads (S3)
        rows.append(["open multipart uploads (S3)", len(r.open_uploads), "ok; billed, see vacuum"])
    print()
    print(table(["check", "files", "meaning"], rows))
    for msg in r.log_errors:
        print(f"\nlog error: {msg}")
    for p in r.index_problems:
        print(f"\nindex not used: {p.file}: {p.problem}")
    if r.index_advice:
        print(r.index_advice)
    listed: list[tuple[str, str, int | None, object]] = [
        ("missing", e.path, e.batch_id, e.size) for e in r.missing
    ]
    listed += [
        ("size", e.path, e.batch_id, f"{e.size} logged, {e.actual_size} on disk")
        for e in r.size_mismatch
    ]
    listed += [
        ("batch", e.path, e.batch_id, f"name says batch {e.name_batch_id}") for e in r.wrong_batch
    ]
    listed += [("outside", e.path, e.batch_id, e.reason) for e in r.foreign]
    listed += [("orphan", o.path, o.batch_id, o.size) for o in r.orphans]
    listed += [("link", p, None, "not followed") for p in r.links]
    listed += [
        ("upload", u.path, None, f"open since {_when(u.initiated_time)}") for u in r.open_uploads
    ]
    if listed:
        print()
        print(
            table(
                ["problem", "batch", "size/detail", "path"],
                [[k, _batch(b), d, p] for k, p, b, d in listed[:SHOWN]],
            )
        )
        if len(listed) > SHOWN:
            print(f"... and {len(listed) - SHOWN} more")
    for c in r.checkpoints_in_output:
        print(f"\ncheckpoint inside the output: {c} (vacuum refuses this output)")
    index_only = not (
        r.log_errors
        or r.missing_count
        or r.size_mismatch_count
        or r.wrong_batch_count
        or r.foreign_count
    )
    if not r.healthy and r.damaged_runs:
        print(
            "\nCompact files are damaged. `python -m batchlog repair PATH` restores the entries "
            "of the damaged batches."
        )
    elif not r.healthy and index_only:
        print("\nOnly indexes are damaged. `python -m batchlog repair PATH` rewrites them.")
    elif not r.healthy:
        print("\nThe log does not match the output. `python -m batchlog repair PATH` rebuilds it.")


def repair_state(r: RepairReport) -> None:
    print(f"sink            {r.sink}")
    if not r.log_exists:
        state = "missing"
    else:
        state = "healthy" if r.log_healthy else "damaged: " + "; ".join(r.log_problems)
    print(f"log             {state}")


def repair_plan(r: RepairReport, dry_run: bool) -> None:
    """The plan of a repair that rebuilds the log."""
    if r.compact_interval_assumed:
        print(f"compaction      {r.compact_interval_source}")
    else:
        print(
            f"compaction      every {r.compact_interval} batches (from {r.compact_interval_source})"
        )
    if r.rewind_in_progress is not None:
        print(
            f"rewind          unfinished, to batch {r.rewind_in_progress}: finish it first "
            "(re-run the same rewind command)"
        )
    print(
        f"data files      {r.data_files} ({human_bytes(r.data_bytes)}) in "
        f"{len(r.batches)} batches; latest batch {r.latest_batch}"
    )
    if r.untagged_count:
        print(f"not batch-tagged (left out, not guessed): {r.untagged_count} files")
        for p in r.untagged[:SHOWN]:
            print(f"  {p}")
    if r.suspect_batches:
        print(
            "WARNING: batches with files of more than one attempt (an orphaned attempt cannot "
            f"be told from the committed one without a log): {r.suspect_batches}. Their rows "
            "may be read twice: after the repair, rewind to the first of them (`python -m "
            f"batchlog rewind {r.sink} --checkpoint <the query's> --to-batch "
            f"{min(r.suspect_batches)}`: every file of those batches goes) and restart the query."
        )
    head = "would write" if dry_run else "writing"
    print(f"\n{head} {len(r.log_files)} log files:")
    rows = [[f.name, f.batches, f.entries] for f in r.log_files]
    print(table(["log file", "batches", "entries"], rows) if rows else "(none)")


def repair_runs(r: RepairReport, dry_run: bool) -> None:
    """The plan of a repair that restores the damaged runs of compact files."""
    head = "would restore" if dry_run else "restoring"
    print(
        f"{head} only the damaged batches of compact files (each damaged file is kept in "
        "_spark_metadata.damaged-<time>):"
    )
    rows = [[Path(x.file).name, x.batch_id, x.entries, x.source] for x in r.runs_restored]
    print(table(["compact file", "batch", "entries", "from"], rows))
    for p in r.index_problems:
        print(f"and rewrite the damaged index {p.file}")


def repair_outcome(r: RepairReport) -> None:
    if r.moved_aside:
        print(f"\nthe old log files were copied to {r.moved_aside}")
    if r.written:
        print("done: restart the query with its checkpoint.")


def vacuum_plan(r: VacuumReport, older_than: str, dry_run: bool) -> None:
    print(f"sink            {r.sink}   (latest batch {r.latest_batch})")
    rows: list[list[object]] = [
        [
            "would delete" if dry_run else "to delete",
            r.candidate_files,
            human_bytes(r.candidate_bytes),
        ],
        [
            "kept: newer than " + older_than,
            r.skipped_recent_files,
            human_bytes(r.skipped_recent_bytes),
        ],
        [
            "kept: batch may be running",
            r.skipped_running_files,
            human_bytes(r.skipped_running_bytes),
        ],
    ]
    print(f"orphan files    {r.orphan_files} ({human_bytes(r.orphan_bytes)}) not in the log")
    print()
    print(table(["orphans", "files", "size"], rows))
    for c in r.candidates[:SHOWN]:
        print(f"  {c.path}")
    if r.uploads_to_abort or r.recent_uploads:
        verb = "would abort" if dry_run else "to abort"
        print(
            f"open uploads    {verb} {len(r.uploads_to_abort)} multipart uploads under the log "
            f"(a killed compaction's); kept {r.recent_uploads} newer than {older_than}"
        )
        for u in r.uploads_to_abort[:SHOWN]:
            print(f"  {u.path}  (open since {_when(u.initiated_time)})")
    if r.other_file_count or r.skipped_links:
        print(
            f"left alone      {r.other_file_count} files not named as data files, "
            f"{len(r.skipped_links)} symbolic links (never followed)"
        )
