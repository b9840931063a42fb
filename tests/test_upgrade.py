"""Upgrade and downgrade through earlier versions of batchlog, built from this repository's history
(issue 44): a sink and its stateful query's checkpoint go from an earlier version to this one and
back, and plain Spark reads every row exactly once at each step.

Each earlier version is a commit where the on-disk format changed (docs/compatibility.md), built
by ``dev/old-version`` (its jar and its Python package, cached in ``.tools/old-versions``) and run
in a process of its own (``apps/versioned_app.py``), this version in the suite's session:

1. the earlier version writes batches 0..5 (compactions 2 and 5: its indexes, its records);
2. this version continues: 6..8 (compaction 8 writes a ``v3`` index), reads an old batch by batch,
   rewinds into the old batches (to 3), and runs them again;
3. the earlier version again: it continues 9..11 over this version's files, reads one of this
   version's batches, rewinds into them (to 6), runs again, and verifies;
4. this version reads it all: plain Spark, verify, ``batchlog.arrow`` against the JVM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from batchlog import arrow
from conftest import COMPACT_INTERVAL_KEY, batch_rows, drop_inputs, read_back_plain, subprocess_env
from pyspark.sql import SparkSession
from storage_support import start_query
from support import REPO, await_query, batchlog, session_conf

#: The earlier versions, each where the format changed, and what it writes.
OLD_VERSIONS = {
    "e6bcc2d~1": "records in _spark_metadata/, compact indexes v2",
    "9e0be13~1": "records in _batchlog/, compact indexes v2",
}
APP = REPO / "tests" / "apps" / "versioned_app.py"


@pytest.fixture(scope="module", params=list(OLD_VERSIONS))
def old(request: pytest.FixtureRequest) -> Path:
    known = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{request.param}^{{commit}}"],
        capture_output=True,
    )
    if known.returncode != 0:  # a shallow clone: the history is not there to build from
        pytest.skip(f"{request.param} is not in this clone's history (a shallow clone?)")
    built = subprocess.run(
        [str(REPO / "dev" / "old-version"), request.param],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return Path(built.stdout.strip())


def _old_steps(old: Path, steps: list[dict[str, Any]]) -> list[Any]:
    """The steps run by the earlier version ``old``, in a process of its own: their results."""
    done = subprocess.run(
        [sys.executable, str(APP), json.dumps(steps)],
        env=subprocess_env({"PYTHONPATH": str(old / "python")}),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert lines[0]["package"].startswith(str(old)), lines[0]  # the earlier version ran
    assert lines[0]["jar"].startswith(str(old)), lines[0]
    return [next(iter(x.values())) for x in lines[1:]]


def _ids(batches: range) -> list[int]:
    return sorted(b * 100 + i for b in batches for i in range(4))


def _plain_ids(out: Path) -> list[int]:
    [read] = read_back_plain([("parquet", str(out))])
    return sorted(int(r["id"]) for r in read["rows"])


def test_a_sink_goes_up_to_this_version_and_back(
    spark: SparkSession, old: Path, tmp_path: Path
) -> None:
    inbox, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    meta = out / "_spark_metadata"

    def feed(batches: range) -> None:
        drop_inputs(inbox, {b: batch_rows(b, 2) for b in batches})

    def run_here() -> None:
        with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
            await_query(start_query(spark, inbox, str(out), str(chk), stateful=True), out)

    # 1. the earlier version writes 0..5
    feed(range(6))
    assert _old_steps(old, [{"run": [str(inbox), str(out), str(chk)]}]) == [list(range(6))]
    assert (meta / "5.compact.index").read_text().startswith("batchlog-index v2\n")
    assert _plain_ids(out) == _ids(range(6))

    # 2. this version: continues, reads an old batch, rewinds into the old batches, runs again
    feed(range(6, 9))
    run_here()
    assert (meta / "8.compact.index").read_text().startswith("batchlog-index v3 ")
    assert (out / "_batchlog" / "_batchlog-sink.json").is_file()  # the record where this keeps it
    assert _plain_ids(out) == _ids(range(9))
    by_batch = spark.read.format("batchlog").option("batches", "4-4").load(str(out))
    assert sorted(int(r.id) for r in by_batch.collect()) == _ids(range(4, 5))
    batchlog.rewind(spark, str(out), str(chk), to_batch=3, quiet=True)
    assert _plain_ids(out) == _ids(range(3))
    run_here()
    assert _plain_ids(out) == _ids(range(9))

    # 3. the earlier version again, over this version's files: continues, reads one of this
    # version's batches, rewinds into them, runs again, verifies
    feed(range(9, 12))
    results = _old_steps(
        old,
        [
            {"run": [str(inbox), str(out), str(chk)]},
            {"read": [str(out), "7-7"]},
            {"rewind": [str(out), str(chk), 6]},
            {"run": [str(inbox), str(out), str(chk)]},
            {"verify": str(out)},
        ],
    )
    assert results == [[9, 10, 11], _ids(range(7, 8)), 6, list(range(6, 12)), True]
    assert _plain_ids(out) == _ids(range(12))

    # 4. this version reads what the earlier one left
    assert batchlog.verify(spark, str(out)).healthy
    jvm = batchlog.SinkLog(spark, str(out))
    assert jvm.batches() == list(range(12))
    log = arrow.SinkLog(str(out))
    assert log.batches() == list(range(12))
    for b in range(12):
        assert sorted(log.files(b)) == sorted(jvm.files(b)), b
