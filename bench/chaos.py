"""A seeded chaos campaign against a two-hop pipeline of batchlog sinks (local disk, S3, GCS).

    bench/run chaos --seed S --minutes M [--store local|s3|gcs] [--keep-going] [--json FILE]
    bench/run chaos [--store s3|gcs] --replay FILE    the operations a failed run wrote, again

Random operations from a weighted menu, each applied to a real sink written by real queries:
feed input; start a writer (a ``spark-submit`` driver, ``tests/apps/live_writer_app.py``), now and
then with a store fault from the test kit's ``CheckpointFileManager`` (a create, rename, delete or
list that fails, or a rename that hangs); stop it; SIGKILL it at a random moment; SIGSTOP it past
its lease, rewind under it, SIGCONT it; rewind a stopped sink to a random batch; vacuum; verify;
delete ``_spark_metadata`` and repair; bit rot in a compact file that keeps its JSON valid, or in
a compact file's index, then repair; settle (the query run to the end of its input in this
process); run the downstream hop (a ``batchlog``-source reader of the sink, two upstream batches a
trigger, to its own sink), rewound as its runbook says when an upstream rewind stops it; take the
sink over with a new query (its own input and checkpoint) after stopping or killing the writer.

After every step the model is checked: plain Spark (a process without batchlog's jar) reads no
id twice and only ids fed; ``files(b)`` lists only files tagged with batch b that exist; verify
says healthy, unless damage is pending (then unhealthy); the same for the downstream's sink,
where no id fed may appear twice either; the ids a new owner's first batches read (the sink skips
them by design) never appear; nothing outside the sinks and checkpoints changed (a sentinel
directory, linked from the output). After a settle, plain Spark reads exactly the ids fed, each
once, from the sink and from the downstream's.

On a violation it prints the seed and the operations, shrinks them (drops operations one at a
time while the violation stays, within ``--shrink-minutes``) and writes the shortest list to a
file, with the command that replays it. Exit 1 on a violation. With ``--keep-going`` (a long
run) it then goes on with a new world and the next seed until the time is up.

With ``--store s3`` the sink and its checkpoints live in a bucket of the S3 test server (moto
behind ``tests/servers/s3_server.py``), with ``--store gcs`` in one of the GCS test server
(fake-gcs-server behind ``tests/servers/gcs_proxy.py``, reached through Google's connector), the
downstream hop on the local disk; a writer may then also start with a fault of that server: a
publish applied with its answer lost (once, or with its retries' too), or one that fails
unapplied. There every compaction but the first is made by the store (S3: a multipart upload of
copied ranges; GCS: a compose of the previous compact file and the new lines), however small.

A rewind is, one time in two, a cascade (``rewind --cascade``): the downstream hop is then
rewound with the sink, and must not stop with ``UPSTREAM_REWOUND`` at its next run.

The checks are what a run spends most of its time on, so a sink is checked again only when a step
could have changed it: a feed, a verify's own step and an operation not possible then change no
sink; a downstream run changes only the downstream's. A verify step checks both sinks whatever
changed. ``files(b)`` is checked for every batch from one listing of the sink's files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import batchlog  # noqa: E402
from reliability_support import (  # noqa: E402
    APPS,
    FAULT_MANAGER,
    PYTHON,
    SINK_CONFS,
    plain_read,
    run_stream,
    spark_submit,
    write_input,
)
from storage_support import RemoteFs, StoreServer, start_store  # noqa: E402
from support import (  # noqa: E402
    get_spark,
    rot_compact,
    session_conf,
    testkit_jar_path,
)

ROWS = 3
LEASE = "4s"
#: A world ends, settled and checked, once its sink has this many batches (``--world-batches``;
#: 0: never), so that the checks, which read the whole sink, stay cheap in a long run.
WORLD_BATCHES = 100
#: The menu: operation and weight.
MENU = {
    "feed": 6,
    "start": 4,
    "stop": 2,
    "kill": 2,
    "pause-rewind": 1,
    "rewind": 2,
    "vacuum": 1,
    "verify": 2,
    "delete-metadata": 1,
    "rot-compact": 1,
    "rot-index": 1,
    "settle": 2,
    "downstream": 3,
    "takeover": 1,
}
#: Store faults a writer may start with: (op, path regex, action).
FAULTS = [
    ("createAtomic", r"_spark_metadata/\d+$", "fail"),
    ("rename", r"_spark_metadata/\d+(\.compact)?$", "fail"),
    ("rename", r"_spark_metadata/\d+(\.compact)?$", "lose"),
    ("delete", r"_spark_metadata/\d+$", "fail"),
    ("list", r"_spark_metadata$", "fail"),
    ("rename", r"_spark_metadata/\d+\.compact$", "stall"),
    ("createAtomic", r"_spark_metadata/\d+$", "stall"),
    ("list", r"_spark_metadata$", "stall"),
]


#: Store faults of the object store's test server a writer may start with (``s3_server.py``,
#: ``gcs_proxy.py``: the same names): a publish applied with its answer lost (once, or with the
#: retries' too), or failing unapplied.
S3_FAULTS = [
    {"lose_answer": r"/out/_spark_metadata/\d+$"},
    {"lose_answer": r"/out/_spark_metadata/\d+\.compact$", "lose_answer_times": 3},
    {"fail_publish": r"/out/_spark_metadata/\d+$"},
]


#: On an object store every compaction from the second is made by the store (S3: a copy of
#: ranges; GCS: a compose), however small the sink, so that kills and faults meet it.
STORE_CONFS = {"spark.batchlog.compaction.serverSideMinBytes": "0"}


class Violation(Exception):
    pass


class WorldEnds(Exception):
    """The world can no longer be checked against the model, by design: the campaign goes on with
    a new one (the reason is counted)."""


class Store(StoreServer):  # type: ignore[misc]  # tests/ is not type-checked from bench/
    """The object store's test server of a run: one bucket per world. Google's connector retries a
    failed request ten times over two minutes: here twice, so that a publish failing unapplied
    fails soon."""

    def inject(self, faults: dict[str, Any] | None) -> None:
        self.faults.write_text(json.dumps(faults or {}))

    @property
    def hadoop(self) -> dict[str, str]:
        retries = {"fs.gs.http.max.retry": "2"} if self.kind == "gcs" else {}
        return {**super().hadoop, **retries}


@dataclass
class World:
    """A sink, its checkpoint and input in a fresh directory, the writer process, the model."""

    root: Path
    spark: Any
    #: where the sink and its checkpoints live: ``file:<root>``, ``s3a://<bucket>``, ``gs://...``
    base: str
    s3: Store | None = None
    fed: list[int] = field(default_factory=list)
    #: ids a new owner's first batches read, which the sink skips by design (never in it)
    skipped: list[int] = field(default_factory=list)
    next_file: int = 0
    writer: subprocess.Popen[bytes] | None = None
    damaged: bool = False
    #: the lowest upstream batch rewound since the downstream last ran to the end
    up_rewound: int | None = None
    #: the takeovers so far: the writing query's input and checkpoint are those of the latest
    owners: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    #: milliseconds spent per operation kind, and in the checks after them
    ms: Counter[str] = field(default_factory=Counter)
    #: the sinks a step may have changed since their last check ("up", "down")
    dirty: set[str] = field(default_factory=lambda: {"up", "down"})

    @property
    def inp(self) -> Path:
        return self.root / ("in" if self.owners == 0 else f"in-{self.owners}")

    @property
    def out(self) -> str:
        return f"{self.base}/out"

    @property
    def chk(self) -> str:
        return f"{self.base}/" + ("chk" if self.owners == 0 else f"chk-{self.owners}")

    @property
    def down_out(self) -> str:
        """The downstream hop's sink, on the local disk: a ``batchlog``-source reader of ``out``."""
        return f"file:{self.root}/down-out"

    @property
    def down_chk(self) -> Path:
        return self.root / "down-chk"

    @property
    def fs(self) -> RemoteFs:
        return RemoteFs(self.spark, self.base)

    @property
    def hadoop(self) -> dict[str, str]:
        """What a plain reader needs to reach the store."""
        return self.s3.hadoop if self.s3 else {}

    @property
    def control(self) -> Path:
        return self.root / "control"

    @property
    def outside(self) -> Path:
        return self.root / "outside"


def _writer_cmd(w: World, fault: tuple[str, str, str] | None) -> list[str]:
    confs = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.batchlog.writer.leaseTimeout": LEASE,
        **SINK_CONFS,
    }
    jars = batchlog.jar_path()
    if fault is not None:
        jars += "," + testkit_jar_path()
        op, regex, action = fault
        confs.update(
            {
                "spark.hadoop.spark.sql.streaming.checkpointFileManagerClass": FAULT_MANAGER,
                "spark.hadoop.spark.batchlog.test.fault.op": op,
                "spark.hadoop.spark.batchlog.test.fault.pathRegex": regex,
                "spark.hadoop.spark.batchlog.test.fault.action": action,
                "spark.hadoop.spark.batchlog.test.fault.times": "1",
                "spark.hadoop.spark.batchlog.test.fault.stallMs": "6000",
            }
        )
    confs.update({f"spark.hadoop.{k}": v for k, v in w.hadoop.items()})
    confs.update(STORE_CONFS if w.s3 else {})
    cmd = [spark_submit(), "--master", "local[2]", "--jars", jars]
    if w.s3:
        cmd += ["--driver-class-path", w.s3.classpath]
    for k, v in confs.items():
        cmd += ["--conf", f"{k}={v}"]
    return (
        cmd
        + [str(APPS / "live_writer_app.py"), str(w.inp), str(w.out), str(w.chk)]
        + [str(w.control)]
    )


def _running(w: World) -> bool:
    return w.writer is not None and w.writer.poll() is None


def _kill(w: World) -> None:
    if _running(w):
        assert w.writer is not None
        os.killpg(w.writer.pid, signal.SIGKILL)
    _reap(w, 60)


def _reap(w: World, timeout: float = 300) -> None:
    """Waits for the writer to end; the store's faults end with it."""
    if w.writer is not None:
        if w.writer.poll() is None:
            w.writer.wait(timeout=timeout)
        w.writer = None
    if w.s3:
        w.s3.inject(None)


def _latest(w: World) -> int:
    latest = batchlog.SinkLog(w.spark, str(w.out)).latest_batch() if _is_sink(w) else None
    return -1 if latest is None else int(latest)


def _is_sink(w: World, out: str | None = None) -> bool:
    out = w.out if out is None else out
    return bool(RemoteFs(w.spark, out).exists(f"{out}/_spark_metadata"))


def apply(w: World, op: dict[str, Any]) -> bool:
    """Carries out one operation (its random choices are in ``op``, so a replay repeats them);
    False if the world did not allow it (a kill with no writer running, say)."""
    kind = op["op"]
    spark = w.spark
    if kind == "feed":
        w.fed += write_input(w.inp, w.next_file, op["n"], ROWS)
        w.next_file += op["n"]
    elif kind == "start" and not _running(w):
        _reap(w)
        (w.control / "stop").unlink(missing_ok=True)
        fault = (op["fault"][0], op["fault"][1], op["fault"][2]) if op.get("fault") else None
        if w.s3:
            w.s3.inject(op.get("s3_fault"))
        with open(w.root / "writer.log", "ab") as log:
            w.writer = subprocess.Popen(
                _writer_cmd(w, fault),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYSPARK_PYTHON=PYTHON, PYSPARK_DRIVER_PYTHON=PYTHON),
                start_new_session=True,
            )
        time.sleep(op["settle_s"])
    elif kind == "stop" and w.writer is not None:
        (w.control / "stop").touch()
        _reap(w)
    elif kind == "kill" and w.writer is not None:
        time.sleep(op["after_s"])
        _kill(w)
    elif kind == "pause-rewind" and _running(w) and _is_sink(w) and not w.damaged:
        assert w.writer is not None
        os.killpg(w.writer.pid, signal.SIGSTOP)
        try:
            _rewind(w, op["frac"], op.get("cascade", False))
        finally:
            os.killpg(w.writer.pid, signal.SIGCONT)
    elif kind == "rewind" and not _running(w) and _is_sink(w) and not w.damaged:
        _reap(w)
        _rewind(w, op["frac"], op.get("cascade", False))
    elif kind == "vacuum" and _is_sink(w) and not w.damaged:
        batchlog.vacuum(spark, str(w.out), older_than="0s", dry_run=False, quiet=True)
    elif kind == "verify":
        w.dirty |= {"up", "down"}  # the check after this step is the verify, of both sinks
    elif kind == "delete-metadata" and not _running(w) and _is_sink(w):
        _reap(w)
        w.fs.delete(f"{w.out}/_spark_metadata")
        report = batchlog.verify(spark, str(w.out)) if _is_sink(w) else None
        if report is not None and report.healthy:
            raise Violation("verify called a sink without its _spark_metadata healthy")
        w.damaged = True
    elif kind == "rot-compact" and not _running(w) and _is_sink(w) and not w.damaged:
        _reap(w)
        names = [n for n in w.fs.names(f"{w.out}/_spark_metadata") if n.endswith(".compact")]
        if not names:
            return False
        compact = f"{w.out}/_spark_metadata/" + max(names, key=lambda n: int(n.split(".")[0]))
        local = w.root / "rot" / "x.compact"
        local.parent.mkdir(exist_ok=True)
        local.write_bytes(w.fs.read_bytes(compact))
        batches = [int(x.split("}")[0]) for x in local.read_text().split('"batchId":')[1:]]
        rot_compact(local, batches[0], "size")
        w.fs.delete(compact)  # and its checksum file, as bit rot would leave it unmatched
        w.fs.write_bytes(compact, local.read_bytes())
        if batchlog.verify(spark, str(w.out)).healthy:
            raise Violation(f"verify called {compact} healthy after bit rot")
        w.damaged = True
    elif kind == "rot-index" and not _running(w) and _is_sink(w) and not w.damaged:
        _reap(w)
        meta = f"{w.out}/_spark_metadata"
        names = [n for n in w.fs.names(meta) if n.endswith(".compact.index")]
        if not names:
            return False
        index = f"{meta}/" + max(names, key=lambda n: int(n.split(".")[0]))
        data = bytearray(w.fs.read_bytes(index))
        data[op["at"] * len(data) // 100] ^= 0x10  # one bit, anywhere in the file
        w.fs.delete(index)
        w.fs.write_bytes(index, bytes(data))
        if batchlog.verify(spark, str(w.out)).healthy:
            raise Violation(f"verify called {index} healthy after bit rot")
        w.damaged = True
    elif kind == "settle":
        _settle(w)
    elif kind == "downstream" and _is_sink(w) and not w.damaged and _plain_ids(w):
        _downstream(w)
    elif kind == "takeover" and _is_sink(w) and not w.damaged and _latest(w) >= 0:
        _takeover(w, op["kill"])
    else:
        return False
    if kind in ("delete-metadata", "rot-compact", "rot-index") and w.damaged:
        _repair(w)
    if kind == "downstream":
        w.dirty.add("down")
    elif kind not in ("feed", "verify"):
        w.dirty |= {"up", "down"}
    return True


def _downstream(w: World) -> None:
    """Runs the downstream hop to the end of the upstream sink, here: a ``batchlog``-source
    reader (two upstream batches a trigger). Stopped by an upstream rewind below what it read, it
    is rewound as its runbook says (docs/runbook/upstream-rewound.md), then run again."""
    try:
        _run_downstream(w)
    except batchlog.UpstreamRewoundError as e:
        if w.up_rewound is None:
            raise Violation(f"the downstream stopped with no upstream rewind: {e}") from None
        w.counts["downstream: rewound after its upstream"] += 1
        batchlog.rewind(
            w.spark, str(w.down_out), str(w.down_chk), _down_batch(w, w.up_rewound), quiet=True
        )
        _run_downstream(w)
    w.up_rewound = None


def _run_downstream(w: World) -> None:
    spark = w.spark
    with session_conf(spark, {**SINK_CONFS, "spark.sql.streaming.schemaInference": "true"}):
        q = (
            spark.readStream.format("batchlog")
            .option("maxBatchesPerTrigger", 2)
            .load(str(w.out))
            .writeStream.format("parquet")
            .option("checkpointLocation", str(w.down_chk))
            .trigger(availableNow=True)
            .start(str(w.down_out))
        )
        try:
            batchlog.await_query(q, 300)
        finally:
            if q.isActive:
                q.stop()


def _down_batch(w: World, up_batch: int) -> int:
    """The downstream's first batch that read upstream batch ``up_batch`` or later: its
    ``offsets/N`` record the upstream batch read up to."""
    offsets = sorted(int(p.name) for p in (w.down_chk / "offsets").iterdir() if p.name.isdigit())
    for n in offsets:
        last = (w.down_chk / "offsets" / str(n)).read_text().strip().splitlines()[-1]
        if json.loads(last)["batchId"] >= up_batch:
            return n
    return offsets[-1] + 1 if offsets else 0


def _takeover(w: World, kill: bool) -> None:
    """A new query (its own input and checkpoint) replaces the writer, stopped or killed: the
    old one's input is first run to its end; the takeover moves the sink; the new query's first
    batches, up to the sink's latest, are skipped by the sink (its ids: ``w.skipped``)."""
    if kill:
        _kill(w)
    _settle(w)
    latest = _latest(w)
    w.owners += 1
    before = w.next_file
    w.skipped += write_input(w.inp, w.next_file, latest + 1, ROWS)
    w.next_file += latest + 1
    try:  # its first start is refused before its batch 0, as the runbook says
        run_stream(w.spark, w.inp, w.out, w.chk)
    except Exception as e:
        if "the sink is written by another query" not in str(e):
            raise
    else:
        raise Violation("a new query wrote a sink another query owns")
    report = batchlog.takeover(w.spark, str(w.out), str(w.chk))
    if report.skipped_batches != latest + 1:  # batches 0..latest of a new checkpoint
        raise Violation(
            f"takeover reports {report.skipped_batches} batches skipped, not {latest + 1}"
        )
    # The new owner's skipped batches run here, one file each, so that the ids they read are the
    # ones the model set aside: a writer killed among them could plan two files in one batch on
    # its restart (Spark's file source adds the files it logged before the kill), and the sink
    # would skip a fed file with them, by design.
    run_stream(w.spark, w.inp, w.out, w.chk)
    print(f"[chaos] takeover: owner {w.owners}, files {before}.. skipped", flush=True)


def _rewind(w: World, frac: float, cascade: bool = False) -> None:
    """Rewinds the sink to a batch between its horizon and its latest; a cascade rewinds the
    downstream with it (which must then run on without ``UPSTREAM_REWOUND``), a plain rewind
    leaves the downstream to its runbook."""
    spark = w.spark
    latest = _latest(w)
    if latest < 0:
        return
    horizon = batchlog.SinkLog(spark, str(w.out)).inspect(str(w.chk)).horizon.horizon
    to = horizon + int(frac * (latest + 1 - horizon))
    with session_conf(spark, {"spark.batchlog.writer.fenceWait": "lease"}):
        try:
            if cascade:
                batchlog.rewind(spark, str(w.out), str(w.chk), to, quiet=True, cascade=True)
            else:
                batchlog.rewind(spark, str(w.out), str(w.chk), to, quiet=True)
        except batchlog.WriterActiveError:
            return  # a live writer refused it: as it must
    if not cascade:
        _rewound(w, to)


def _rewound(w: World, to: int) -> None:
    w.up_rewound = to if w.up_rewound is None else min(w.up_rewound, to)


def _repair(w: World) -> None:
    """Repairs the sink as its runbook says: a batch with files of two attempts (which no log
    tells apart any more) is then rewound, so that it runs again, once."""
    spark = w.spark
    report = batchlog.repair(spark, str(w.out), dry_run=False, quiet=True)
    w.damaged = False
    print(f"[chaos] repaired; suspect batches {report.suspect_batches}", flush=True)
    if report.suspect_batches:
        w.counts["repair: suspect batches rewound"] += 1
        to = min(report.suspect_batches)
        try:
            batchlog.rewind(spark, str(w.out), str(w.chk), to, quiet=True)
        except batchlog.BeyondHorizonError:
            # the batches with two attempts' files were written by a query that has since handed
            # the sink over: no checkpoint can replay them, and their rows may be there twice
            raise WorldEnds("repair: suspect batches below a takeover") from None
        _rewound(w, to)


def _settle(w: World) -> None:
    """Stops the writer, runs the query to the end of its input here, checks exactly once."""
    if _running(w):
        (w.control / "stop").touch()
    _reap(w)
    if w.damaged:
        _repair(w)
    run_stream(w.spark, w.inp, w.out, w.chk)
    _exactly(w, "the sink", _plain_ids(w))
    if _plain_ids(w):
        _downstream(w)
        _exactly(w, "the downstream", _plain_ids(w, w.down_out))


def _exactly(w: World, what: str, ids: list[int]) -> None:
    if sorted(ids) != sorted(w.fed):
        missing = sorted(set(w.fed) - set(ids))[:10]
        extra = [i for i, n in Counter(ids).items() if n > 1][:10]
        raise Violation(f"after settle, {what}: missing {missing}, twice {extra}, of {len(w.fed)}")


def _plain_ids(w: World, out: str | None = None) -> list[int]:
    """The ids plain Spark reads from a sink (``out``, the upstream by default; none while its log
    lists no file: Spark cannot infer a schema from no file)."""
    out = w.out if out is None else out
    if not _is_sink(w, out):
        return []
    log = batchlog.SinkLog(w.spark, out)
    if not any(log.files(b) for b in log.batches()):
        return []
    return list(plain_read(out, hadoop=w.hadoop)["ids"])


def check(w: World) -> None:
    """What must hold after every step, whatever ran (a sink no step changed since its last
    check is not read again: the same files give the same answers)."""
    spark = w.spark
    for sentinel in _sentinels(w):
        fs = RemoteFs(spark, sentinel)
        if not fs.exists(sentinel) or fs.read_bytes(sentinel) != b"outside":
            raise Violation(f"{sentinel} changed: something outside the sink was touched")
    if not _is_sink(w) or _running(w):
        return  # a running writer's sink is checked at its next stop
    if "up" in w.dirty:
        report = batchlog.verify(spark, str(w.out))
        if report.healthy == w.damaged:
            raise Violation(f"verify says healthy={report.healthy}, damage pending={w.damaged}")
    if w.damaged:
        return
    for key, out in (("up", w.out), ("down", w.down_out)):
        if key not in w.dirty or not _is_sink(w, out):
            continue
        if out != w.out and not batchlog.verify(spark, str(out)).healthy:
            raise Violation(f"verify calls the downstream {out} unhealthy")
        ids = _plain_ids(w, out)
        twice = [i for i, n in Counter(ids).items() if n > 1]
        if twice or not set(ids) <= set(w.fed):
            raise Violation(
                f"plain Spark reads {out}: twice {twice[:10]}, not fed or skipped by design "
                f"{sorted(set(ids) - set(w.fed))[:10]}"
            )
        log = batchlog.SinkLog(spark, out)
        existing = set(RemoteFs(spark, out).files(out))
        for b in log.batches():
            for f in log.files(b):
                if f"-batch-{b}-" not in f or _qualified(f) not in existing:
                    raise Violation(f"files({b}) of {out} lists {f}")
    w.dirty.clear()


def _qualified(logged: str) -> str:
    """A logged path as a listing names it: ``file:///x`` (Spark's SparkPath) as ``file:/x``."""
    return "file:" + unquote(logged[len("file://") :]) if logged.startswith("file://") else logged


def _sentinels(w: World) -> list[str]:
    """Files nothing may touch: beside the sink on its store, and (local disk) behind a link
    inside the output."""
    return [f"{w.base}/outside/keep.txt"] + ([] if w.s3 else [f"file:{w.outside}/keep.txt"])


def new_world(spark: Any, s3: Store | None) -> World:
    """A fresh world: the sink's store with a sentinel beside the sink (and, on the local disk, a
    link from the output to another), which nothing may touch."""
    root = Path(tempfile.mkdtemp(prefix="batchlog-chaos-"))
    if s3:
        bucket = f"chaos-{root.name.split('-')[-1].lower().replace('_', '0')}"
        w = World(root, spark, s3.bucket(bucket), s3)
    else:
        w = World(root, spark, f"file:{root}")
    for d in (w.inp, w.control, w.outside):
        d.mkdir(parents=True)
    for sentinel in _sentinels(w):
        RemoteFs(spark, sentinel).write_bytes(sentinel, b"outside")
    if not s3:
        (root / "out").mkdir()
        (root / "out" / "outside-link").symlink_to(w.outside, target_is_directory=True)
    return w


def plan(seed: int, n: int) -> list[dict[str, Any]]:
    """``n`` operations drawn from the menu with ``seed``: a value, replayed as it is."""
    rng = random.Random(seed)
    kinds, weights = list(MENU), list(MENU.values())
    ops: list[dict[str, Any]] = []
    for _ in range(n):
        kind = rng.choices(kinds, weights)[0]
        op: dict[str, Any] = {"op": kind}
        if kind == "feed":
            op["n"] = rng.randint(1, 3)
        elif kind == "start":
            op["fault"] = list(rng.choice(FAULTS)) if rng.random() < 0.3 else None
            op["s3_fault"] = rng.choice(S3_FAULTS) if rng.random() < 0.3 else None
            op["settle_s"] = round(rng.uniform(1, 8), 1)
        elif kind == "kill":
            op["after_s"] = round(rng.uniform(0, 4), 1)
        elif kind in ("rewind", "pause-rewind"):
            op["frac"] = round(rng.random(), 2)
            op["cascade"] = rng.random() < 0.5
        elif kind == "takeover":
            op["kill"] = rng.random() < 0.5
        elif kind == "rot-index":
            op["at"] = rng.randrange(100)
        ops.append(op)
    return ops


def run(
    spark: Any, ops: list[dict[str, Any]], deadline: float, s3: Store | None
) -> tuple[int, World, str | None]:
    """Applies ``ops`` in a fresh world (on ``s3``'s server if given) until one violates the model
    or ``deadline`` passes: how many ran, the world, and the violation (None: none)."""
    w = new_world(spark, s3)
    done = 0
    try:
        for op in ops:
            if time.monotonic() > deadline:
                break
            t0 = time.monotonic()
            applied = apply(w, op)
            t1 = time.monotonic()
            check(w)
            w.counts[_label(op, w) if applied else "(not possible then)"] += 1
            w.ms[op["op"] if applied else "(not possible then)"] += round((t1 - t0) * 1000)
            w.ms["(checks)"] += round((time.monotonic() - t1) * 1000)
            done += 1
            if WORLD_BATCHES and not _running(w) and _is_sink(w) and _latest(w) >= WORLD_BATCHES:
                # a bounded world: every check costs what a small sink costs, not a growing one
                _settle(w)
                check(w)
                w.counts[f"(world ended: {WORLD_BATCHES} batches, settled)"] += 1
                return done, w, None
        if time.monotonic() <= deadline:
            _settle(w)
            check(w)
        return done, w, None
    except Violation as v:
        return done + 1, w, str(v)
    except WorldEnds as e:
        w.counts[f"(world ended: {e})"] += 1
        return done + 1, w, None
    except Exception as e:  # an operation that fails where the model says it works
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return done + 1, w, f"{type(e).__name__}: {first[:600]}"
    finally:
        _kill(w)


def _label(op: dict[str, Any], w: World) -> str:
    """The operation as counted: with the store fault its writer started with."""
    faults = []
    if op.get("fault"):
        faults.append(f"{op['fault'][0]} {op['fault'][2]}")
    if w.s3 and op.get("s3_fault"):
        kind = str(next(iter(op["s3_fault"])))
        times = op["s3_fault"].get("lose_answer_times")
        faults.append(f"{w.s3.kind.upper()} {kind}" + (f" x{times}" if times else ""))
    name = str(op["op"]) + (" --cascade" if op.get("cascade") else "")
    return name + (f" ({', '.join(faults)})" if faults else "")


def shrink(
    spark: Any, ops: list[dict[str, Any]], minutes: float, s3: Store | None
) -> list[dict[str, Any]]:
    """Drops operations one at a time, last first, while the run still fails."""
    end = time.monotonic() + minutes * 60
    i = len(ops) - 1
    while i >= 0 and time.monotonic() < end:
        trial = ops[:i] + ops[i + 1 :]
        _, w, failed = run(spark, trial, end, s3)
        shutil.rmtree(w.root, ignore_errors=True)
        if failed:
            ops = trial
        i -= 1
    return ops


def main() -> int:
    global WORLD_BATCHES
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--shrink-minutes", type=float, default=10.0)
    p.add_argument(
        "--world-batches",
        type=int,
        default=WORLD_BATCHES,
        help="end a world (settled, checked) once its sink has this many batches; 0: never",
    )
    p.add_argument("--replay", type=Path, help="a file of operations a failed run wrote")
    p.add_argument("--json", type=Path, help="where to write the run's counts")
    p.add_argument(
        "--store", choices=["local", "s3", "gcs"], default="local", help="where the sink lives"
    )
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="after a violation (shrunk, recorded), go on with a new world and the next seed",
    )
    args = p.parse_args()
    WORLD_BATCHES = args.world_batches
    spark = get_spark()
    s3 = None
    if args.store != "local":
        root = Path(tempfile.mkdtemp(prefix=f"batchlog-chaos-{args.store}-"))
        s3 = Store(**vars(start_store(args.store, root)))
        hconf = spark.sparkContext._jsc.hadoopConfiguration()
        for k, v in s3.hadoop.items():
            hconf.set(k, v)
    try:
        return campaign(spark, args, s3)
    finally:
        if s3:
            s3.stop()


def campaign(spark: Any, args: argparse.Namespace, s3: Store | None) -> int:
    """The runs main asked for: one, or with ``--keep-going`` one world after another (seed,
    seed + 1, ...) until the time is up, each violation shrunk and recorded; the exit code."""
    # the operations watch a lease they find for its timeout, as the CLI does
    confs = {**SINK_CONFS, "spark.batchlog.writer.leaseTimeout": LEASE}
    confs.update(STORE_CONFS if s3 else {})
    with session_conf(spark, {**confs, "spark.batchlog.writer.fenceWait": "lease"}):
        start = time.monotonic()
        deadline = start + args.minutes * 60
        counts: Counter[str] = Counter()
        ms: Counter[str] = Counter()
        violations: list[dict[str, Any]] = []
        seed, done = args.seed, 0
        while True:
            ops = json.loads(args.replay.read_text()) if args.replay else plan(seed, 100_000)
            n, w, failed = run(spark, ops, deadline, s3)
            done += n
            counts.update(w.counts)
            ms.update(w.ms)
            if failed is None:
                shutil.rmtree(w.root, ignore_errors=True)
            else:
                print(f"VIOLATION after {n} operations (seed {seed}): {failed}; world {w.root}")
                short = shrink(spark, ops[:n], args.shrink_minutes, s3)
                replay = Path(tempfile.mkdtemp(prefix="batchlog-chaos-replay-")) / "ops.json"
                replay.write_text(json.dumps(short, indent=1))
                command = f"bench/run chaos --store {args.store} --replay {replay}"
                print(f"shortest failing list: {len(short)} operations, in {replay}")
                print(f"replay: {command}")
                violations.append(
                    {"seed": seed, "after": n, "violation": failed, "shortest": len(short)}
                    | {"replay": command}
                )
            minutes = (time.monotonic() - start) / 60
            print(
                f"[chaos] world of seed {seed} ended after {n} operations; {done} in "
                f"{minutes:.0f} of {args.minutes:.0f} min, {len(violations)} violations",
                flush=True,
            )
            if not args.keep_going or args.replay or time.monotonic() > deadline:
                break
            seed += 1
        summary = {
            "seed": args.seed,
            "seeds": seed - args.seed + 1,
            "store": args.store,
            "operations": done,
            "seconds": round(time.monotonic() - start),
            "counts": dict(sorted(counts.items())),
            "seconds_by_operation": {k: round(v / 1000) for k, v in sorted(ms.items())},
            "violations": violations,
        }
        print(json.dumps(summary, indent=1))
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1))
        return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
