"""A downstream stream over a big sink: Spark's file source vs the ``batchlog`` source (issue 12).

One sink (parquet, partitioned by ``country``) whose ``_spark_metadata`` is batchlog's log holds
``--entries`` live entries in ``--batches`` batches (compactInterval 10), written through the log
class by ``io.batchlog.bench.DownstreamSink`` in a JVM of its own: the entries point at data files
that do not exist (both readers run with ``spark.sql.files.ignoreMissingFiles``), but for 4 real
parquet files in the last batch. Plain Spark reads that log as it is, so both readers read the very
same sink.

Each reader runs in a driver process of its own (local[2], a ``--xmx`` heap, the batchlog jar on the
class path), one after the other: a downstream query on a ``--trigger-ms`` processing-time trigger,
writing to the ``noop`` sink, reading the sink with

- Spark's file source, ``spark.readStream.schema(...).parquet(sink)``, which loads the whole log
  (``MetadataLogFileIndex``) on every trigger;
- the batchlog source, ``spark.readStream.format("batchlog").option("startingBatch", latest)``.

Each first catches up with the sink as it is, in one micro-batch: the file source's takes every old
entry, batchlog's the sink's latest batch (startingBatch). That micro-batch is left out of the
steady-state figures (shown apart). Then ``--new-batches`` upstream batches are appended, one every
``--interval`` seconds, each with one real parquet file (``--rows`` rows), by the log class in the
sink's JVM; the reader stops when it has read them all.

Per micro-batch, from the query's progress: ``latestOffset``, ``getBatch``, ``queryPlanning``
(planning: their sum) and ``triggerExecution``. The driver's live heap (``System.gc()``, then the
heap used, through py4j) is taken before the query starts, after the catch-up, and, once every new
batch is read, ``--heap-samples`` times a second apart while the query keeps triggering (the file
source loads the whole log on a trigger without new data too). No collection is forced while the
new batches are read: a full GC stops the query, so it would land in the timings, the longer the
more live heap. Heap growth: the largest of those last samples minus the heap before the query.

The heap is the same for both, and large (6g): the file source holds about 2 KB of live driver heap
per entry of the sink (measured up to 50k entries), so that a 2g driver would leave its timings to
the garbage collector, or fail, at 1M.

Goals (issue 12), at 1M entries: batchlog's planning per micro-batch (median) at most 1/10 of the
file source's, and its driver heap growth at most 1/4 of the file source's.

Usage: python bench/downstream.py [--entries 1000000] [--batches 1000] [--new-batches 30]
       [--interval 1.0] [--trigger-ms 500] [--xmx 6g] [--heap-samples 5]
       [--readers vanilla,batchlog] [--classpath CP] [--work DIR] [--keep] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

# as bench/run runs its JVMs
JOPTS = [
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
    "-Dlog4j2.level=error",
]
SCHEMA = "id LONG, country STRING"
NAMES = {"vanilla": "Spark's file source", "batchlog": "batchlog source"}
PLANNING = ("latestOffset", "getBatch", "queryPlanning")
MIB = 1 << 20


# ---- the reader: one driver process per source ---------------------------------------------------


def reader(args: argparse.Namespace) -> int:
    """Runs the downstream query in this process; prints ``READY`` once it has caught up with the
    sink, a line per micro-batch after it, and writes what it saw to ``--result``."""
    import batchlog
    from pyspark.sql import SparkSession

    spark = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .appName(f"batchlog-downstream-{args.reader}")
        .config("spark.driver.memory", args.xmx)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.files.ignoreMissingFiles", "true")
        .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm: Any = spark._jvm
    memory = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()

    def live_mib() -> float:
        """The driver's live heap: what a full collection leaves."""
        jvm.java.lang.System.gc()
        return float(memory.getHeapMemoryUsage().getUsed()) / MIB

    base = live_mib()
    if args.reader == "vanilla":
        df = spark.readStream.schema(SCHEMA).parquet(args.sink)
    else:
        df = (
            spark.readStream.format("batchlog")
            .schema(SCHEMA)
            .option("startingBatch", args.starting_batch)
            .load(args.sink)
        )
    q = (
        df.writeStream.format("noop")
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=f"{args.trigger_ms} milliseconds")
        .start()
    )
    seen: set[int] = set()

    def micro_batches() -> list[dict[str, Any]]:
        """The micro-batches that ran since the last call (no-data triggers have no addBatch)."""
        if q.exception() is not None:
            raise SystemExit(f"the query failed: {q.exception()}")
        new = []
        for p in q.recentProgress:
            if "addBatch" in p["durationMs"] and p["batchId"] not in seen:
                seen.add(p["batchId"])
                d = p["durationMs"]
                new.append(
                    {
                        "batchId": p["batchId"],
                        "rows": p["numInputRows"],
                        "planning": sum(d.get(k, 0) for k in PLANNING),
                        **{k: d.get(k, 0) for k in (*PLANNING, "addBatch", "triggerExecution")},
                    }
                )
        return new

    def show(m: dict[str, Any], what: str = "") -> None:
        print(
            f"{args.reader:<8} micro-batch {m['batchId']:>3} {what:<10} {m['rows']:>5,} rows  "
            f"planning {m['planning']:>8,.0f} ms (latestOffset {m['latestOffset']:,.0f}, "
            f"getBatch {m['getBatch']:,.0f}, queryPlanning {m['queryPlanning']:,.0f})  "
            f"trigger {m['triggerExecution']:>8,.0f} ms",
            flush=True,
        )

    deadline = time.monotonic() + args.timeout
    initial: list[dict[str, Any]] = []
    while not initial:  # the catch-up: micro-batch 0
        if time.monotonic() > deadline:
            raise SystemExit(f"no micro-batch within {args.timeout} s")
        initial = micro_batches()
        time.sleep(0.25)
    for m in initial:
        show(m, "(catch-up)")
    caught_up = live_mib()
    print(
        f"{args.reader:<8} live heap after the catch-up: {caught_up - base:,.1f} MiB over the "
        f"{base:,.1f} MiB before the query",
        flush=True,
    )
    print("READY", flush=True)

    # No collection is forced while the new batches are read: a full GC stops the query, and would
    # land in the timings (the more live heap, the longer).
    steady: list[dict[str, Any]] = []
    deadline = time.monotonic() + args.timeout
    while sum(m["rows"] for m in steady) < args.expect_rows:
        if time.monotonic() > deadline:
            raise SystemExit(f"the new batches were not all read within {args.timeout} s")
        for m in micro_batches():
            steady.append(m)
            show(m)
        time.sleep(0.25)
    # Then the live heap, while the query keeps triggering (the file source loads the whole log on
    # a trigger without new data too): a sample a second.
    samples = []
    for _ in range(args.heap_samples):
        samples.append(live_mib())
        time.sleep(1.0)
    print(
        f"{args.reader:<8} live heap, query running: "
        + ", ".join(f"{x - base:,.1f}" for x in samples)
        + " MiB over the heap before the query",
        flush=True,
    )
    q.stop()
    doc = {
        "impl": args.reader,
        "maxHeapMiB": jvm.java.lang.Runtime.getRuntime().maxMemory() // MIB,
        "baseMiB": base,
        "caughtUpMiB": caught_up,
        "steadyMiB": samples,
        "initial": initial,
        "microBatches": steady,
    }
    Path(args.result).write_text(json.dumps(doc, indent=1) + "\n")
    spark.stop()
    return 0


# ---- the run: the sink's JVM and the readers, one after the other --------------------------------


class Child:
    """A child process whose stdout lines arrive on a queue shared with the others."""

    def __init__(self, name: str, cmd: list[str], events: queue.Queue[tuple[str, str | None]]):
        self.name = name
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, cwd=ROOT
        )
        threading.Thread(target=self._pump, args=(events,), daemon=True).start()

    def _pump(self, events: queue.Queue[tuple[str, str | None]]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            events.put((self.name, line.rstrip("\n")))
        events.put((self.name, None))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def next_event(events: queue.Queue[tuple[str, str | None]]) -> tuple[str, str]:
    who, line = events.get()
    if line is None:
        raise EOFError(who)
    return who, line


def bench_classpath(given: str | None) -> str:
    if given:
        return given
    out = subprocess.run(
        [str(ROOT / "dev" / "sbt"), "-error", "export bench/Runtime/fullClasspath"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip().splitlines()[-1]


def run_reader(
    impl: str,
    args: argparse.Namespace,
    sink: Child,
    events: queue.Queue[tuple[str, str | None]],
    work: Path,
    latest: int,
    rows: int,
) -> tuple[dict[str, Any], int]:
    result = work / f"{impl}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--reader",
        impl,
        "--sink",
        str(work / "sink"),
        "--checkpoint",
        str(work / f"checkpoint-{impl}"),
        "--starting-batch",
        str(latest),
        "--expect-rows",
        str(args.new_batches * rows),
        "--result",
        str(result),
        "--xmx",
        args.xmx,
        "--trigger-ms",
        str(args.trigger_ms),
        "--timeout",
        str(args.timeout),
        "--heap-samples",
        str(args.heap_samples),
    ]
    print(f"\n--- {NAMES[impl]}: a driver of its own, -Xmx{args.xmx} ---", flush=True)
    child = Child(impl, cmd, events)
    appended = None
    try:
        while True:
            try:
                who, line = next_event(events)
            except EOFError as e:
                if str(e) == impl:
                    break
                raise SystemExit(f"the {e} process ended unexpectedly") from None
            if who == impl and line == "READY":
                print(f"{impl:<8} caught up: appending {args.new_batches} batches", flush=True)
                sink.send(f"append {args.new_batches} {round(args.interval * 1000)}")
            elif who == "sink" and line.startswith("APPENDED "):
                _, b, ms = line.split()
                print(f"{'sink':<8} upstream batch {b} appended ({ms} ms)", flush=True)
            elif who == "sink" and line.startswith("DONE "):
                appended = int(line.split()[1])
            else:
                print(line, flush=True)
        if child.proc.wait() != 0:
            raise SystemExit(f"the {impl} reader failed (exit {child.proc.returncode})")
        while appended is None:
            who, line = next_event(events)
            if who == "sink" and line.startswith("DONE "):
                appended = int(line.split()[1])
    finally:
        child.stop()
    return json.loads(result.read_text()), appended


def p90(xs: list[float]) -> float:
    """The 90th percentile, nearest rank."""
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def summary(doc: dict[str, Any], rows: int) -> dict[str, float]:
    steady = doc["microBatches"]
    plan = [float(m["planning"]) for m in steady]

    def med(key: str) -> float:
        return statistics.median(float(m[key]) for m in steady)

    return {
        "micro-batches": len(steady),
        "new batches per micro-batch": statistics.median(m["rows"] / rows for m in steady),
        "planning median": statistics.median(plan),
        "planning p90": p90(plan),
        "latestOffset median": med("latestOffset"),
        "getBatch median": med("getBatch"),
        "queryPlanning median": med("queryPlanning"),
        "trigger median": med("triggerExecution"),
        "catch-up trigger": float(sum(m["triggerExecution"] for m in doc["initial"])),
        "live heap after catch-up": max(0.0, doc["caughtUpMiB"] - doc["baseMiB"]),
        "heap growth": max(0.0, max(doc["steadyMiB"]) - doc["baseMiB"]),
    }


def verdict(r: float, goal: float, entries: int) -> str:
    if entries < 1_000_000:
        return "not judged: the goal is for 1M entries"
    return "MET" if r <= goal else "NOT MET"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--new-batches", type=int, default=30)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between new batches")
    ap.add_argument("--rows", type=int, default=100, help="rows in each new batch's file")
    ap.add_argument("--trigger-ms", type=int, default=500)
    ap.add_argument("--xmx", default="6g", help="each reader's driver heap")
    ap.add_argument("--readers", default="vanilla,batchlog")
    ap.add_argument("--heap-samples", type=int, default=5, help="live-heap samples, 1 s apart")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds a reader may take")
    ap.add_argument("--classpath", help="bench/'s runtime class path (bench/run gives it)")
    ap.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", type=Path)
    # a reader's process (run by this script)
    ap.add_argument("--reader", choices=sorted(NAMES), help=argparse.SUPPRESS)
    for hidden in ("--sink", "--checkpoint", "--result"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--starting-batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--expect-rows", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reader:
        return reader(args)

    readers = args.readers.split(",")
    for r in readers:
        if r not in NAMES:
            ap.error(f"--readers: {r} is none of {', '.join(NAMES)}")
    classpath = bench_classpath(args.classpath)
    work = args.work or Path(tempfile.mkdtemp(prefix="batchlog-downstream-"))
    per_batch = args.entries // args.batches
    entries = per_batch * args.batches
    print(
        f"a sink of {entries:,} entries ({args.batches:,} batches x {per_batch:,}, compactInterval "
        f"10) and 4 real files; {args.new_batches} new batches, one every {args.interval:g} s; "
        f"trigger {args.trigger_ms} ms; readers local[2], -Xmx{args.xmx}; work dir {work}",
        flush=True,
    )
    events: queue.Queue[tuple[str, str | None]] = queue.Queue()
    sink_cmd = [
        "java",
        "-Xmx1g",
        *JOPTS,
        "-cp",
        classpath,
        "io.batchlog.bench.DownstreamSink",
        "--dir",
        str(work),
        "--entries",
        str(entries),
        "--batches",
        str(args.batches),
        "--stage",
        str(len(readers) * args.new_batches),
        "--rows",
        str(args.rows),
    ]
    sink = Child("sink", sink_cmd, events)
    docs: dict[str, dict[str, Any]] = {}
    try:
        who, line = next_event(events)
        while not line.startswith("BUILT "):
            print(line, flush=True)
            who, line = next_event(events)
        latest = int(line.split()[1])
        for impl in readers:
            docs[impl], latest = run_reader(impl, args, sink, events, work, latest, args.rows)
        sink.send("quit")
        sink.proc.wait(60)
    except EOFError as e:
        raise SystemExit(f"the {e} process ended unexpectedly") from None
    finally:
        sink.stop()

    sums = {impl: summary(doc, args.rows) for impl, doc in docs.items()}
    heap_mib = max(doc["maxHeapMiB"] for doc in docs.values())
    print(
        f"\ndownstream over a sink of {entries:,} entries: steady state = the micro-batches after "
        f"each reader's first,\nwhich caught up with the sink as built and is left out (the file "
        f"source's read all {entries:,} old entries); ms, MiB; driver heap {heap_mib} MiB"
    )
    rows = [
        ("micro-batches", "micro-batches (steady state)", "{:,.0f}"),
        ("new batches per micro-batch", "new upstream batches a micro-batch, median", "{:,.1f}"),
        ("planning median", "planning per micro-batch, median (ms)", "{:,.1f}"),
        ("planning p90", "planning per micro-batch, p90 (ms)", "{:,.1f}"),
        ("latestOffset median", "  latestOffset, median (ms)", "{:,.1f}"),
        ("getBatch median", "  getBatch, median (ms)", "{:,.1f}"),
        ("queryPlanning median", "  queryPlanning, median (ms)", "{:,.1f}"),
        ("trigger median", "triggerExecution, median (ms)", "{:,.1f}"),
        ("catch-up trigger", "catch-up micro-batch, left out (ms)", "{:,.0f}"),
        ("live heap after catch-up", "live heap growth after the catch-up (MiB)", "{:,.1f}"),
        ("heap growth", "live heap growth, steady state (MiB)", "{:,.1f}"),
    ]
    impls = list(sums)
    both = {"vanilla", "batchlog"} <= sums.keys()
    print(
        f"{'':<42}"
        + "".join(f" {NAMES[i]:>20}" for i in impls)
        + (f" {'batchlog / file':>16}" if both else "")
    )
    for key, label, fmt in rows:
        line = f"{label:<42}" + "".join(f" {fmt.format(sums[i][key]):>20}" for i in impls)
        if both and sums["vanilla"][key] > 0:
            line += f" {sums['batchlog'][key] / sums['vanilla'][key]:>16.3f}"
        print(line)
    print("(planning = latestOffset + getBatch + queryPlanning)")
    if both:
        ours, theirs = sums["batchlog"], sums["vanilla"]
        for what, key, goal in (
            ("planning per micro-batch (median)", "planning median", 0.10),
            ("driver heap growth", "heap growth", 0.25),
        ):
            if theirs[key] > 0:
                r = ours[key] / theirs[key]
                print(
                    f"target: batchlog / file source, {what} <= {goal}: {r:.3f} "
                    f"({ours[key]:,.1f} / {theirs[key]:,.1f}): {verdict(r, goal, entries)}"
                )
    if args.json:
        figures = []
        for impl, s in sums.items():
            for measure, key, unit in (
                ("downstream planning per micro-batch (median)", "planning median", "ms"),
                ("downstream planning per micro-batch (p90)", "planning p90", "ms"),
                ("downstream catch-up micro-batch (trigger)", "catch-up trigger", "ms"),
                ("downstream driver heap growth (live, steady)", "heap growth", "MiB"),
                (
                    "downstream driver heap growth (live, after catch-up)",
                    "live heap after catch-up",
                    "MiB",
                ),
                ("downstream steady micro-batches", "micro-batches", "count"),
            ):
                figures.append(
                    {
                        "entries": entries,
                        "measure": measure,
                        "impl": impl,
                        "unit": unit,
                        "values": [s[key]],
                    }
                )
        doc = {"kind": "downstream", "maxHeapMiB": heap_mib, "figures": figures, "runs": docs}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"figures written to {args.json}")
    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
