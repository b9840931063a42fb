"""Soak: one long-running driver, many query runs and batches; is anything growing? (issue 25)

One driver runs, round after round (``--round`` upstream batches each, ``--batches`` in all):

- a stateful query with the plugin (JSON file source, one input file per batch, a watermarked
  ``dropDuplicates`` so its state stays bounded, a parquet sink with ``retention``, compactInterval
  10, the writer lease refreshed by its keeper), run to the end of its input (availableNow): every
  round is a restart;
- a downstream query on the ``batchlog`` source over that sink (restarted each round too);
- a ``verify``, a ``vacuum`` of the files retention dropped, a dry-run ``rewind`` and a read by
  batch of the sink;
- ``--short-runs`` short availableNow query runs in all, each against a sink of its own.

After each round it samples the driver JVM (the py4j gateway's JVM, or the Spark Connect server's):
live heap after a full GC (the objects ``jcmd GC.class_histogram`` counts), its threads and open
file descriptors (``/proc/<pid>``); and the upstream query's ``addBatch`` duration per batch (the
commit). The verdict: each of heap, threads and descriptors is flat (the mean of the last tenth of
the run within 10% of the second tenth's), and the commit latency's p99 over the last tenth within
1.5x of the second tenth's.

``--connect-batches`` then runs the same loop for a shorter stretch through a Spark Connect server
(Spark's own, started here with the batchlog jar, stopped by PID), judged the same way, with the
share of ``--short-runs`` its batches are of ``--batches`` (``--batches 0``: the Connect stretch
alone, with all ``--short-runs``).

Side by side, as every benchmark here: the same loop runs twice, each in a process and a driver
of its own (``--variant``): with batchlog, and on vanilla Spark (no batchlog jar, Spark's own
commit protocol; the downstream query on Spark's file source over the sink; no verify, vacuum or
rewind, and a plain read instead of the read by batch). A driver's figures can grow for reasons
of Spark's own (a Connect server keeps every stopped query for an hour); what batchlog adds is
the difference: its growth beyond vanilla's, judged against 10% of its second tenth (commit
latency: its p99 ratio within 1.5x of vanilla's).

Usage: python bench/soak.py [--batches 10000] [--round 500] [--short-runs 200]
       [--connect-batches 2000] [--connect-round N] [--variant both|batchlog|vanilla]
       [--parallel] [--work DIR] [--json FILE] [--plot FILE] [--heap-dump FILE]
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import batchlog  # noqa: E402
from support import settle  # noqa: E402

ROWS = 4  # rows per input file (per batch)
VARIANTS = ("batchlog", "vanilla")
VANILLA_PROTOCOL = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"
SCHEMA = "id LONG, ts TIMESTAMP, country STRING"
COMPACT_INTERVAL = "10"
CONFS = {
    "spark.sql.streaming.fileSink.log.compactInterval": COMPACT_INTERVAL,
    "spark.sql.shuffle.partitions": "1",
    # every batch of a round in the query's recentProgress (Spark keeps 100 by default)
    "spark.sql.streaming.numRecentProgressUpdates": "5000",
    # Spark's listing cache (FileStatusCache, 250 MB by default) keeps the status of every input
    # file a file source has read, for the life of the driver: bounded small, the same in both
    # variants, it is full within the first round, and what grows after is what the soak is for
    "spark.sql.hive.filesourcePartitionFileCacheSize": str(256 * 1024),
}
# Over Connect the queries run for the whole stretch (their progress polled, not collected at the
# end of a round): Spark's default, so that a running query's progress buffer is full early
RUNNING_CONFS = {"spark.sql.streaming.numRecentProgressUpdates": "100"}
# Spark's own status store keeps the last 1,000 jobs, stages and SQL executions (with the UI off
# too): it grows for the first few hundred batches, then stays. Smaller limits let it reach them
# early, so that what grows after is what the soak looks for.
SERVER_CONFS = {
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedDeadExecutors": "10",
}


@dataclass
class Sample:
    """The driver JVM after a round."""

    batches: int  # upstream batches so far
    heap_mib: float
    threads: int
    fds: int
    seconds: float  # since the start


@dataclass
class Run:
    mode: str  # "py4j" or "connect"
    variant: str = "batchlog"  # or "vanilla": the same loop without batchlog
    batches: int = 0
    short_runs: int = 0
    samples: list[Sample] = field(default_factory=list)
    latencies: list[tuple[int, float]] = field(default_factory=list)  # (batch, addBatch ms)
    rounds: list[dict[str, float]] = field(default_factory=list)  # seconds per step, per round
    threads_grown: dict[str, int] = field(default_factory=dict)  # by name, last round - first
    instances_grown: dict[str, int] = field(default_factory=dict)  # batchlog's, last - first
    # the 20 classes whose live bytes grew most between the second round and the last
    bytes_grown: dict[str, int] = field(default_factory=dict)


# ---- the JVM, seen from outside -----------------------------------------------------------------


def jvm_sample(pid: int) -> tuple[float, int, int, Counter[str], Counter[str]]:
    """JVM ``pid`` after a full GC, from one ``jcmd GC.class_histogram`` (which collects first):
    its live heap (MiB: the bytes of every object the collection left), threads and open file
    descriptors, live instances of batchlog's classes and live bytes of every class. Lambda and
    proxy class names are folded (``$$Lambda$12/0x...``: ``$$Lambda``), so that one kind counts
    once. Not the heap's "used" after a ``GC.run``: read in a second call, it also counts what
    running queries allocated after the collection (over Connect, whose queries run while it is
    sampled, tens of MiB)."""
    histo = subprocess.run(
        ["jcmd", str(pid), "GC.class_histogram"], check=True, capture_output=True, text=True
    ).stdout
    instances: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for m in re.finditer(r"^\s*\d+:\s+(\d+)\s+(\d+)\s+(\S+)", histo, re.M):
        name = re.sub(r"\$\$Lambda.*", "$$Lambda", m.group(3))
        size[name] += int(m.group(2))
        if name.startswith("io.batchlog."):
            instances[name] += int(m.group(1))
    if not size:
        raise SystemExit(f"cannot read the heap of {pid}: {histo[-500:]}")
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return sum(size.values()) / 2**20, threads, fds, instances, size


def thread_names(pid: int) -> Counter[str]:
    """JVM ``pid``'s threads by name, numbers folded (``pool-12-thread-3``: ``pool-N-thread-N``)."""
    dump = subprocess.run(
        ["jcmd", str(pid), "Thread.print"], check=True, capture_output=True, text=True
    ).stdout
    return Counter(
        re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d+", "N", m)
        for m in re.findall(r'^"([^"]*)"', dump, re.M)
    )


# ---- one round ----------------------------------------------------------------------------------


def write_inputs(inbox: Path, first: int, n: int) -> None:
    """Input files for batches first..first+n-1: ids unique per batch, event time one second a
    batch, modification times in batch order (the file source reads them in that order). Each is
    written under a hidden name, then renamed: a running query never lists half a file."""
    inbox.mkdir(parents=True, exist_ok=True)
    base = int(time.time()) - 10 * 3600
    for b in range(first, first + n):
        f, tmp = inbox / f"events-{b:06d}.json", inbox / f".events-{b:06d}.json.tmp"
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1767225600 + b))
        rows = ({"id": b * 10 + i, "ts": ts, "country": ("NL", "FR")[i % 2]} for i in range(ROWS))
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(tmp, (base + b, base + b))
        tmp.rename(f)


def clear_inputs(inbox: Path) -> None:
    """The inputs of the rounds before are read: gone, as a production inbox's processed files
    are (Spark's cleanSource), so that listing the inbox does not grow with the run."""
    for f in inbox.glob("events-*.json"):
        f.unlink()


def await_done(q: Any, what: str, timeout_s: float = 3600) -> None:
    """Waits for an availableNow query; raises its error."""
    q.awaitTermination(timeout_s)
    if q.isActive:
        q.stop()
        raise SystemExit(f"{what} did not finish in {timeout_s} s")
    if q.exception() is not None:
        raise SystemExit(f"{what} failed: {q.exception()}")


def upstream(spark: Any, inbox: Path, sink: str, chk: str, running: bool = False) -> Any:
    """The stateful query over the inbox: to the end of its input (availableNow), or
    ``running`` until stopped."""
    events = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        # the source forgets files older than this behind the newest (input times: a second a
        # batch), so that its set of seen files stays bounded as in a real deployment
        .option("maxFileAge", "10m")
        .json(str(inbox))
        .withWatermark("ts", "10 seconds")
        .dropDuplicates(["id", "ts"])
    )
    writer = (
        events.writeStream.format("parquet")
        .option("checkpointLocation", chk)
        .option("retention", "1h")
        .partitionBy("country")
    )
    return (writer if running else writer.trigger(availableNow=True)).start(sink)


def data_batches(progress: Any) -> list[tuple[int, int, float]]:
    """(batch, input rows, addBatch ms) of each batch with input rows among a query's progress
    (attributes: over Connect the progress' dict view lacks some keys)."""
    return [
        (int(p.batchId), int(p.numInputRows), float(p.durationMs.get("addBatch", 0)))
        for p in progress
        if (p.numInputRows or 0) > 0
    ]


def downstream(spark: Any, sink: str, out: str, chk: str, vanilla: bool, running: bool) -> Any:
    """A query on the batchlog source over the sink (vanilla: Spark's file source, which reads
    the sink's log too): to the end (availableNow), or ``running`` until stopped."""
    source = spark.readStream.format("parquet" if vanilla else "batchlog")
    if not vanilla:  # the sink may have no data file yet to tell its format by
        source = source.option("format", "parquet")
    writer = (
        source.schema("id LONG, ts TIMESTAMP, country STRING")
        .load(sink)
        .writeStream.format("parquet")
        .option("checkpointLocation", chk)
    )
    return (writer if running else writer.trigger(availableNow=True)).start(out)


class Progress:
    """What a running query has read, from its ``recentProgress`` (the last
    ``numRecentProgressUpdates`` of them), polled far more often than that many batches run."""

    def __init__(self, q: Any, what: str) -> None:
        self.q, self.what = q, what
        self.last_data = -1  # the newest batch with input rows seen
        self.rows = 0  # input rows of the batches seen
        self.batches: list[tuple[int, float]] = []  # (batch, addBatch ms) seen, not yet taken

    def poll(self) -> None:
        if not self.q.isActive:
            raise SystemExit(f"{self.what} stopped: {self.q.exception()}")
        new = sorted(b for b in data_batches(self.q.recentProgress) if b[0] > self.last_data)
        if new:
            self.last_data = new[-1][0]
            self.rows += sum(n for _, n, _ in new)
            self.batches += [(b, ms) for b, _, ms in new]

    def take(self) -> list[tuple[int, float]]:
        """The batches with input rows seen since the last ``take``."""
        out, self.batches = self.batches, []
        return out


def until_rows(
    target: Progress, rows: int, queries: list[Progress], timeout_s: float = 3600
) -> None:
    """Waits until ``target`` has read ``rows`` in all, polling every query of ``queries`` (a
    query not polled while it runs would have its first batches gone from its progress)."""
    deadline = time.monotonic() + timeout_s
    while target.rows < rows:
        if time.monotonic() > deadline:
            raise SystemExit(f"{target.what} read {target.rows} rows in {timeout_s} s, not {rows}")
        time.sleep(0.5)
        for q in queries:
            q.poll()


def short_run(spark: Any, work: Path, k: int) -> None:
    """One short availableNow query against a sink of its own: one input file, one batch."""
    inbox = work / f"short-{k}" / "in"
    write_inputs(inbox, k, 1)
    sink = str(work / f"short-{k}" / "out")
    q = (
        spark.readStream.schema(SCHEMA)
        .json(str(inbox))
        .writeStream.format("parquet")
        .option("checkpointLocation", str(work / f"short-{k}" / "chk"))
        .trigger(availableNow=True)
        .start(sink)
    )
    await_done(q, f"short run {k}")
    n = spark.read.parquet(sink).count()
    if n != ROWS:
        raise SystemExit(f"short run {k}: {n} rows, expected {ROWS}")


@contextmanager
def timed(steps: dict[str, float], name: str) -> Iterator[None]:
    """Adds the block's seconds to ``steps[name]``."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        steps[name] = round(steps.get(name, 0.0) + time.monotonic() - t0, 2)


def soak(
    spark: Any,
    pid: int,
    mode: str,
    work: Path,
    batches: int,
    per_round: int,
    shorts: int,
    vanilla: bool = False,
    restart: bool = True,
) -> Run:
    """The loop. ``restart``: both queries run to the end of their input every round (a restart
    each round); else they run for the whole loop, each round's input read as it lands."""
    run = Run(mode, "vanilla" if vanilla else "batchlog")
    label = f"{mode}, {run.variant}"
    # the sink keeps the last two rounds' batches: its log and index stop growing after those (as
    # a production sink with retention does), and the downstream query, a round behind at most,
    # never finds its next batch dropped
    spark.conf.set("spark.batchlog.retention.batches", str(2 * per_round))
    inbox, sink, chk = work / "in", str(work / "sink"), str(work / "chk")
    down, down_chk = str(work / "down"), str(work / "down-chk")
    rounds = math.ceil(batches / per_round)
    started = time.monotonic()
    heap, threads, fds, _, _ = jvm_sample(pid)
    run.samples.append(Sample(0, heap, threads, fds, 0.0))
    inbox.mkdir(parents=True, exist_ok=True)
    if not restart:
        up = Progress(upstream(spark, inbox, sink, chk, running=True), "the upstream query")
        dn = Progress(downstream(spark, sink, down, down_chk, vanilla, True), "downstream")
    for r in range(rounds):
        steps: dict[str, float] = {}
        n = min(per_round, batches - run.batches)
        clear_inputs(inbox)
        write_inputs(inbox, run.batches, n)
        with timed(steps, "upstream"):
            if restart:
                q = upstream(spark, inbox, sink, chk)
                await_done(q, "the upstream query")
                lat = [(b, ms) for b, _, ms in data_batches(q.recentProgress)]
            else:
                until_rows(up, (run.batches + n) * ROWS, [up, dn])
                lat = up.take()
        if len(lat) != n:
            raise SystemExit(f"round {r}: the upstream query ran {len(lat)} batches, expected {n}")
        run.latencies += lat
        run.batches += n
        with timed(steps, "downstream"):
            if restart:
                await_done(downstream(spark, sink, down, down_chk, vanilla, False), "downstream")
            else:
                until_rows(dn, run.batches * ROWS, [up, dn])
                dn.take()
        rewound = "-"
        if vanilla:  # nothing of batchlog's: a plain read of the sink instead of a read by batch
            with timed(steps, "plain read"):
                got = spark.read.parquet(sink).count()
            if got < ROWS:
                raise SystemExit(f"round {r}: the sink read back {got} rows, expected >= {ROWS}")
        else:
            # the sink's latest batch (no-data batches of the watermark count too), and the last
            # with input rows
            latest = int(batchlog.SinkLog(spark, sink).latest_batch() or 0)
            last_data = lat[-1][0]
            with timed(steps, "verify"):
                batchlog.verify(spark, sink)
            with timed(steps, "vacuum"):
                # the files retention dropped from the log, deleted as a production sink's are
                batchlog.vacuum(spark, sink, older_than="1m", dry_run=False, quiet=True)
            with timed(steps, "rewind dry run"):
                to = max(0, latest - 5)
                try:
                    plan = batchlog.rewind(spark, sink, chk, to_batch=to, dry_run=True, quiet=True)
                    rewound = f"{len(plan.plan.affected_batches)} batches"
                except (batchlog.QueryActiveError, batchlog.WriterActiveError) as e:
                    if restart:
                        raise
                    # refused while the query writes, as it must be: the refusal is the call
                    rewound = f"refused ({type(e).__name__})"
            with timed(steps, "read by batch"):
                got = batchlog.read(
                    spark, sink, "parquet", from_batch=last_data, to_batch=last_data
                ).count()
            if got != ROWS:
                raise SystemExit(
                    f"round {r}: batch {last_data} read back {got} rows, expected {ROWS}"
                )
        due = round(shorts * (r + 1) / rounds)
        while run.short_runs < due:
            with timed(steps, "short runs"):
                short_run(spark, work, run.short_runs)
            run.short_runs += 1
        # Python's garbage first: its JVM objects (py4j's references) go with it
        if mode == "py4j":
            settle(spark)
        else:
            gc.collect()
        heap, threads, fds, instances, size = jvm_sample(pid)
        run.samples.append(Sample(run.batches, heap, threads, fds, time.monotonic() - started))
        run.rounds.append(steps)
        names = thread_names(pid)
        if r == 0:
            first_names, first_instances = names, instances
        else:
            run.threads_grown = dict((names - first_names).most_common())
            run.instances_grown = dict((instances - first_instances).most_common())
        # bytes from the second round on: the first fills Spark's bounded stores and caches
        if r == min(1, rounds - 1):
            second_size = size
        elif r > 1:
            run.bytes_grown = dict((size - second_size).most_common(20))
        p = [ms for _, ms in lat]
        print(
            f"[soak {label}] round {r + 1}/{rounds}: batches {run.batches:>6,}  "
            f"heap {heap:7.1f} MiB  threads {threads:4d}  fds {fds:4d}  commit (addBatch) "
            f"median {statistics.median(p):6.1f} ms  rewind plan {rewound}  "
            f"short runs {run.short_runs}  " + "  ".join(f"{k} {v:.1f}s" for k, v in steps.items()),
            flush=True,
        )
    if not restart:
        up.q.stop()
        dn.q.stop()
    print(f"[soak {label}] threads more than after the first round: {run.threads_grown}")
    print(
        f"[soak {label}] batchlog instances more than after the first round: {run.instances_grown}"
    )
    print(f"[soak {label}] live bytes grown most since the second round: {run.bytes_grown}")
    return run


# ---- the verdict --------------------------------------------------------------------------------


def tenth(xs: list[Any], i: int) -> list[Any]:
    """The i-th tenth (0-based) of ``xs``, at least one element."""
    n = len(xs)
    lo, hi = n * i // 10, max(n * (i + 1) // 10, n * i // 10 + 1)
    return xs[lo:hi]


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def judge(run: Run) -> list[dict[str, Any]]:
    samples = run.samples[1:]  # after each round
    out = []
    for name, get in (
        ("live heap after GC (MiB)", lambda s: s.heap_mib),
        ("threads", lambda s: float(s.threads)),
        ("open file descriptors", lambda s: float(s.fds)),
    ):
        second = statistics.mean(get(s) for s in tenth(samples, 1))
        last = statistics.mean(get(s) for s in tenth(samples, 9))
        out.append(
            {
                "mode": run.mode,
                "variant": run.variant,
                "measure": name,
                "second_tenth": round(second, 1),
                "last_tenth": round(last, 1),
                "ratio": round(last / second, 3),
                "goal": "<= 1.10",
                "met": last <= 1.10 * second,
            }
        )
    lat = [ms for _, ms in run.latencies]
    second, last = p99(tenth(lat, 1)), p99(tenth(lat, 9))
    out.append(
        {
            "mode": run.mode,
            "variant": run.variant,
            "measure": "commit latency p99 (ms)",
            "second_tenth": second,
            "last_tenth": last,
            "ratio": round(last / second, 3),
            "goal": "<= 1.5",
            "met": last <= 1.5 * second,
        }
    )
    return out


def beyond_vanilla(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """batchlog's growth beyond vanilla's, per mode and measure: the difference of their growths
    from the second tenth to the last, within 10% of batchlog's second tenth (commit latency:
    batchlog's p99 ratio within 1.5x of vanilla's)."""
    by = {(v["mode"], v["variant"], v["measure"]): v for v in verdicts}
    out = []
    for (mode, variant, measure), ours in by.items():
        van = by.get((mode, "vanilla", measure))
        if variant != "batchlog" or van is None:
            continue
        if measure.startswith("commit latency"):
            extra = ours["ratio"] / van["ratio"] if van["ratio"] else float("inf")
            met, goal = extra <= 1.5, "<= 1.5x"
        else:
            extra = (ours["last_tenth"] - ours["second_tenth"]) - (
                van["last_tenth"] - van["second_tenth"]
            )
            met, goal = (
                extra <= 0.10 * ours["second_tenth"],
                f"<= {0.10 * ours['second_tenth']:,.1f}",
            )
        out.append(
            {
                "mode": mode,
                "measure": measure,
                "batchlog_growth": round(ours["last_tenth"] - ours["second_tenth"], 1),
                "vanilla_growth": round(van["last_tenth"] - van["second_tenth"], 1),
                "beyond_vanilla": round(extra, 3),
                "goal": goal,
                "met": met,
            }
        )
    return out


def table(verdicts: list[dict[str, Any]]) -> str:
    lines = [
        f"{'mode':<8} {'variant':<9} {'measure':<26} {'2nd tenth':>10} {'last tenth':>11} "
        f"{'ratio':>6} {'goal':>7}  verdict"
    ]
    for v in verdicts:
        lines.append(
            f"{v['mode']:<8} {v.get('variant', 'batchlog'):<9} {v['measure']:<26} "
            f"{v['second_tenth']:>10,.1f} {v['last_tenth']:>11,.1f} {v['ratio']:>6.3f} "
            f"{v['goal']:>7}  " + ("MET" if v["met"] else "NOT MET")
        )
    return "\n".join(lines)


def beyond_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "batchlog's growth beyond vanilla Spark's (second tenth to last; latency: p99 ratios):",
        f"{'mode':<8} {'measure':<26} {'batchlog':>9} {'vanilla':>9} {'beyond':>8} "
        f"{'goal':>9}  verdict",
    ]
    for v in rows:
        lines.append(
            f"{v['mode']:<8} {v['measure']:<26} {v['batchlog_growth']:>9,.1f} "
            f"{v['vanilla_growth']:>9,.1f} {v['beyond_vanilla']:>8,.2f} {v['goal']:>9}  "
            + ("MET" if v["met"] else "NOT MET")
        )
    return "\n".join(lines)


def plot(runs: list[Run], file: Path) -> None:
    """Heap, threads, descriptors and commit latency (p99 per round) over batches, per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=False)
    for run in runs:
        label = f"{run.mode}, {run.variant}"
        style = "--" if run.variant == "vanilla" else "-"
        xs = [s.batches for s in run.samples[1:]]
        for ax, ys, title in (
            (axes[0][0], [s.heap_mib for s in run.samples[1:]], "live heap after GC (MiB)"),
            (axes[0][1], [s.threads for s in run.samples[1:]], "threads"),
            (axes[1][0], [s.fds for s in run.samples[1:]], "open file descriptors"),
        ):
            ax.plot(xs, ys, style, marker=".", label=label)
            ax.set_title(title)
        per_round: dict[int, list[float]] = {}
        bounds = xs
        for i, (_, ms) in enumerate(run.latencies):
            r = next(k for k, b in enumerate(bounds) if i < b)
            per_round.setdefault(r, []).append(ms)
        axes[1][1].plot(
            [bounds[r] for r in per_round],
            [p99(v) for v in per_round.values()],
            style,
            marker=".",
            label=label,
        )
        axes[1][1].set_title("commit (addBatch) p99 per round (ms)")
    for row in axes:
        for ax in row:
            ax.set_ylim(bottom=0)  # after every run's line: the top fits them all
            ax.set_xlabel("upstream batches")
            ax.legend()
    fig.suptitle(
        "soak: one driver (py4j: query runs restarted every round; Connect: queries running);"
        " batchlog and vanilla Spark"
    )
    fig.tight_layout()
    file.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(file, dpi=90)


# ---- the sessions -------------------------------------------------------------------------------


def classic_session(vanilla: bool) -> tuple[Any, int]:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder if vanilla else batchlog.configure(SparkSession.builder)
    builder = builder.master("local[2]").appName("batchlog-soak")
    protocol = VANILLA_PROTOCOL if vanilla else batchlog.COMMIT_PROTOCOL_CLASS
    for k, v in {
        **CONFS,
        "spark.sql.streaming.commitProtocolClass": protocol,
        **SERVER_CONFS,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "2g",
    }.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
    return spark, pid


def run_connect(work: Path, args: argparse.Namespace, vanilla: bool) -> Run:
    from connect_support import batchlog_server_conf, start_connect_server, stop_connect_server
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    jars, conf = ([], {}) if vanilla else ([batchlog.jar_path()], batchlog_server_conf())
    restart = args.connect_restarts
    conf = {**conf, **CONFS, **SERVER_CONFS, **({} if restart else RUNNING_CONFS)}
    proc, url = start_connect_server(work / "server", jars, conf)
    try:
        spark = ConnectSession.builder.remote(url).getOrCreate()
        try:
            return soak(
                spark,
                proc.pid,
                "connect",
                work / "connect",
                args.connect_batches,
                args.connect_round or args.round,
                # Spark Connect keeps every stopped query an hour (vanilla too): short runs only
                # with restarts, where their share of it is measured
                0
                if not restart
                else args.short_runs * args.connect_batches // args.batches
                if args.batches
                else args.short_runs,
                vanilla,
                restart,
            )
        finally:
            spark.stop()
    finally:
        stop_connect_server(proc)


def run_variant(args: argparse.Namespace, variant: str) -> list[Run]:
    """The loop with one variant, in this process: py4j, then Connect."""
    vanilla = variant == "vanilla"
    work = args.work or Path(tempfile.mkdtemp(prefix=f"batchlog-soak-{variant}-"))
    runs = []
    try:
        if args.batches > 0:
            spark, pid = classic_session(vanilla)
            try:
                runs.append(
                    soak(
                        spark,
                        pid,
                        "py4j",
                        work / "py4j",
                        args.batches,
                        args.round,
                        args.short_runs,
                        vanilla,
                    )
                )
                if args.heap_dump:
                    dump = args.heap_dump.resolve()
                    subprocess.run(["jcmd", str(pid), "GC.heap_dump", str(dump)], check=True)
            finally:
                spark.stop()
        if args.connect_batches > 0:
            runs.append(run_connect(work, args, vanilla))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return runs


def variant_command(args: argparse.Namespace, variant: str, out: Path) -> list[str]:
    """This script, running one variant of the loop and writing its runs to ``out``."""
    cmd = [
        sys.executable,
        __file__,
        "--variant",
        variant,
        "--json",
        str(out),
        "--batches",
        str(args.batches),
        "--round",
        str(args.round),
        "--short-runs",
        str(args.short_runs),
        "--connect-batches",
        str(args.connect_batches),
    ]
    if args.connect_round:
        cmd += ["--connect-round", str(args.connect_round)]
    if args.connect_restarts:
        cmd += ["--connect-restarts"]
    if args.work:
        cmd += ["--work", str(args.work / variant)]
    if args.heap_dump and variant == "batchlog":
        cmd += ["--heap-dump", str(args.heap_dump)]
    return cmd


def echo(variant: str, proc: subprocess.Popen[str]) -> None:
    """A variant's output, each line led by its name (the variants print at the same time)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        print(f"[{variant}] {line}", end="", flush=True)


def run_side_by_side(args: argparse.Namespace) -> list[Run]:
    """Each variant in a process (and a driver JVM, a Connect server) of its own: one after the
    other, or with ``--parallel`` both at once, so that whatever else the machine runs weighs on
    both alike; their runs as they wrote them. Their verdicts are judged here, together: a
    variant's own exit status is not."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="batchlog-soak-") as tmp:
        outs = {v: Path(tmp) / f"{v}.json" for v in VARIANTS}
        if args.parallel:
            procs = {
                v: subprocess.Popen(
                    variant_command(args, v, outs[v]),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for v in VARIANTS
            }
            echoes = [threading.Thread(target=echo, args=(v, p)) for v, p in procs.items()]
            for t in echoes:
                t.start()
            for t in echoes:
                t.join()
            for p in procs.values():
                p.wait()
        else:
            for v in VARIANTS:
                subprocess.run(variant_command(args, v, outs[v]), check=False)
        for variant, out in outs.items():
            if not out.is_file():
                raise SystemExit(
                    f"the {variant} soak wrote no result ({out}): see its output above"
                )
            runs += runs_of(out)
    return runs


def runs_of(file: Path) -> list[Run]:
    """The runs a ``--json`` file holds (``plot(runs_of(f), png)`` draws them again)."""
    runs = []
    for r in json.loads(file.read_text())["runs"]:
        samples = [Sample(**x) for x in r.pop("samples")]
        latencies = [(int(b), float(ms)) for b, ms in r.pop("latencies")]
        runs.append(Run(**r, samples=samples, latencies=latencies))
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batches", type=int, default=10000)
    ap.add_argument("--round", type=int, default=500)
    ap.add_argument("--short-runs", type=int, default=200)
    ap.add_argument("--connect-batches", type=int, default=2000)
    ap.add_argument(
        "--connect-round", type=int, help="batches a round over Connect (default: --round)"
    )
    ap.add_argument(
        "--connect-restarts",
        action="store_true",
        help="over Connect too, restart both queries every round and run short runs (Spark "
        "Connect keeps each stopped query an hour: its heap grows for that hour, vanilla's too); "
        "by default the Connect stretch's queries run throughout",
    )
    ap.add_argument(
        "--variant",
        choices=("both", *VARIANTS),
        default="both",
        help="both (default: batchlog, then vanilla Spark, each in a process of its own), or one",
    )
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="with --variant both: run the two at once, under the same load (a busy machine)",
    )
    ap.add_argument("--work", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument(
        "--heap-dump",
        type=Path,
        help="after the py4j run's last round, the driver's live heap to this .hprof file",
    )
    args = ap.parse_args(argv)
    if args.round > 4000:
        ap.error("--round: at most 4000 (the batches of a round must fit in recentProgress)")
    if args.variant != "vanilla" and "BATCHLOG_JAR" not in os.environ:
        # A JVM loads classes from its jars as it needs them, hours into a soak: a rebuild that
        # replaces the checkout's jar under it fails the run (ZipException). It runs on a copy.
        jars = tempfile.mkdtemp(prefix="batchlog-soak-jar-")
        atexit.register(shutil.rmtree, jars, True)
        copy = Path(jars) / Path(batchlog.jar_path()).name
        shutil.copyfile(batchlog.jar_path(), copy)
        os.environ["BATCHLOG_JAR"] = str(copy)
    runs = run_side_by_side(args) if args.variant == "both" else run_variant(args, args.variant)
    verdicts = [v for r in runs for v in judge(r)]
    beyond = beyond_vanilla(verdicts)
    print(table(verdicts))
    if beyond:
        print(beyond_table(beyond))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"runs": [asdict(r) for r in runs], "verdicts": verdicts, "beyond_vanilla": beyond},
                indent=1,
            )
            + "\n"
        )
    if args.plot:
        plot(runs, args.plot)
    # with vanilla beside it, batchlog is judged by what it adds; alone, by its own figures
    judged = beyond or [v for v in verdicts if v["variant"] == "batchlog"]
    return 0 if all(v["met"] for v in judged) else 1


if __name__ == "__main__":
    sys.exit(main())
