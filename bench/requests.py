"""Requests a sink costs on an S3-compatible store, Spark's log vs batchlog's, side by side.

An S3-compatible server (moto, ``tests/servers/s3_server.py``) logs every request it serves; this
script runs the same streaming query (JSON file source on the local disk, one input file per
batch, parquet sink partitioned by a column, sink and checkpoint on ``s3a://``) once with Spark's
``ManifestFileCommitProtocol`` and once with batchlog's, one batch at a time: it drops one input
file, waits for the batch's progress and for the server to go quiet, and counts the requests
since the previous batch, split by what they touched (the sink's log ``_spark_metadata``, the
checkpoint, the data files) and by kind (HEAD, GET, LIST, PUT, DELETE, POST). Then, on the
batchlog sink: ``SinkLog(...).files(b)`` and ``batch_of(path)`` (a fresh ``SinkLog`` each, as a
caller would), a rewind's plan and the rewind itself, and the replay.

With hadoop-cloud's ``AbortableStreamBasedCheckpointFileManager`` on the class path (``dev/setup``
puts its jar in ``.tools/storage/hadoop-cloud``), both queries run a second time with it as the
checkpoint manager (``spark.sql.streaming.checkpointFileManagerClass``): it writes checkpoint files
through an abortable stream on their final path, without a temp file and rename; the same
per-batch split shows what that saves (issue 24, benchmark 3).

With ``--store gcs`` the same runs go to fake-gcs-server through Google's connector, behind
``tests/servers/gcs_proxy.py``, which logs each request alike (its JSON API's requests are named
as S3's: an object list is a LIST, a metadata read a HEAD, a download a GET, an upload's requests
a POST and a PUT, a compose a POST). With ``--store abfs``, to Azurite through Hadoop's ABFS
driver (Blob API), behind ``tests/servers/azure_proxy.py`` (a blob listing is a LIST; a block, a
block list and a Copy Blob each a PUT).

Goals (issue 13): ``files(b)`` and ``batch_of`` at most 4 requests and no LIST; the commit path at
most vanilla + 1 request per batch; a compaction at most vanilla + 3.

Usage: python bench/requests.py [--store s3|gcs|abfs] [--batches 25] [--interval 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import batchlog  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from storage_support import StoreServer, start_store  # noqa: E402

VANILLA = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"
BUCKET = "bench"
KINDS = ("HEAD", "GET", "LIST", "PUT", "DELETE", "POST")
LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/')


class RequestLog:
    """The server's request log, read from a mark: each request as (kind, key or LIST prefix)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mark = 0

    def _lines(self) -> list[str]:
        return self.path.read_text(errors="replace").splitlines()

    def quiet(self, still_s: float = 0.4) -> None:
        """Waits until no request was logged for ``still_s`` (the last ones are written after
        their responses)."""
        n, since = -1, time.monotonic()
        while True:
            m = len(self._lines())
            if m != n:
                n, since = m, time.monotonic()
            elif time.monotonic() - since >= still_s:
                return
            time.sleep(0.05)

    def take(self) -> list[tuple[str, str]]:
        """The requests since the last ``take`` (after the server went quiet)."""
        self.quiet()
        lines = self._lines()
        new, self.mark = lines[self.mark :], len(lines)
        out = []
        for line in new:
            m = LINE.search(line)
            if not m:
                continue
            method, target = m.groups()
            path, _, query = target.partition("?")
            if path.startswith(("/storage/v1/", "/upload/storage/v1/", "/download/storage/v1/")):
                out.append(_gcs(method, path, query))
            elif path.startswith("/devstoreaccount1"):
                out.append(_azure(method, path, query))
            elif method == "GET" and "list-type" in query:
                prefix = re.search(r"prefix=([^&]*)", query)
                out.append(("LIST", prefix.group(1) if prefix else ""))
            else:
                out.append((method, path))
        return out


def _gcs(method: str, path: str, query: str) -> tuple[str, str]:
    """A request of GCS's JSON API named as its S3 counterpart, with its object's name."""
    from urllib.parse import parse_qs, unquote

    q = parse_qs(query)
    if re.fullmatch(r"/storage/v1/b/[^/]+/o", path) and method == "GET":
        return "LIST", q.get("prefix", [""])[0]
    if path.startswith("/upload/"):
        return method, q.get("name", [""])[0]
    m = re.match(r"^(?:/download)?/storage/v1/b/[^/]+/o/([^/]+)(/compose)?$", unquote(path))
    name = unquote(m.group(1)) if m else unquote(path)
    if method == "GET" and not path.startswith("/download/") and "alt=media" not in query:
        return "HEAD", name
    return method, name


def _azure(method: str, path: str, query: str) -> tuple[str, str]:
    """A request of Azure's Blob API (path-style: ``/<account>/<container>/<blob>``) named as its
    S3 counterpart, with its blob's name (a listing: its prefix)."""
    from urllib.parse import parse_qs, unquote

    q = parse_qs(query)
    name = unquote(path.split("/", 3)[3]) if path.count("/") >= 3 else ""
    if method == "GET" and q.get("comp") == ["list"]:
        return "LIST", q.get("prefix", [""])[0]
    return method, name


def where(target: str) -> str:
    if "_spark_metadata" in target:
        return "log"
    if "/chk" in target:
        return "checkpoint"
    return "data"


def summary(reqs: list[tuple[str, str]]) -> dict[str, Any]:
    by_where = Counter(where(t) for _, t in reqs)
    log_kinds = Counter(k for k, t in reqs if where(t) == "log")
    return {
        "total": len(reqs),
        "log": by_where["log"],
        "checkpoint": by_where["checkpoint"],
        "data": by_where["data"],
        "log_by_kind": {k: log_kinds[k] for k in KINDS if log_kinds[k]},
    }


#: Spark's hadoop-cloud module: a checkpoint manager that writes through an abortable stream on the
#: final path (no temp file, no rename); its jar from Maven Central (``dev/setup``), 4.1.1 (the
#: newest there with the streaming layout of Spark 4.1+; Spark 4.3 is not on Maven Central).
ABORTABLE = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
HADOOP_CLOUD = ROOT / ".tools" / "storage" / "hadoop-cloud"


def session(server: StoreServer) -> SparkSession:
    classpath = server.classpath + (f":{HADOOP_CLOUD}/*" if server.kind == "s3" else "")
    builder = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .appName("batchlog-bench-requests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.extraClassPath", classpath)
        # one lease refresh per 15 minutes: none inside the run (each costs a read and a write)
        .config("spark.batchlog.writerLease.timeout", "1h")
    )
    for k, v in server.hadoop.items():
        builder = builder.config(f"spark.hadoop.{k}", v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def drop(inbox: Path, b: int) -> None:
    f = inbox / f"f{b:04d}.json"
    tmp = inbox / f".f{b:04d}.tmp"
    tmp.write_text(
        "".join(json.dumps({"id": b * 10 + i, "c": f"c{i % 2}"}) + "\n" for i in range(4))
    )
    tmp.rename(f)


def stream(
    spark: SparkSession,
    rlog: RequestLog,
    work: Path,
    store: str,
    protocol: str,
    n: int,
    manager: str | None = None,
) -> list[dict[str, Any]]:
    """Runs the query one batch at a time (checkpoint manager ``manager``, None: Spark's
    default); the requests of each batch."""
    spark.conf.set("spark.sql.streaming.commitProtocolClass", protocol)
    if manager is None:
        spark.conf.unset("spark.sql.streaming.checkpointFileManagerClass")
    else:
        spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", manager)
    inbox = work / "in"
    inbox.mkdir(parents=True)
    df = (
        spark.readStream.schema("id LONG, c STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox))
    )
    q = (
        df.writeStream.format("parquet")
        .partitionBy("c")
        .option("checkpointLocation", f"{store}/chk")
        .trigger(processingTime="100 milliseconds")
        .start(f"{store}/out")
    )
    rlog.take()  # the start: checkpoint and sink probes before any batch
    per_batch = []
    try:
        for b in range(n):
            drop(inbox, b)
            deadline = time.monotonic() + 120
            # idle triggers report progress too (no input rows, the next batch's id)
            while not any(
                int(p["batchId"]) == b and p["numInputRows"] > 0 for p in q.recentProgress
            ):
                if q.exception() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"batch {b} did not run: {q.exception()}")
                time.sleep(0.02)
            per_batch.append(summary(rlog.take()))
            print(f"  batch {b:>3}: {per_batch[-1]}", flush=True)
    finally:
        q.stop()
    rlog.take()  # the stop (lease removal)
    return per_batch


def measure(what: str, rlog: RequestLog, fn: Any) -> dict[str, Any]:
    rlog.take()
    result = fn()
    s = summary(rlog.take())
    s["lists"] = s["log_by_kind"].get("LIST", 0)
    print(f"  {what}: {s}", flush=True)
    s["result"] = result if isinstance(result, (int, str, list)) else None
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=25)
    ap.add_argument("--interval", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--store", choices=["s3", "gcs", "abfs"], default="s3")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="batchlog-requests-"))
    server = start_store(args.store, work / args.store, faults=False)
    try:
        base = server.bucket(BUCKET)
        spark = session(server)
        spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", str(args.interval))
        rlog = RequestLog(server.log)
        runs, stores = {}, {}
        variants: list[tuple[str, str, str | None]] = [
            ("vanilla", VANILLA, None),
            ("batchlog", batchlog.COMMIT_PROTOCOL_CLASS, None),
        ]
        if args.store != "s3":
            pass  # hadoop-cloud's manager is for S3A
        elif list(HADOOP_CLOUD.glob("spark-hadoop-cloud_*.jar")):
            variants += [
                ("vanilla+abortable", VANILLA, ABORTABLE),
                ("batchlog+abortable", batchlog.COMMIT_PROTOCOL_CLASS, ABORTABLE),
            ]
        else:
            print(f"[requests] no spark-hadoop-cloud jar in {HADOOP_CLOUD}: run dev/setup")
        for name, protocol, manager in variants:
            print(f"[requests] {name}: {args.batches} batches, compactInterval {args.interval}")
            stores[name] = f"{base}/{name.replace('+', '-')}-{uuid.uuid4().hex[:6]}"
            runs[name] = stream(
                spark, rlog, work / name, stores[name], protocol, args.batches, manager
            )
        spark.conf.unset("spark.sql.streaming.checkpointFileManagerClass")

        def is_compaction(b: int) -> bool:
            return bool((b + 1) % args.interval == 0)

        def figure(name: str, key: str, batches: list[int]) -> float:
            return float(statistics.mean(runs[name][b][key] for b in batches))

        normal = [b for b in range(1, args.batches) if not is_compaction(b)]
        compactions = [b for b in range(args.batches) if is_compaction(b)]
        table: dict[str, Any] = {}
        for label, bs in (("first batch", [0]), ("a batch", normal), ("a compaction", compactions)):
            for key in ("total", "log", "checkpoint", "data"):
                table[f"{label} ({key})"] = {n: figure(n, key, bs) for n in runs}

        out = stores["batchlog"] + "/out"
        old, recent = 3, args.batches - 1 - (1 if is_compaction(args.batches - 1) else 0)
        ops: dict[str, Any] = {}
        log = batchlog.SinkLog(spark, out)  # warms the JVM side; opening is measured next
        ops["SinkLog(...) (checks the path)"] = measure(
            "SinkLog(spark, out)", rlog, lambda: batchlog.SinkLog(spark, out) and 0
        )
        logs = {b: batchlog.SinkLog(spark, out) for b in (old, recent)}
        rlog.take()
        jvm_files = {}
        for b in (old, recent):
            ops[f"files({b})"] = measure(f"files({b})", rlog, lambda b=b: logs[b].files(b))
            jvm_files[b] = ops[f"files({b})"]["result"]
        logs = {b: batchlog.SinkLog(spark, out) for b in (old, recent)}
        rlog.take()
        for b in (old, recent):
            path = sorted(jvm_files[b])[0]
            ops[f"batch_of(a file of {b})"] = measure(
                f"batch_of(a file of {b})", rlog, lambda b=b, p=path: logs[b].batch_of(p)
            )
        del log
        live = batchlog.verify(spark, out).live_files
        for name, op in (
            (f"verify ({live} live files)", lambda: batchlog.verify(spark, out) and 0),
            ("vacuum, dry run", lambda: batchlog.vacuum(spark, out, "1h", dry_run=True) and 0),
            (
                "repair, dry run (healthy)",
                lambda: batchlog.repair(spark, out, dry_run=True, quiet=True) and 0,
            ),
        ):
            ops[name] = measure(name, rlog, op)
        chk = stores["batchlog"] + "/chk"
        to = args.batches - 5
        ops["rewind plan (dry run)"] = measure(
            f"rewind to {to}, dry run",
            rlog,
            lambda: batchlog.rewind(spark, out, chk, to_batch=to, dry_run=True, quiet=True) and 0,
        )
        ops["rewind"] = measure(
            f"rewind to {to}",
            rlog,
            lambda: batchlog.rewind(spark, out, chk, to_batch=to, quiet=True) and 0,
        )
        vanilla_all = stores["vanilla"] + "/out"
        ops["vanilla: every live file (Spark's only reader)"] = measure(
            "vanilla: spark.read of the sink's file list",
            rlog,
            lambda: len(spark.read.parquet(vanilla_all).inputFiles()),
        )
        figures = [
            {"measure": f"requests: {k}", "impl": impl, "entries": 0, "values": [v[impl]]}
            for k, v in table.items()
            for impl in runs
        ]
        for k, v in ops.items():
            impl = "vanilla" if k.startswith("vanilla") else "batchlog"
            figures.append(
                {
                    "measure": f"requests: {k}",
                    "impl": impl,
                    "entries": 0,
                    "values": [v["total"]],
                }
            )
            figures.append(
                {"measure": f"LISTs: {k}", "impl": impl, "entries": 0, "values": [v["lists"]]}
            )
        report = {"figures": figures, "streaming": table, "per_batch": runs, "operations": ops}
        print("\nper committed batch (requests; 'log' = those to _spark_metadata):")
        print(f"  {'':<26}{'vanilla':>9}{'batchlog':>10}{'extra':>8}")
        for k, v in table.items():
            van, ours = v["vanilla"], v["batchlog"]
            print(f"  {k:<26}{van:>9.1f}{ours:>10.1f}{ours - van:>+8.1f}")
        if "batchlog+abortable" in runs:
            print("\nper committed batch with each checkpoint manager (requests):")
            heads = ("vanilla", "batchlog", "vanilla+abortable", "batchlog+abortable")
            print(f"  {'':<30}" + "".join(f"{h:>20}" for h in heads))
            for k, v in table.items():
                print(f"  {k:<30}" + "".join(f"{v[h]:>20.1f}" for h in heads))
        print("\noperations on the batchlog sink (requests, LISTs):")
        for k, v in ops.items():
            print(f"  {k:<48}{v['total']:>5}{v['lists']:>5}  {v['log_by_kind']}")
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        spark.stop()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
