"""A compaction on Azure Blob Storage (Azurite's blob service, through Hadoop's ABFS driver) or
Google Cloud Storage (fake-gcs-server, through Google's connector), side by side with the store's
own copy of the same bytes.

For each size (entries in the previous compact file), one sink log is laid out as a running sink
leaves it (the batch files of the first compaction interval and its compaction, by the log
itself; then nine small batch files: the new lines), and the next compaction is timed, each repeat
from the same state (the compact file it wrote deleted, a fresh log instance):

- ``batchlog``: batchlog's compaction on the store (Azure, ``AzureBlocks``: the previous compact
  file's ranges copied by the store, Put Block From URL, 100 MiB blocks, eight at once, one block
  of new lines, Put Block List; GCS, ``GcsCompose``: one ``compose`` of the previous file and an
  object of the new lines);
- ``batchlog-client``: the same log with ``spark.batchlog.compaction.serverSide=false`` (the
  previous compact file read and written through the driver);
- the store's own copies of the previous compact file, sent from Python with ``urllib`` (issue 42:
  batchlog's compaction within 1.25x of the one a compaction must make):
  - Azure: ``store-block-copy``, the same Put Block From URL requests, eight at once, committed by
    a Put Block List (the copy a compaction must make, to add lines after the bytes), and
    ``store-copy``, one synchronous Copy Blob From URL (``x-ms-requires-sync``, up to 256 MiB);
  - GCS: ``store-compose``, a ``compose`` of the previous file alone (the join a compaction must
    make), and ``store-copy``, one ``rewriteTo``.

Measured: wall time, and the bytes the driver wrote (Hadoop's statistics of the store's scheme,
plus what batchlog uploaded itself). Best of ``--repeat``, JSON for ``bench/report.py``. Azurite
copies a block by reading its source over loopback HTTP and keeps blobs on disk; fake-gcs-server
keeps objects in memory.

Usage: python bench/store_compaction.py --store azure|gcs [--entries 100000,1000000]
       [--repeat 3] [--new 1000] [--impls batchlog,batchlog-client,...] [--json FILE]
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import batchlog  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from s3_compaction import INTERVAL, line, spread  # noqa: E402
from storage_support import (  # noqa: E402
    ABFS_CONTAINER,
    ABFS_HOST,
    abfs_conf,
    create_gcs_bucket,
    gcs_conf,
    start_azurite,
    start_gcs,
    stop_server,
)
from support import ABFS_CLASSPATH, GCS_CLASSPATH  # noqa: E402

IMPLS = {
    "azure": ("batchlog", "batchlog-client", "store-block-copy", "store-copy"),
    "gcs": ("batchlog", "batchlog-client", "store-compose", "store-copy"),
}
GCS_BUCKET = "bench-compaction"
BLOCK = 100 << 20
API = "2020-12-06"


class Bench:
    def __init__(
        self,
        spark: SparkSession,
        store: str,
        endpoint: str,
        root: str,
        new: int,
        request_log: Path | None = None,
    ) -> None:
        self.spark = spark
        jvm = spark._jvm
        assert jvm is not None
        self.jvm: Any = jvm
        self.root = root
        self.new = new
        self.store = store
        self.endpoint = endpoint
        self.request_log = request_log
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        self.fs = jvm.org.apache.hadoop.fs.Path(f"{root}/").getFileSystem(conf)
        if store == "azure":
            blobs = getattr(getattr(jvm.io.batchlog.log, "AzureBlocks$Blob$"), "MODULE$")
            self.blob = blobs.of(self.fs).toOption().get()
            #: Azurite's path-style Blob URL of the container
            self.base = f"http://{endpoint}/{ABFS_HOST.split('.')[0]}/{ABFS_CONTAINER}"

    def path(self, p: str) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(p)

    def url(self, p: str, perms: str) -> str:
        """The Blob URL of ``p`` with a SAS batchlog signs (``AzureBlocks.Blob.sas``)."""
        name = self.blob.nameOf(self.fs, self.path(p))
        return f"{self.base}/{urllib.parse.quote(name)}?{self.blob.sas(name, perms)}"

    def put_batch(self, meta: str, b: int, n: int) -> None:
        out = self.fs.create(self.path(f"{meta}/{b}"), True)
        out.write(bytearray(b"v1"))
        for start in range(0, n, 50_000):  # py4j passes one call's bytes as one string
            chunk = "".join("\n" + line(b, i) for i in range(start, min(n, start + 50_000)))
            out.write(bytearray(chunk.encode()))
        out.close()

    def log(self, meta: str) -> Any:
        return self.jvm.io.batchlog.log.BatchTaggedFileStreamSinkLog(
            self.spark._jsparkSession, meta, 2**63 - 1
        )

    def empty(self) -> Any:
        cls = self.jvm.io.batchlog.log.SinkLogEntry
        return self.spark.sparkContext._gateway.new_array(cls, 0)  # type: ignore[union-attr]

    def server_side(self, impl: str) -> None:
        on = "false" if impl == "batchlog-client" else "true"
        self.spark.conf.set("spark.batchlog.compaction.serverSide", on)

    def lay_out(self, prefix: str, entries: int) -> None:
        meta = f"{self.root}/{prefix}/_spark_metadata"
        per = entries // (INTERVAL - 1)
        for b in range(INTERVAL - 1):
            self.put_batch(meta, b, per)
        self.server_side("batchlog-client")
        assert self.log(meta).add(INTERVAL - 1, self.empty())
        for b in range(INTERVAL, 2 * INTERVAL - 1):
            self.put_batch(meta, b, self.new)

    def stats(self) -> dict[str, int]:
        got: dict[str, int] = json.loads(self.jvm.io.batchlog.log.ObjectStoreCopy.statsJson())
        return got

    def written(self) -> int:
        """Bytes written to the store's scheme through Hadoop (``FileSystem`` and ``FileContext``
        statistics, each object once: a ``FileContext`` over a ``FileSystem`` may share its
        object), plus what batchlog's store-side compaction uploaded itself, through the store's
        own client (``AzureBlocks``, ``GcsCompose``: not through Hadoop). Google's
        connector counts each byte it writes twice (a 1,000-byte create: 2,000): halved."""
        fs_api = self.jvm.org.apache.hadoop.fs
        schemes = ("abfs", "abfss", "gs")
        found = [st for st in fs_api.FileSystem.getAllStatistics() if st.getScheme() in schemes]
        found += [
            st
            for uri, st in fs_api.FileContext.getAllStatistics().items()
            if uri.getScheme() in schemes
        ]
        ids = self.jvm.java.lang.System.identityHashCode
        n = sum(int(v) for v in {ids(st): st.getBytesWritten() for st in found}.values())
        if self.store == "gcs":
            n //= 2  # gcs-connector 3.1.3 counts a byte written twice (1,000 -> 2,000)
        return n + self.stats()["bytesUploaded"]

    def requests(self) -> int:
        """Requests the store's fault step logged so far (GCS; Azure here runs without one)."""
        if self.request_log is None:
            return 0
        lines = self.request_log.read_text(errors="replace").splitlines()
        return sum(1 for x in lines if x.startswith('"'))

    def gcs_copy(self, impl: str, prev: str, copy_to: str) -> Callable[[], None]:
        """The store's copy of ``prev`` to ``copy_to`` on GCS: a ``compose`` of it alone, or a
        ``rewriteTo`` (the JSON API, as the connector sends them)."""
        api = f"{self.endpoint}/storage/v1/b/{GCS_BUCKET}/o"
        src_name = prev.split(f"{GCS_BUCKET}/", 1)[1]
        src = urllib.parse.quote(src_name, safe="")
        dest = urllib.parse.quote(copy_to.split(f"{GCS_BUCKET}/", 1)[1], safe="")
        if impl == "store-compose":
            url = f"{api}/{dest}/compose"
            body = json.dumps({"sourceObjects": [{"name": src_name}]}).encode()
        else:
            url, body = f"{api}/{src}/rewriteTo/b/{GCS_BUCKET}/o/{dest}", b"{}"

        def run() -> None:
            req = urllib.request.Request(url, method="POST", data=body)
            req.add_header("Content-Type", "application/json")
            with urllib.request.urlopen(req, timeout=600) as r:
                assert r.status == 200, r.status

        return run

    def measure(self, impl: str, prefix: str) -> dict[str, float]:
        meta = f"{self.root}/{prefix}/_spark_metadata"
        last = 2 * INTERVAL - 1
        prev = f"{meta}/{INTERVAL - 1}.compact"
        copy_to = f"{self.root}/{prefix}/copy-of-compact"
        for p in (f"{meta}/{last}.compact", f"{meta}/{last}.compact.index", copy_to):
            self.fs.delete(self.path(p), False)
        self.server_side(impl)
        run: Callable[[], None]
        if self.store == "gcs" and impl.startswith("store-"):
            run = self.gcs_copy(impl, prev, copy_to)
        elif impl == "store-copy":

            def run() -> None:
                req = urllib.request.Request(self.url(copy_to, "w"), method="PUT", data=b"")
                req.add_header("x-ms-version", API)
                req.add_header("x-ms-copy-source", self.url(prev, "r"))
                req.add_header("x-ms-requires-sync", "true")
                with urllib.request.urlopen(req, timeout=600) as r:
                    assert r.status == 202, r.status

        elif impl == "store-block-copy":
            size = self.fs.getFileStatus(self.path(prev)).getLen()

            def run() -> None:
                ids = [
                    base64.b64encode(f"floor-{i:06d}".encode()).decode()
                    for i in range(-(-size // BLOCK))
                ]
                dest = self.url(copy_to, "w")
                src = self.url(prev, "r")

                def block(i: int) -> None:
                    q = urllib.parse.urlencode({"comp": "block", "blockid": ids[i]})
                    req = urllib.request.Request(f"{dest}&{q}", method="PUT", data=b"")
                    req.add_header("x-ms-version", API)
                    req.add_header("x-ms-copy-source", src)
                    end = min(size, (i + 1) * BLOCK) - 1
                    req.add_header("x-ms-source-range", f"bytes={i * BLOCK}-{end}")
                    with urllib.request.urlopen(req, timeout=600) as r:
                        assert r.status == 201, r.status

                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(block, range(len(ids))))
                xml = "".join(f"<Latest>{i}</Latest>" for i in ids)
                body = f'<?xml version="1.0" encoding="utf-8"?><BlockList>{xml}</BlockList>'
                req = urllib.request.Request(
                    f"{dest}&comp=blocklist", method="PUT", data=body.encode()
                )
                req.add_header("x-ms-version", API)
                with urllib.request.urlopen(req, timeout=600) as r:
                    assert r.status == 201, r.status

        else:
            log = self.log(meta)
            log.getLatestBatchId()  # as a running sink has, before its batch
            empty = self.empty()

            def run() -> None:
                assert log.add(last, empty)

        before = self.stats()
        w0, q0 = self.written(), self.requests()
        t0 = time.perf_counter()
        run()
        ms = (time.perf_counter() - t0) * 1000
        w1, q1 = self.written(), self.requests()
        out: dict[str, float] = {"wall ms": ms, "driver written MiB": (w1 - w0) / 2**20}
        if self.request_log is not None:
            out["requests"] = q1 - q0
        if impl == "batchlog":
            after = self.stats()
            done = {k: after[k] - before[k] for k in ("compactions", "fallbacks", "partsCopied")}
            if done["compactions"] != 1 or done["fallbacks"]:
                print(f"  ! {impl}: the server-side copy did not engage: {done}")
            else:
                print(f"  [{impl}: {done['partsCopied']} blocks copied, {ms:,.0f} ms]")
        if impl.startswith("batchlog"):
            size = self.fs.getFileStatus(self.path(f"{meta}/{last}.compact")).getLen()
            index = self.fs.getFileStatus(self.path(f"{meta}/{last}.compact.index")).getLen()
            prev_len = self.fs.getFileStatus(self.path(prev)).getLen()
            out["new lines + index MiB"] = (size - prev_len + index) / 2**20
            out["compact file MiB"] = size / 2**20
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True, choices=("azure", "gcs"))
    ap.add_argument("--entries", default="100000,1000000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--new", type=int, default=1000, help="entries of each batch file since")
    ap.add_argument("--impls", help=f"default: {IMPLS}")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sizes = [int(x) for x in args.entries.split(",")]
    impls = args.impls.split(",") if args.impls else list(IMPLS[args.store])
    tmp = Path(tempfile.mkdtemp(prefix="bl-stc-"))
    if args.store == "azure":
        proc, endpoint = start_azurite(tmp / "azurite", faults=False)
        hadoop, classpath = abfs_conf(endpoint), ABFS_CLASSPATH
        root, server = f"abfs://{ABFS_CONTAINER}@{ABFS_HOST}", "azurite"
    else:
        (tmp / "gcs").mkdir()
        proc, endpoint = start_gcs(tmp / "gcs")
        create_gcs_bucket(endpoint, GCS_BUCKET)
        hadoop, classpath = gcs_conf(endpoint), GCS_CLASSPATH
        root, server = f"gs://{GCS_BUCKET}", "fake-gcs-server"
    figures: list[dict[str, Any]] = []
    try:
        builder = (
            batchlog.configure(SparkSession.builder)
            .master("local[2]")
            .appName("batchlog-bench-store-compaction")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.driver.extraClassPath", classpath)
            .config("spark.sql.streaming.fileSink.log.compactInterval", str(INTERVAL))
        )
        for k, v in hadoop.items():
            builder = builder.config(f"spark.hadoop.{k}", v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        log = tmp / "gcs" / "requests.log" if args.store == "gcs" else None
        bench = Bench(spark, args.store, endpoint, root, args.new, log)
        print(f"server: {server}; best of {args.repeat}; new lines: {INTERVAL - 1} x {args.new}")
        for n in sizes:
            print(f"\n=== {n:,} entries in the previous compact file ===")
            prefix = f"n{n}"
            t0 = time.perf_counter()
            bench.lay_out(prefix, n)
            print(f"  [laid out in {time.perf_counter() - t0:.1f} s]")
            for impl in impls:
                reps = [bench.measure(impl, prefix) for _ in range(args.repeat)]
                for measure in reps[0]:
                    values = [r[measure] for r in reps]
                    print(
                        f"  {impl:<16} {measure:<22} best {min(values):>12,.2f}  "
                        f"spread {spread(values)}"
                    )
                    figures.append(
                        {
                            "entries": n,
                            "measure": f"{args.store} compaction {measure}",
                            "impl": impl,
                            "unit": measure.rsplit(" ", 1)[-1],
                            "values": values,
                        }
                    )
            bench.fs.delete(bench.path(f"{bench.root}/{prefix}"), True)
        spark.stop()
    finally:
        stop_server(proc)
    if args.json:
        doc = {"kind": f"{args.store}-compaction", "server": server, "figures": figures}
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
