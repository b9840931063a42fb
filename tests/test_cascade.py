"""Rewind a pipeline, not a sink (issue 41): ``rewind --cascade`` rewinds a sink and every query
downstream of it, each to its first batch that read a rewound batch, and the pipeline then comes
out row for row as a from-scratch run of the fixed pipeline, restarted in any order.

The pipeline (real queries, real files): bronze (json -> parquet, one input file per batch, a bug
from input file ``K`` on), silver (the ``batchlog`` source over bronze, ``maxBatchesPerTrigger``
2), gold (the ``batchlog`` source over silver, one batch per trigger) and a side reader (Spark's
own file source over bronze). It is built in two rounds of three input files, so every reader has
batches before and after the rewound ones.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from reliability_support import (
    SINK_CONFS,
    batchlog,
    snapshot,
    spark_session,
    sql_conf,
    write_input,
)
from rewind_support import REWIND_STEPS
from support import await_query, cli_here, halt_after_rewind_step_confs, run_cli

spark = spark_session  # the module's session fixture

#: the input file (= bronze batch) from which bronze's bug writes wrong payloads
K = 4
SCHEMA = "id LONG, part STRING, payload STRING"
INFER = {"spark.sql.streaming.schemaInference": "true"}


@dataclass
class Pipeline:
    root: Path

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def inp(self) -> Path:
        return self.root / "in"

    def out(self, hop: str) -> str:
        return str(self.root / hop)

    def chk(self, hop: str) -> str:
        return str(self.root / f"{hop}-chk")


def _run(spark: SparkSession, frame: DataFrame, out: str, chk: str) -> None:
    with sql_conf(spark, **SINK_CONFS):
        q = (
            frame.writeStream.format("parquet")
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start(out)
        )
        await_query(q, out)


def bronze(spark: SparkSession, p: Pipeline, fixed: bool) -> None:
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(p.inp))
    bug = F.when(F.col("id") >= K * 1000, F.lit("bug")).otherwise(F.col("payload"))
    frame = frame.withColumn("payload", F.col("payload") if fixed else bug)
    _run(spark, frame, p.out("bronze"), p.chk("bronze"))


def silver(spark: SparkSession, p: Pipeline) -> None:
    with sql_conf(spark, **INFER):
        frame = (
            spark.readStream.format("batchlog")
            .option("maxBatchesPerTrigger", 2)
            .load(p.out("bronze"))
        )
    frame = frame.select("id", "payload")
    _run(spark, frame, p.out("silver"), p.chk("silver"))


def gold(spark: SparkSession, p: Pipeline) -> None:
    """A windowed count with a watermark, in append mode: input file k's rows (ids k*1000+i) fall
    in the 10 s window from 10k s; a window is written once the watermark passes its end."""
    with sql_conf(spark, **INFER):
        frame = (
            spark.readStream.format("batchlog")
            .option("maxBatchesPerTrigger", 1)
            .load(p.out("silver"))
        )
    seconds = F.floor(F.col("id") / 1000) * 10 + F.col("id") % 1000
    counts = (
        frame.withColumn("ts", F.timestamp_seconds(seconds))
        .withWatermark("ts", "0 seconds")
        .groupBy(F.window("ts", "10 seconds"), "payload")
        .count()
        .select(F.col("window.start").alias("w"), "payload", "count")
    )
    _run(spark, counts, p.out("gold"), p.chk("gold"))


def side(spark: SparkSession, p: Pipeline) -> None:
    frame = spark.readStream.schema(SCHEMA).parquet(p.out("bronze"))
    _run(spark, frame.select("id", "payload"), p.out("side"), p.chk("side"))


HOPS = {"bronze": None, "silver": silver, "gold": gold, "side": side}


def build(spark: SparkSession, p: Pipeline, fixed: bool = False) -> None:
    """Two rounds of three input files, each run through every hop."""
    for first in (0, 3):
        write_input(p.inp, first, 3, 3)
        bronze(spark, p, fixed)
        silver(spark, p)
        gold(spark, p)
        side(spark, p)


def rows(spark: SparkSession, out: str) -> list[tuple]:
    """The hop's rows as plain Spark reads them (through the sink's log), sorted."""
    frame = spark.read.parquet(out)
    return sorted(tuple(r) for r in frame.select(*sorted(frame.columns)).collect())


@pytest.fixture(scope="module")
def reference(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Each hop's rows from a from-scratch run of the fixed pipeline on the same input."""
    p = Pipeline(tmp_path_factory.mktemp("reference"))
    build(spark, p, fixed=True)
    return {hop: rows(spark, p.out(hop)) for hop in HOPS}


@pytest.fixture
def pipeline(spark: SparkSession, tmp_path: Path) -> Pipeline:
    """The buggy pipeline, built for the test (its logs and checkpoints name its own paths)."""
    p = Pipeline(tmp_path)
    build(spark, p)
    return p


def hop_batches(plan: batchlog.reports.CascadePlanSummary, p: Pipeline) -> dict[str, int]:
    def name(h: batchlog.reports.CascadeHopSummary) -> str:
        return Path(h.checkpoint.removeprefix("file:")).name.removesuffix("-chk")

    return {name(h): h.to_batch for h in plan.hops}


def first_read(chk: str, up_batch: int) -> int:
    """The first batch of a ``batchlog``-source reader (checkpoint ``chk``) whose offset reaches
    upstream batch ``up_batch``: its ``offsets/N`` record the upstream batch read up to (a
    no-data batch, which only moves the watermark, repeats the one before)."""
    offsets = sorted(int(f.name) for f in (Path(chk) / "offsets").iterdir() if f.name.isdigit())
    for n in offsets:
        last = (Path(chk) / "offsets" / str(n)).read_text().strip().splitlines()[-1]
        if json.loads(last)["batchId"] >= up_batch:
            return n
    raise AssertionError(f"{chk} read no batch >= {up_batch}")


def expected_hops(p: Pipeline) -> dict[str, int]:
    """Silver read bronze 0-1, 2 | 3-4, 5: its batch 2 read bronze 4; the side reader read bronze
    0-2 | 3-5; gold's batch that first read silver 2 depends on its no-data batches."""
    return {"bronze": K, "silver": 2, "gold": first_read(p.chk("gold"), 2), "side": 1}


def restart_all(spark: SparkSession, p: Pipeline, order: list[str]) -> None:
    """The hops restarted in `order` (bronze with the fix), then once more upstream first."""
    for hop in order + ["bronze", "silver", "gold", "side"]:
        if hop == "bronze":
            bronze(spark, p, fixed=True)
        else:
            HOPS[hop](spark, p)  # type: ignore[misc]


def test_a_cascade_rewinds_every_hop_and_the_pipeline_comes_out_exact(
    spark: SparkSession, pipeline: Pipeline, reference: dict
) -> None:
    p = pipeline
    assert rows(spark, p.out("gold")) != reference["gold"]  # the bug reached every hop

    before = snapshot(p.root)
    report = batchlog.rewind(
        spark, p.out("bronze"), p.chk("bronze"), to_batch=K, cascade=True, dry_run=True
    )
    assert snapshot(p.root) == before  # a dry run changes nothing
    assert report.results is None
    # silver read bronze 0-1, 2 | 3-4, 5: its batch 2 read bronze 4; gold read silver one batch
    # at a time; the side reader read bronze 0-2 | 3-5
    assert hop_batches(report.plan, p) == expected_hops(p)
    kinds = {h.kind for h in report.hops}
    assert kinds == {"root", "batchlog", "file"}
    for h in report.hops:
        assert h.plan is not None and h.plan.to_batch == h.to_batch and h.registered
    gold_hop = next(h for h in report.hops if h.checkpoint.endswith("gold-chk"))
    assert gold_hop.depth == 2 and (gold_hop.upstream or "").endswith("/silver")

    done = batchlog.rewind(
        spark, p.out("bronze"), p.chk("bronze"), to_batch=K, cascade=True, quiet=True
    )
    assert done.results is not None and len(done.results) == 4
    for hop in ("bronze", "silver", "gold", "side"):
        assert not (p.path(hop) / "_batchlog" / "_batchlog-rewind.json").exists()
    assert not (p.path("bronze") / "_batchlog" / "_batchlog-cascade.json").exists()
    # each hop's sink records the cascade once: what was asked (at the root), and what this hop
    # lost and how far down the pipeline it is
    for h, res in zip(done.hops, done.results):
        assert h.sink is not None and res is not None and h.plan is not None
        (op,) = batchlog.SinkLog(spark, h.sink).history().operations
        assert (op.operation, op.outcome) == ("cascade", "done"), h.sink
        assert op.arguments == {
            "checkpoint": p.chk("bronze"),
            "toBatch": str(K),
            "force": "false",
        }
        assert op.changed == {
            "batches": len(h.plan.affected_batches),
            "dataFilesDeleted": res.data_files_deleted,
            "dataBytesDeleted": res.data_bytes,
            "depth": h.depth,
            "toBatch": h.to_batch,
        }, h.sink
    assert sorted(h.depth for h in done.hops) == [0, 1, 1, 2]

    restart_all(spark, p, ["gold", "side", "silver", "bronze"])
    for hop in HOPS:
        assert rows(spark, p.out(hop)) == reference[hop], hop


def test_the_cli_dry_run_prints_the_tree_and_changes_nothing(
    spark: SparkSession, pipeline: Pipeline
) -> None:
    p = pipeline
    before = snapshot(p.root)
    r = cli_here(
        spark,
        "rewind",
        p.out("bronze"),
        "--checkpoint",
        p.chk("bronze"),
        "--to-batch",
        str(K),
        "--cascade",
        "--dry-run",
    )
    assert r.returncode == 0, r.stderr
    assert snapshot(p.root) == before
    lines = r.stdout.splitlines()
    assert lines[0].startswith("DRY RUN: would rewind the pipeline below ")
    assert f"to batch {K}: 4 hop(s)" in lines[0]
    tree = [ln for ln in lines if "to batch" in ln and "data files" in ln]
    assert tree[0].startswith(f"file:{p.root}/bronze  to batch {K}: ")
    assert any(ln.startswith("├─ ") or ln.startswith("└─ ") for ln in tree)
    assert any(ln.lstrip("│ ").startswith("└─ ") and "/gold" in ln for ln in tree)
    assert "nothing changed" in r.stdout


def test_a_hop_named_by_hand_is_found_and_rewound(
    spark: SparkSession, pipeline: Pipeline, reference: dict
) -> None:
    p = pipeline
    # the side reader never registered (it ran without batchlog's jar, say)
    for f in (p.path("bronze") / "_batchlog" / "_readers").glob("*.json"):
        if json.loads(f.read_text())["kind"] == "file":
            f.unlink()
    plan = batchlog.cascade_action(spark, p.out("bronze"), p.chk("bronze"), K).plan()
    assert set(hop_batches(plan, p)) == {"bronze", "silver", "gold"}

    named = [f"{p.out('side')}={p.chk('side')}"]
    plan = batchlog.cascade_action(spark, p.out("bronze"), p.chk("bronze"), K, named).plan()
    assert hop_batches(plan, p) == expected_hops(p)
    side_hop = next(h for h in plan.hops if h.checkpoint.endswith("side-chk"))
    assert (side_hop.kind, side_hop.registered) == ("file", False)
    assert f"--downstream {p.out('side')}=" in plan.command

    # a query that reads none of the cascade's sinks is refused, by name
    with pytest.raises(batchlog.InvalidArgumentError, match="no source of that query reads"):
        batchlog.cascade_action(
            spark, p.out("silver"), p.chk("silver"), 2, [f"{p.out('side')}={p.chk('side')}"]
        ).plan()


def test_the_sql_statement_and_the_python_api_give_the_same_plan(
    spark: SparkSession, pipeline: Pipeline
) -> None:
    p = pipeline
    row = spark.sql(
        f"BATCHLOG REWIND '{p.out('bronze')}' CHECKPOINT '{p.chk('bronze')}' TO BATCH {K} "
        "CASCADE DRY RUN"
    ).collect()[0]
    assert row.dry_run
    report = batchlog.reports.from_json(batchlog.reports.CascadeReport, row.report)
    api = batchlog.rewind(
        spark, p.out("bronze"), p.chk("bronze"), to_batch=K, cascade=True, dry_run=True
    )
    assert report.plan == api.plan
    with pytest.raises(Exception, match="DOWNSTREAM needs CASCADE"):
        spark.sql(
            f"BATCHLOG REWIND '{p.out('bronze')}' CHECKPOINT '{p.chk('bronze')}' TO BATCH {K} "
            "DOWNSTREAM 'a=b'"
        ).collect()


@pytest.mark.parametrize("step", ["0:sink-log", "2:offsets", "cascade-done"])
def test_a_cascade_killed_at_a_step_is_finished_by_running_it_again(
    spark: SparkSession, pipeline: Pipeline, reference: dict, step: str
) -> None:
    p = pipeline
    args = ["rewind", p.out("bronze"), "--checkpoint", p.chk("bronze"), "--to-batch", str(K)]
    killed = run_cli(*halt_after_rewind_step_confs(step), *args, "--cascade")
    # the JVM halted right after the step: the CLI's Python process loses it and fails
    assert killed.returncode != 0
    assert f"halting the JVM after rewind step '{step}'" in killed.stderr, killed.stderr[-3000:]
    assert "cascade step 'cascade-intent' done" in killed.stderr

    # a hop fenced by then (bronze is the first) refuses its query, naming the cascade's command
    if step != "cascade-intent":
        with pytest.raises(StreamingQueryException, match="--cascade"):
            bronze(spark, p, fixed=True)
    again = cli_here(spark, *args, "--cascade")
    assert again.returncode == 0, again.stderr
    for hop in HOPS:
        assert not (p.path(hop) / "_batchlog" / "_batchlog-rewind.json").exists(), hop
    restart_all(spark, p, ["side", "gold", "bronze", "silver"])
    for hop in HOPS:
        assert rows(spark, p.out(hop)) == reference[hop], hop


def test_a_live_writer_on_any_hop_refuses_the_whole_cascade(
    spark: SparkSession, pipeline: Pipeline
) -> None:
    p = pipeline
    before = snapshot(p.root)
    with sql_conf(spark, **SINK_CONFS, **INFER):
        q = (
            spark.readStream.format("batchlog")
            .load(p.out("silver"))
            .writeStream.format("parquet")
            .option("checkpointLocation", p.chk("gold"))
            .trigger(processingTime="200 milliseconds")
            .start(p.out("gold"))
        )
        try:
            q.processAllAvailable()
            with pytest.raises(batchlog.BatchLogError, match="/gold"):
                batchlog.rewind(spark, p.out("bronze"), p.chk("bronze"), to_batch=K, cascade=True)
        finally:
            q.stop()
    after = snapshot(p.root)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # only the gold query's own run changed anything (its lease, its reader record)
    assert all("/gold" in k or "_readers" in k for k in changed), sorted(changed)


def named_command(error: BaseException) -> list[str]:
    """The CLI command an ``UPSTREAM_REWOUND`` error names (``python -m batchlog ...``), as
    arguments."""
    m = re.search(r"`python -m batchlog (rewind [^`]*--cascade)`", str(error))
    assert m, str(error)
    return m.group(1).split()


def test_a_file_source_reader_stops_before_a_replayed_batch_and_one_command_fixes_it(
    spark: SparkSession, pipeline: Pipeline, reference: dict
) -> None:
    """Bronze alone rewound (no cascade) and re-run: Spark's file source would take the replayed
    files for new ones (the side reader's rows of bronze 4 and 5 counted twice, no error). It
    stops first, and so does silver; each error names the one command that rewinds that query
    and everything below it from its own first batch that read a rewound batch, bronze left as
    it is. Run as named, the pipeline comes out exact."""
    p = pipeline
    batchlog.rewind(spark, p.out("bronze"), p.chk("bronze"), K, quiet=True)
    bronze(spark, p, fixed=True)
    bronze_files = sorted(f.name for f in p.path("bronze").glob("part-*"))
    side_rows = rows(spark, p.out("side"))
    want = expected_hops(p)
    with pytest.raises(StreamingQueryException) as side_error:
        side(spark, p)
    assert "was rewritten" in str(side_error.value), str(side_error.value)
    assert rows(spark, p.out("side")) == side_rows  # nothing read twice
    with pytest.raises(StreamingQueryException) as silver_error:  # nor by the batchlog source
        silver(spark, p)

    def paths(fix: list[str]) -> list[str]:
        return [a.removeprefix("file:") for a in fix]

    side_fix = named_command(side_error.value)
    assert paths(side_fix)[1:] == [
        p.out("side"),
        "--checkpoint",
        p.chk("side"),
        "--to-batch",
        str(want["side"]),
        "--cascade",
    ]
    silver_fix = named_command(silver_error.value)
    assert paths(silver_fix)[1:6] == [
        p.out("silver"),
        "--checkpoint",
        p.chk("silver"),
        "--to-batch",
        str(want["silver"]),
    ]
    # the side reader's first batch is planned anew from the batch before (its offsets/N named
    # files the rewind deleted), not replayed counting on Spark to skip missing files
    plan = (
        batchlog.rewind(
            spark, p.out("side"), p.chk("side"), want["side"], cascade=True, dry_run=True
        )
        .hops[0]
        .plan
    )
    assert plan is not None and want["side"] in plan.offsets_to_delete
    assert [c.keep_up_to for c in plan.source_logs] == [want["side"] - 1]
    for fix in (silver_fix, side_fix):
        r = cli_here(spark, *fix)
        assert r.returncode == 0, r.stderr + r.stdout
    # gold, below silver, was rewound with it; bronze was not touched again
    assert sorted(f.name for f in p.path("bronze").glob("part-*")) == bronze_files
    restart_all(spark, p, ["gold", "side", "silver"])
    for hop in HOPS:
        assert rows(spark, p.out(hop)) == reference[hop], hop


def audit(spark: SparkSession, p: Pipeline, table: dict[int, list[tuple]]) -> None:
    """A hop that writes no file sink: ``foreachBatch`` over silver (the ``batchlog`` source, one
    batch a trigger) into ``table``, keyed by batch id, as an idempotent writer would."""

    def write(frame: DataFrame, batch_id: int) -> None:
        table[batch_id] = sorted(tuple(r) for r in frame.select("id", "payload").collect())

    with sql_conf(spark, **SINK_CONFS, **INFER):
        q = (
            spark.readStream.format("batchlog")
            .option("maxBatchesPerTrigger", 1)
            .load(p.out("silver"))
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", p.chk("audit"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert q.awaitTermination(300)
        finally:
            if q.isActive:
                q.stop()
        if q.exception() is not None:
            raise q.exception()  # type: ignore[misc]


def test_a_hop_without_a_file_sink_has_its_checkpoint_rewound(
    spark: SparkSession, pipeline: Pipeline, reference: dict
) -> None:
    """A ``foreachBatch`` reader of silver is a hop too: its checkpoint is rewound to its first
    batch that read a rewound silver batch, its query is refused while the cascade is unfinished,
    and after the restarts its batches from there carry exactly the fixed rows."""
    p = pipeline
    table: dict[int, list[tuple]] = {}
    audit(spark, p, table)
    last = max(table)
    want = first_read(p.chk("audit"), 2)  # the first audit batch that read silver 2

    args = ["rewind", p.out("bronze"), "--checkpoint", p.chk("bronze"), "--to-batch", str(K)]
    dry = cli_here(spark, *args, "--cascade", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    line = next(ln for ln in dry.stdout.splitlines() if "(no file sink)" in ln)
    assert f"to batch {want}: batches {want}..{last} run again" in line, dry.stdout
    report = batchlog.rewind(
        spark, p.out("bronze"), p.chk("bronze"), to_batch=K, cascade=True, dry_run=True
    )
    hop = next(h for h in report.hops if h.checkpoint.endswith("audit-chk"))
    assert (hop.sink, hop.plan, hop.kind, hop.to_batch) == (None, None, "batchlog", want)
    assert hop.checkpoint_rewind is not None and want in hop.checkpoint_rewind.offsets_to_delete

    # killed with every hop cut, before any hop's intent is removed: the audit query, which no
    # lease guards, is refused by silver's
    killed = run_cli(*halt_after_rewind_step_confs("cascade-done"), *args, "--cascade")
    assert killed.returncode != 0
    with pytest.raises(StreamingQueryException, match="--cascade"):
        audit(spark, p, table)
    assert max(table) == last  # it read nothing
    # run again, it finishes the hops' intents; the audit checkpoint, cut already, is left as it is
    again = cli_here(spark, *args, "--cascade")
    assert again.returncode == 0, again.stderr
    assert "it read no batch" in again.stdout

    # the batches from `want` on run again: an idempotent writer replaces them
    for b in [b for b in table if b >= want]:
        del table[b]
    restart_all(spark, p, ["side", "gold", "bronze", "silver"])
    audit(spark, p, table)
    assert sorted(r for rows_ in table.values() for r in rows_) == reference["silver"]


def test_a_damaged_hop_checkpoint_stops_the_plan_naming_the_file(
    spark: SparkSession, pipeline: Pipeline
) -> None:
    """Bit rot in a hop's ``offsets/N`` (the batchlog source's offset no longer one) or in its
    file source's log: the cascade stops, naming the file, and changes nothing. Read as "no
    offset" or skipped, either would make the cascade pick a later batch without a word."""
    p = pipeline
    offsets = Path(p.chk("silver")) / "offsets" / "2"
    good = offsets.read_text()
    lines = good.splitlines()
    offsets.write_text("\n".join(lines[:-1] + [lines[-1].replace('"batchId"', '"batchJd"')]))
    before = snapshot(p.root)
    with pytest.raises(batchlog.BatchLogError, match=f"{offsets}.*damaged"):
        batchlog.rewind(spark, p.out("bronze"), p.chk("bronze"), K, cascade=True, dry_run=True)
    with pytest.raises(batchlog.BatchLogError, match=f"{offsets}.*damaged"):
        batchlog.rewind(spark, p.out("bronze"), p.chk("bronze"), K, cascade=True, quiet=True)
    assert snapshot(p.root) == before
    offsets.write_text(good)

    source_log = Path(p.chk("side")) / "sources" / "0" / "1"
    source_log.write_text(source_log.read_text().replace('"path"', '"pbth"'))
    before = snapshot(p.root)
    with pytest.raises(batchlog.BatchLogError, match=f"{source_log}.*line 2.*damaged"):
        batchlog.rewind(spark, p.out("bronze"), p.chk("bronze"), K, cascade=True, quiet=True)
    assert snapshot(p.root) == before


def test_a_file_source_reader_that_never_registered_is_stopped_at_its_next_start(
    spark: SparkSession, pipeline: Pipeline, reference: dict
) -> None:
    """A side reader that ran without batchlog's jar (no reader record) and is not named is left
    out of the cascade; restarted with the jar, it registers, finds the replayed files among
    what it read before, and stops, naming its own cascade; run as named, it comes out exact."""
    p = pipeline
    for f in (p.path("bronze") / "_batchlog" / "_readers").glob("*.json"):
        if json.loads(f.read_text())["kind"] == "file":
            f.unlink()
    report = batchlog.rewind(spark, p.out("bronze"), p.chk("bronze"), K, cascade=True, quiet=True)
    assert "side" not in hop_batches(report.plan, p)
    bronze(spark, p, fixed=True)
    silver(spark, p)
    gold(spark, p)
    side_rows = rows(spark, p.out("side"))
    with pytest.raises(StreamingQueryException) as e:
        side(spark, p)
    assert rows(spark, p.out("side")) == side_rows
    fix = named_command(e.value)
    assert fix[1].removeprefix("file:") == p.out("side") and fix[5] == "1", fix
    r = cli_here(spark, *fix)
    assert r.returncode == 0, r.stderr + r.stdout
    side(spark, p)
    assert rows(spark, p.out("side")) == reference["side"]


def _state(root: Path) -> dict[str, bytes]:
    """What a restarted pipeline depends on: every file under ``root`` but batchlog's own records
    (``_batchlog/``: epochs, leases, times) and compact indexes (they record their compact file's
    modification time; the log reads them only to find entries, and checks them)."""
    return {
        k: v
        for k, v in snapshot(root).items()
        if "_batchlog/" not in k and ".compact.index" not in k
    }


@pytest.fixture(scope="module")
def template(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The buggy pipeline built once, kept in a copy restored to the same place (its logs and
    checkpoints name absolute paths) before each use; and the state an uninterrupted cascade
    leaves."""
    p = Pipeline(tmp_path_factory.mktemp("steps"))
    build(spark, p)
    snap = p.root.with_name(p.root.name + "-snap")
    shutil.copytree(p.root, snap, symlinks=True)
    batchlog.rewind(spark, p.out("bronze"), p.chk("bronze"), to_batch=K, cascade=True, quiet=True)
    return p, snap, _state(p.root)


def _restore(p: Pipeline, snap: Path) -> None:
    shutil.rmtree(p.root)
    shutil.copytree(snap, p.root, symlinks=True)


#: every step of the test pipeline's cascade: its own two, and each rewind step of its 4 hops
ALL_STEPS = ["cascade-intent"] + [f"{i}:{s}" for i in range(4) for s in REWIND_STEPS]
ALL_STEPS += ["cascade-done"]


@pytest.mark.parametrize("step", ALL_STEPS)
def test_a_cascade_killed_at_any_step_and_run_again_leaves_what_one_run_leaves(
    spark: SparkSession, template: tuple, step: str
) -> None:
    """The cascade SIGKILLed (its JVM halted) right after each of its steps, then run again,
    leaves every sink and checkpoint as one uninterrupted run does (from which the pipeline
    comes out exact: the tests above, which restart every hop after a kill at three steps);
    until then, a fenced hop refuses its query."""
    p, snap, once = template
    _restore(p, snap)
    args = ["rewind", p.out("bronze"), "--checkpoint", p.chk("bronze"), "--to-batch", str(K)]
    killed = run_cli(*halt_after_rewind_step_confs(step), *args, "--cascade")
    assert killed.returncode != 0
    assert f"halting the JVM after rewind step '{step}'" in killed.stderr, killed.stderr[-3000:]
    if step in ("1:fence", "3:source-logs"):  # bronze is fenced from its intent to its done
        with pytest.raises(StreamingQueryException, match="--cascade"):
            bronze(spark, p, fixed=True)
    again = cli_here(spark, *args, "--cascade")
    assert again.returncode == 0, again.stderr + again.stdout
    assert _state(p.root) == once
    for hop in HOPS:
        assert not (p.path(hop) / "_batchlog" / "_batchlog-rewind.json").exists(), hop
