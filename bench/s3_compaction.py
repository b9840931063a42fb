"""A compaction on an S3-compatible store (moto, ``tests/servers/s3_server.py``, or SeaweedFS),
side by side.

For each size (entries in the previous compact file), one sink log per implementation is laid out
on ``s3a://`` as a running sink leaves it: the batch files of the first compaction interval
(written to the store directly) and its compaction, by the log itself; then nine small batch files
(``--new`` entries each: the new lines). The next compaction is then timed, each repeat from the
same state (the compact file it wrote deleted, a fresh log instance):

- ``vanilla``: Spark's ``FileStreamSinkLog`` (reads and re-serialises every entry, writes through
  the checkpoint manager: a temp file and a rename, which S3A does as a copy);
- ``batchlog``: batchlog's log with server-side compaction (``ObjectStoreCopy``: a multipart upload
  whose big parts the store copies from the previous compact file, in parts of up to 64 MiB
  copied at once);
- ``batchlog-one-part``: the same, each stretch copied as one part (as before parts were copied
  at once; on ``batchlog``'s log);
- ``batchlog-client``: the same log with ``spark.batchlog.compaction.serverSide=false`` (the
  previous compact file copied through the driver, as on any file system);
- ``copy``: a plain copy of the previous compact file through the driver (S3A read, S3A write):
  the floor for any compaction that moves the file's bytes through the driver;
- ``store-copy``: the store's own copy of the previous compact file, one ``CopyObject`` (boto3):
  the floor of a compaction on an object store, which must at least copy those bytes (issue 42:
  batchlog's compaction within 1.25x of it);
- ``store-part-copy``: the same bytes copied by the store the way a compaction must copy them to
  add lines after them: a multipart upload of one ``UploadPartCopy`` of the whole previous
  compact file (boto3), completed. On S3 both are copies in the store's back end; SeaweedFS
  answers a ``CopyObject`` without rewriting the bytes, a part copy by rewriting them;
- ``verify``: ``batchlog.verify`` of batchlog's log as the compaction left it (its entries name
  no file in the output, so they are all reported as outside it: the log is still read whole):
  its requests, and the bytes it read against the bytes of the log files present (issue 42: at
  most 1.1x).

Measured for each: wall time, requests the server logged, and the bytes the driver read and wrote:
Hadoop's ``FileSystem.Statistics`` of the ``s3a`` scheme (those of ``FileSystem`` and of
``FileContext``, which Spark's checkpoint manager writes through), plus what batchlog's
server-side path sent or read through S3A's SDK client itself (``ObjectStoreCopy.Stats``:
uploaded parts, ranged reads), which those statistics do not see. Best of ``--repeat`` with
spreads, JSON for ``bench/report.py``.

The store: ``--server moto`` (the default, as in the tests: moto keeps every object in Python's
memory and reads a whole object in Python for each ranged copy, so it holds 1M entries at most
and slows the server-side path) or ``--server seaweedfs`` (SeaweedFS's ``weed server``, Go, data
on disk: ``dev/seaweedfs`` installs it; requests counted from its Prometheus counter; deleted
objects' disk reclaimed by a vacuum before each timing, outside it). ``vanilla`` runs up to
``--vanilla-max`` entries: it holds every entry in the driver's heap.

Usage: python bench/s3_compaction.py [--server moto|seaweedfs] [--entries 100000,1000000]
       [--repeat 3] [--new 1000] [--impls vanilla,batchlog,batchlog-one-part,batchlog-client,copy]
       [--vanilla-max 1000000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import batchlog  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from storage_support import (  # noqa: E402
    REQUEST_LINE,
    create_bucket,
    s3_client,
    s3a_conf,
    start_s3,
    start_seaweedfs,
    stop_server,
)
from support import S3A_CLASSPATH  # noqa: E402

BUCKET = "bench-compaction"
INTERVAL = 10
IMPLS = (
    "vanilla",
    "batchlog",
    "batchlog-one-part",
    "batchlog-client",
    "copy",
    "store-copy",
    "store-part-copy",
    "verify",
)
#: batchlog-one-part's copy parts: S3's largest, so a stretch is one part.
ONE_PART = 5 * 2**30


def line(b: int, i: int) -> str:
    """An entry as batchlog writes it: a realistic partitioned parquet path (~250 bytes a line)."""
    path = (
        f"s3a://data/events/country=c{i % 50:02d}/part-{i % 1000:05d}-batch-{b}-"
        f"{b:08x}-{i:04x}-4b1e-9c3a-{b * 1000003 + i:012x}.c000.snappy.parquet"
    )
    return (
        f'{{"path":"{path}","size":{1000 + i},"isDir":false,"modificationTime":'
        f'{1700000000000 + b * 1000},"blockReplication":1,"blockSize":134217728,'
        f'"action":"add","batchId":{b}}}'
    )


class Requests:
    """The server's requests (``count``: all it served so far): how many since the last mark."""

    def __init__(self, count: Callable[[], int]) -> None:
        self.count = count
        self.mark = self._count()

    def _count(self) -> int:
        n, last, since = -1, -1, time.monotonic()
        while True:  # quiet for 0.3 s: the last are counted after their responses
            n = self.count()
            if n != last:
                last, since = n, time.monotonic()
            elif time.monotonic() - since >= 0.3:
                return n
            time.sleep(0.05)

    def take(self) -> int:
        n = self._count()
        d, self.mark = n - self.mark, n
        return d


def log_lines(path: Path) -> Callable[[], int]:
    """The requests in a werkzeug access log (moto's): one line each."""

    def count() -> int:
        with open(path, "rb") as f:
            return sum(1 for ln in f if REQUEST_LINE.search(ln.decode(errors="replace")))

    return count


@dataclass
class Store:
    """The S3-compatible server the bench runs against."""

    name: str
    endpoint: str
    requests: Callable[[], int]  # requests served so far
    reclaim: Callable[[], None]  # frees the disk of deleted objects (outside any timing)
    stop: Callable[[], None]


def start_store(server: str, root: Path) -> Store:
    if server == "moto":
        proc, endpoint, log_file = start_s3(root)
        return Store("moto", endpoint, log_lines(log_file), lambda: None, lambda: stop_server(proc))
    if server == "seaweedfs":
        weed = start_seaweedfs(root)

        def stop() -> None:
            stop_server(weed.proc)
            shutil.rmtree(root / "data", ignore_errors=True)  # gigabytes at 10M entries

        return Store("seaweedfs", weed.endpoint, weed.requests, weed.vacuum, stop)
    raise SystemExit(f"unknown --server {server}: moto or seaweedfs")


class Bench:
    def __init__(
        self,
        spark: SparkSession,
        s3: Any,
        requests: Requests,
        new: int,
        reclaim: Callable[[], None],
    ) -> None:
        self.spark = spark
        jvm = spark._jvm
        assert jvm is not None
        self.jvm: Any = jvm
        self.s3 = s3
        self.requests = requests
        self.new = new
        self.reclaim = reclaim
        #: batchlog's server-side copy (``ObjectStoreCopy``) and its default part size
        self.store_copy = getattr(getattr(self.jvm.io.batchlog.log, "ObjectStoreCopy$"), "MODULE$")
        self.part_bytes = int(self.store_copy.copyPartBytes())
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        self.fs = self.jvm.org.apache.hadoop.fs.Path(f"s3a://{BUCKET}/").getFileSystem(conf)

    def path(self, p: str) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(p)

    def put_batch(self, prefix: str, b: int, n: int) -> None:
        body = ("v1" + "".join("\n" + line(b, i) for i in range(n))).encode()
        self.s3.put_object(Bucket=BUCKET, Key=f"{prefix}/_spark_metadata/{b}", Body=body)

    def open_log(self, impl: str, meta: str) -> Any:
        js = self.spark._jsparkSession
        if impl == "vanilla":
            none = getattr(getattr(self.jvm.scala, "None$"), "MODULE$")
            return self.jvm.org.apache.spark.sql.execution.streaming.sinks.FileStreamSinkLog(
                1, js, meta, none
            )
        return self.jvm.io.batchlog.log.BatchTaggedFileStreamSinkLog(js, meta, 2**63 - 1)

    def empty(self, impl: str) -> Any:
        cls = (
            self.jvm.org.apache.spark.sql.execution.streaming.sinks.SinkFileStatus
            if impl == "vanilla"
            else self.jvm.io.batchlog.log.SinkLogEntry
        )
        return self.spark.sparkContext._gateway.new_array(cls, 0)  # type: ignore[union-attr]

    def s3a_bytes(self) -> tuple[int, int]:
        read = written = 0
        fs_api = self.jvm.org.apache.hadoop.fs
        for st in fs_api.FileSystem.getAllStatistics():  # through FileSystem
            if st.getScheme() == "s3a":
                read += st.getBytesRead()
                written += st.getBytesWritten()
        for uri, st in fs_api.FileContext.getAllStatistics().items():  # through FileContext
            if uri.getScheme() == "s3a":
                read += st.getBytesRead()
                written += st.getBytesWritten()
        stats = self.copy_stats()
        return read + stats["bytesRead"], written + stats["bytesUploaded"]

    def copy_stats(self) -> dict[str, int]:
        """What batchlog's server-side path did so far (``ObjectStoreCopy.Stats``)."""
        stats: dict[str, int] = json.loads(self.jvm.io.batchlog.log.ObjectStoreCopy.statsJson())
        return stats

    def server_side(self, impl: str) -> None:
        on = "false" if impl == "batchlog-client" else "true"
        self.spark.conf.set("spark.batchlog.compaction.serverSide", on)

    def lay_out(self, impl: str, prefix: str, entries: int) -> None:
        """The log before compaction ``2 * INTERVAL - 1``: one compaction, small files since."""
        meta = f"s3a://{BUCKET}/{prefix}/_spark_metadata"
        per = entries // (INTERVAL - 1)
        for b in range(INTERVAL - 1):
            self.put_batch(prefix, b, per)
        self.server_side(impl)
        log = self.open_log(impl, meta)
        assert log.add(INTERVAL - 1, self.empty(impl))
        for b in range(INTERVAL, 2 * INTERVAL - 1):
            self.put_batch(prefix, b, self.new)

    def measure(self, impl: str, prefix: str) -> dict[str, float]:
        meta = f"s3a://{BUCKET}/{prefix}/_spark_metadata"
        last = 2 * INTERVAL - 1
        target = self.path(f"{meta}/{last}.compact")
        prev = self.path(f"{meta}/{INTERVAL - 1}.compact")
        copy_to = self.path(f"s3a://{BUCKET}/{prefix}/copy-of-compact")
        for p in (target, self.path(f"{meta}/{last}.compact.index"), copy_to):
            self.fs.delete(p, False)
        self.reclaim()
        self.server_side(impl)
        getattr(self.store_copy, "copyPartBytes_$eq")(
            ONE_PART if impl == "batchlog-one-part" else self.part_bytes
        )
        run: Callable[[], None]
        if impl == "verify":
            return self.verify(prefix)
        if impl == "store-copy":
            src = f"{prefix}/_spark_metadata/{INTERVAL - 1}.compact"

            def run() -> None:
                self.s3.copy_object(
                    Bucket=BUCKET, Key=f"{prefix}/copy-of-compact", CopySource=f"{BUCKET}/{src}"
                )

        elif impl == "store-part-copy":
            src = f"{prefix}/_spark_metadata/{INTERVAL - 1}.compact"
            key = f"{prefix}/copy-of-compact"

            def run() -> None:
                up = self.s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
                part = self.s3.upload_part_copy(
                    Bucket=BUCKET,
                    Key=key,
                    UploadId=up,
                    PartNumber=1,
                    CopySource=f"{BUCKET}/{src}",
                )
                etag = part["CopyPartResult"]["ETag"]
                self.s3.complete_multipart_upload(
                    Bucket=BUCKET,
                    Key=key,
                    UploadId=up,
                    MultipartUpload={"Parts": [{"ETag": etag, "PartNumber": 1}]},
                )

        elif impl == "copy":
            util = self.jvm.org.apache.hadoop.fs.FileUtil
            conf = self.fs.getConf()

            def run() -> None:
                assert util.copy(self.fs, prev, self.fs, copy_to, False, conf)

        else:
            log = self.open_log(impl, meta)
            log.getLatestBatchId()  # as a running sink has, before its batch
            empty = self.empty(impl)

            def run() -> None:
                assert log.add(last, empty)

        self.requests.take()
        before = self.copy_stats()
        r0, w0 = self.s3a_bytes()
        t0 = time.perf_counter()
        run()
        ms = (time.perf_counter() - t0) * 1000
        r1, w1 = self.s3a_bytes()
        reqs = self.requests.take()
        if impl in ("batchlog", "batchlog-one-part"):
            after = self.copy_stats()
            done = {k: after[k] - before[k] for k in ("compactions", "fallbacks", "partsCopied")}
            if done["compactions"] != 1 or done["fallbacks"] or not done["partsCopied"]:
                print(f"  ! {impl}: the server-side copy did not engage: {done}")
            else:
                print(f"  [{impl}: {done['partsCopied']} parts copied, {ms:,.0f} ms]")
        out: dict[str, float] = {
            "wall ms": ms,
            "requests": reqs,
            "driver read MiB": (r1 - r0) / 2**20,
            "driver written MiB": (w1 - w0) / 2**20,
        }
        if impl.startswith("batchlog"):
            size = self.fs.getFileStatus(target).getLen()
            index = self.fs.getFileStatus(self.path(f"{meta}/{last}.compact.index")).getLen()
            prev_len = self.fs.getFileStatus(prev).getLen()
            out["new lines + index MiB"] = (size - prev_len + index) / 2**20
            out["compact file MiB"] = size / 2**20
        return out

    def verify(self, prefix: str) -> dict[str, float]:
        """verify of the sink at ``prefix`` (its log as ``batchlog`` left it after a compaction)."""
        out = f"s3a://{BUCKET}/{prefix}"
        # what a reader may read: every compact file and its index, the batch files after the
        # newest (the batch files before it, left here by the layout, are never read)
        files = {
            o["Key"].rsplit("/", 1)[1]: o["Size"]
            for page in self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=BUCKET, Prefix=f"{prefix}/_spark_metadata/"
            )
            for o in page.get("Contents", [])
        }
        newest = max(int(n.split(".")[0]) for n in files if n.endswith(".compact"))
        log_bytes = sum(
            size
            for name, size in files.items()
            if ".compact" in name or (name.isdigit() and int(name) > newest)
        )
        self.requests.take()
        r0, _ = self.s3a_bytes()
        t0 = time.perf_counter()
        report = batchlog.verify(self.spark, out)
        ms = (time.perf_counter() - t0) * 1000
        r1, _ = self.s3a_bytes()
        reqs = self.requests.take()
        print(f"  [verify: {report.live_files:,} live entries, {report.foreign_count:,} outside]")
        return {
            "wall ms": ms,
            "requests": reqs,
            "driver read MiB": (r1 - r0) / 2**20,
            "log MiB": log_bytes / 2**20,
            "read vs log x": (r1 - r0) / log_bytes,
        }


def spread(xs: list[float]) -> str:
    return f"{(max(xs) / min(xs) - 1) * 100:.0f}%" if len(xs) > 1 and min(xs) > 0 else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", default="100000,1000000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--new", type=int, default=1000, help="entries of each batch file since")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--server", default="moto", choices=("moto", "seaweedfs"))
    ap.add_argument(
        "--vanilla-max",
        type=int,
        default=1_000_000,
        help="vanilla runs up to this many entries (it holds them all in the driver's heap)",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sizes = [int(x) for x in args.entries.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bl-s3c-"))
    store = start_store(args.server, root)
    endpoint = store.endpoint
    figures: list[dict[str, Any]] = []
    try:
        create_bucket(endpoint, BUCKET)
        builder = (
            batchlog.configure(SparkSession.builder)
            .master("local[2]")
            .appName("batchlog-bench-s3-compaction")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.driver.extraClassPath", S3A_CLASSPATH)
            .config("spark.sql.streaming.fileSink.log.compactInterval", str(INTERVAL))
        )
        for k, v in s3a_conf(endpoint).items():
            builder = builder.config(f"spark.hadoop.{k}", v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        s3 = s3_client(endpoint)
        bench = Bench(spark, s3, Requests(store.requests), args.new, store.reclaim)
        print(
            f"server: {store.name}; best of {args.repeat}; "
            f"new lines: {INTERVAL - 1} batch files x {args.new}"
        )
        for n in sizes:
            print(f"\n=== {n:,} entries in the previous compact file ===")
            for impl in args.impls.split(","):
                if impl == "vanilla" and n > args.vanilla_max:
                    print(f"  [vanilla: not run above {args.vanilla_max:,} entries]")
                    continue
                # on batchlog's log
                shared = impl in (
                    "copy",
                    "batchlog-one-part",
                    "store-copy",
                    "store-part-copy",
                    "verify",
                )
                prefix = f"n{n}/{'batchlog' if shared else impl}"
                if not shared:
                    t0 = time.perf_counter()
                    bench.lay_out(impl, prefix, n)
                    print(f"  [{impl}: laid out in {time.perf_counter() - t0:.1f} s]")
                reps = [bench.measure(impl, prefix) for _ in range(args.repeat)]
                for measure in reps[0]:
                    values = [r[measure] for r in reps]
                    best = min(values)
                    print(
                        f"  {impl:<16} {measure:<22} best {best:>12,.2f}  spread {spread(values)}"
                    )
                    figures.append(
                        {
                            "entries": n,
                            "measure": f"s3 compaction {measure}",
                            "impl": impl,
                            "unit": measure.rsplit(" ", 1)[-1],
                            "values": values,
                        }
                    )
            s3_delete_prefix(s3, f"n{n}/")
            store.reclaim()
        spark.stop()
    finally:
        store.stop()
    if args.json:
        doc = {"kind": "s3-compaction", "server": store.name, "figures": figures}
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"figures written to {args.json}")


def s3_delete_prefix(s3: Any, prefix: str) -> None:
    """Frees the server's memory (moto keeps every object in it) or disk before the next size."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


if __name__ == "__main__":
    main()
