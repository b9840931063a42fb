"""Helpers for the reliability tests (crash, repair, vacuum, verify, bad input).

Real Spark, real files, real processes: nothing here mocks Spark or the file system.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from conftest import is_tagged_line
from plain_reader import READER
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support import (
    FAULT_MANAGER,
    REPO,
    await_query,
    batchlog,
    get_spark,
    jars_with_testkit,
    poll,
    run_cli,
    session_conf,
)

# test modules import these from here
__all__ = ["FAULT_MANAGER", "REPO", "batchlog", "jars_with_testkit", "poll", "run_cli"]

APPS = Path(__file__).resolve().parent / "apps"
PYTHON = sys.executable
LOG_NAME = re.compile(r"^(\d+)(\.compact)?$")
INDEX_NAME = re.compile(r"^(\d+\.compact)\.index$")
RECORD_NAME = re.compile(r"^batchlog-[a-z]+(\.[0-9]+)?\.json$")  # a record, a version claim
TAGGED = re.compile(
    r"part-\d+-batch-(\d+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)


@pytest.fixture(scope="module")
def spark_session() -> Iterator[SparkSession]:
    """The shared session with batchlog (not stopped: other modules reuse it)."""
    yield get_spark()


def spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def start_driver(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Starts a ``spark-submit`` command in its own process group (SIGKILL it with
    ``os.killpg``), its output appended to ``log``, with this venv's Python for PySpark."""
    env = dict(os.environ, PYSPARK_PYTHON=PYTHON, PYSPARK_DRIVER_PYTHON=PYTHON)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    with open(log, "ab") as f:
        return subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=REPO
        )


def write_input(inp: Path, first_file: int, n_files: int, rows_per_file: int) -> list[int]:
    """JSON input files ``in-<k>.json`` with ids k*1000+i; returns the ids written.

    File k's modification time is a fixed offset k from an hour ago, so the file source (which
    takes files oldest first, one per trigger here) reads file k as the k-th batch of the call.
    """
    inp.mkdir(parents=True, exist_ok=True)
    base = int(time.time()) - 3600
    ids = []
    for k in range(first_file, first_file + n_files):
        lines = []
        for i in range(rows_per_file):
            rid = k * 1000 + i
            ids.append(rid)
            lines.append(json.dumps({"id": rid, "part": f"p{rid % 3}", "payload": "x" * 20}))
        tmp = inp / f".in-{k:04d}.json.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        os.utime(tmp, (base + k, base + k))
        tmp.rename(inp / f"in-{k:04d}.json")  # the file source must never see a partial file
    return ids


def plain_read(
    out: Path | str, id_col: str = "id", hadoop: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The sink read back by plain Spark, in a process without the batchlog jar
    (``plain_reader.py``): ``{"rows": N, "ids": [...sorted...], "parts": {...}}``. ``hadoop``:
    the settings of an object store (``s3a://``)."""
    return READER.ids(out, id_col, hadoop)


def local_path(logged: str) -> Path:
    """A logged path (``file:///...``, URL-encoded as Spark's SparkPath writes it) as a Path."""
    u = urlparse(logged)
    assert u.scheme == "file", logged
    return Path(unquote(u.path))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` with its bytes (to assert that nothing changed)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def check_log(out: Path, compact_interval: int, junk: frozenset[str] = frozenset()) -> dict:
    """Checks ``out/_spark_metadata`` from the bytes on disk, independently of the JVM code.

    Every visible file is a complete log file (``v1`` header, one JSON entry per line); every
    entry is tagged with its batch (the file's batch for a batch file, the name's batch always);
    the live files (latest compact file and the batch files after it) are all present, and every
    live logged data file exists with the logged size. Returns ``latest`` and ``live`` entries.
    """
    meta = out / "_spark_metadata"
    ids: dict[int, bool] = {}
    for f in sorted(meta.iterdir()):
        if f.name.startswith(".") or f.name in junk or RECORD_NAME.match(f.name):
            continue  # batchlog's own records (sink record, writer lease, rewind intent)
        if mi := INDEX_NAME.match(f.name):  # batchlog's per-batch index of a compact file
            assert (meta / mi.group(1)).exists(), f"index without its compact file: {f}"
            assert f.read_text(encoding="utf-8").startswith("batchlog-index v3 "), f
            continue
        m = LOG_NAME.match(f.name)
        assert m, f"unexpected visible file in the log: {f}"
        bid, is_compact = int(m.group(1)), bool(m.group(2))
        assert not is_compact or (bid + 1) % compact_interval == 0, f"misplaced compact {f}"
        lines = f.read_text(encoding="utf-8").split("\n")
        assert lines[0] == "v1", f"{f}: header {lines[0]!r}"
        for n, line in enumerate(lines[1:], start=2):
            e = json.loads(line)  # a half-written line fails here
            assert is_tagged_line(e), f"{f}:{n}: {line}"
            name_batch = TAGGED.search(e["path"].rsplit("/", 1)[-1])
            assert name_batch and int(name_batch.group(1)) == e["batchId"], f"{f}:{n}: {line}"
            if not is_compact:
                assert e["batchId"] == bid, f"{f}:{n} is in batch file {bid}: {line}"
            else:
                assert e["batchId"] <= bid, f"{f}:{n}: {line}"
        ids[bid] = ids.get(bid, False) or is_compact
    if not ids:
        return {"latest": -1, "live": []}
    latest = max(ids)
    compacts = [i for i, c in ids.items() if c]
    base = max(compacts) if compacts else -1
    live_ids = ([base] if base >= 0 else []) + list(range(base + 1, latest + 1))
    live = []
    for i in live_ids:
        assert i in ids, f"log file {i} missing: the log lists {sorted(ids)}"
        name = f"{i}.compact" if i == base else str(i)
        for line in (meta / name).read_text(encoding="utf-8").split("\n")[1:]:
            e = json.loads(line)
            p = local_path(e["path"])
            assert p.is_file(), f"logged file missing: {p} (in {name})"
            assert p.stat().st_size == e["size"], f"size of {p} differs from the log"
            live.append(e)
    paths = [e["path"] for e in live]
    assert len(paths) == len(set(paths)), "a file is logged twice"
    return {"latest": latest, "live": live}


def sql_conf(spark: SparkSession, **kv: str) -> AbstractContextManager[None]:
    """Sets SQL confs (pass keys as ``**{"spark.x": "v"}``) for the block, then restores them."""
    return session_conf(spark, kv)


SINK_CONFS = {
    "spark.sql.streaming.fileSink.log.compactInterval": "3",
    "spark.sql.streaming.commitProtocolClass": "io.batchlog.BatchTaggedCommitProtocol",
}


def start_stream(
    spark: SparkSession,
    inp: Path,
    out: Path | str,
    chk: Path | str,
    partition_by: str = "part",
    every: str | None = None,
) -> StreamingQuery:
    """Starts the file source -> parquet sink query (one input file per batch): until all input
    present is processed, or with a trigger ``every`` (e.g. ``"200 milliseconds"``) until stopped.
    Call it, and wait for the query, inside ``sql_conf(spark, **SINK_CONFS)``: the sink reads
    some settings at every batch (the commit protocol), not once as the query starts."""
    writer = (
        spark.readStream.schema("id LONG, part STRING, payload STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(inp))
        .writeStream.format("parquet")
        .partitionBy(partition_by)
        .option("checkpointLocation", str(chk))
    )
    trigger = writer.trigger(processingTime=every) if every else writer.trigger(availableNow=True)
    return trigger.start(str(out))


def run_stream(
    spark: SparkSession, inp: Path, out: Path | str, chk: Path | str, partition_by: str = "part"
) -> None:
    """Runs the file source -> parquet sink query until all input present is processed
    (one input file per batch, compactInterval 3)."""
    with sql_conf(spark, **SINK_CONFS):
        await_query(start_stream(spark, inp, out, chk, partition_by), out)


def read_ids(spark: SparkSession, out: Path) -> list[int]:
    """The ``id``s plain Spark reads from the sink (through its log), sorted."""
    return sorted(r[0] for r in spark.read.parquet(str(out)).select("id").collect())
