"""Integrity of the compact-file index (``N.compact.index``) under damage, end to end.

A damaged index must never be trusted: readers rebuild it in memory and still return exactly each
batch's files, ``verify`` names the damage (unhealthy), the query continues through a compaction
that never copies through it (plain Spark then reads exactly the expected rows), and ``repair``
rewrites just that index. Real Spark, real files; one pristine sink per module, restored per case.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import read_back_plain
from pyspark.sql import SparkSession
from reliability_support import (
    SINK_CONFS,
    TAGGED,
    batchlog,
    check_log,
    local_path,
    run_stream,
    snapshot,
    spark_session,
    sql_conf,
    write_input,
)

spark = spark_session  # the module's session fixture

ROWS_PER_FILE = 4
TRUNCATED = "it is truncated"


@pytest.fixture(scope="module")
def base(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``work``: a sink of 8 batches (2.compact, 5.compact, 6, 7), interval 3, with its input and
    checkpoint; ``saved``: a copy of it. Every logged path names ``work``, so each case restores
    ``work`` from ``saved`` and can continue the query from its checkpoint."""
    root = tmp_path_factory.mktemp("index")
    work = root / "work"
    write_input(work / "in", 0, 8, ROWS_PER_FILE)
    run_stream(spark, work / "in", work / "out", work / "chk")
    assert check_log(work / "out", 3)["latest"] == 7
    with sql_conf(spark, **SINK_CONFS):
        assert batchlog.verify(spark, str(work / "out"))["healthy"] is True
    shutil.copytree(work, root / "saved")
    return root


@pytest.fixture
def sink(base: Path) -> Path:
    """The pristine sink, restored at ``work`` (same paths, same modification times)."""
    work = base / "work"
    shutil.rmtree(work)
    shutil.copytree(base / "saved", work)
    return work


def _overwrite(f: Path, data: bytes) -> None:
    """Replaces a file's bytes as a hand edit or bit rot would: its checksum sidecar goes."""
    f.write_bytes(data)
    f.with_name(f".{f.name}.crc").unlink(missing_ok=True)


def _nth_line_end(data: bytes, n: int) -> int:
    pos = -1
    for _ in range(n + 1):
        pos = data.index(b"\n", pos + 1)
    return pos


def _random_bytes(meta: Path, compact: str, other: str) -> str:
    _overwrite(meta / f"{compact}.index", random.Random(7).randbytes(300))
    return "its first line is not 'batchlog-index v3 <length>' or 'batchlog-index v2'"


def _truncated_mid_line(meta: Path, compact: str, other: str) -> str:
    data = (meta / f"{compact}.index").read_bytes()
    _overwrite(meta / f"{compact}.index", data[: _nth_line_end(data, 3) + 5])
    return TRUNCATED


def _truncated_at_line(meta: Path, compact: str, other: str) -> str:
    data = (meta / f"{compact}.index").read_bytes()
    _overwrite(meta / f"{compact}.index", data[: _nth_line_end(data, 4) + 1])
    return TRUNCATED


def _empty(meta: Path, compact: str, other: str) -> str:
    _overwrite(meta / f"{compact}.index", b"")
    return "it is empty"


def _other_compacts_index(meta: Path, compact: str, other: str) -> str:
    _overwrite(meta / f"{compact}.index", (meta / f"{other}.index").read_bytes())
    return f"it describes {other}, not {compact}"


DAMAGES: dict[str, Callable[[Path, str, str], str]] = {
    "random bytes": _random_bytes,
    "truncated mid-line": _truncated_mid_line,
    "truncated at a line boundary": _truncated_at_line,
    "empty": _empty,
    "another compact's index": _other_compacts_index,
}
# A compact file changed in place (same length and modification time) under a sound index is
# damage to the compact file, not to its index: test_integrity_bitrot.py.


def _on_disk_by_batch(out: Path) -> dict[int, set[Path]]:
    by_batch: dict[int, set[Path]] = {}
    for p in out.rglob("part-*.parquet"):
        if m := TAGGED.search(p.name):
            by_batch.setdefault(int(m.group(1)), set()).add(p)
    return by_batch


def _assert_files_exact(spark: SparkSession, out: Path, latest: int) -> None:
    """``SinkLog.files(b)`` is exactly batch b's data files, for every batch."""
    on_disk = _on_disk_by_batch(out)
    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == latest
    for b in range(latest + 1):
        files = log.files(b)
        assert len(files) == len(set(files)), f"batch {b}: a file is listed twice"
        assert {local_path(p) for p in files} == on_disk[b], f"batch {b}"


def _expected_rows(ids: list[int]) -> list[tuple[int, str, str]]:
    return sorted((i, f"p{i % 3}", "x" * 20) for i in ids)


def _assert_index_problem(report: dict, compact: str, reason: str) -> None:
    assert report["healthy"] is False and report["logErrors"] == [], report
    [problem] = report["indexProblems"]
    assert problem["file"].endswith(f"_spark_metadata/{compact}.index"), problem
    assert problem["problem"] == reason, problem
    assert "python -m batchlog repair" in report["indexAdvice"], report


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_damaged_index_is_never_trusted(spark: SparkSession, sink: Path, kind: str) -> None:
    out, inp, chk = sink / "out", sink / "in", sink / "chk"
    meta = out / "_spark_metadata"
    ids = [k * 1000 + i for k in range(8) for i in range(ROWS_PER_FILE)]
    damage = DAMAGES[kind]

    # The live compact file's index is damaged: reads rebuild it in memory and stay exact.
    reason = damage(meta, "5.compact", "2.compact")
    with sql_conf(spark, **SINK_CONFS):
        before = snapshot(out)
        _assert_files_exact(spark, out, 7)
        _assert_index_problem(batchlog.verify(spark, str(out)), "5.compact", reason)
        dry = batchlog.repair(spark, str(out), dry_run=True, quiet=True)
        assert dry["indexesOnly"] is True and dry["indexesRewritten"] == [], dry
        assert snapshot(out) == before, "a read, verify or dry run changed the sink"

    # The query continues through compaction 8, which must not copy through the damaged index.
    ids += write_input(inp, 8, 2, ROWS_PER_FILE)
    run_stream(spark, inp, out, chk)
    dead = frozenset({"5.compact.index"})  # still damaged, beside a compact file no longer live
    assert check_log(out, 3, junk=dead)["latest"] == 9
    [plain] = read_back_plain([("parquet", str(out))])
    got = sorted((int(r["id"]), str(r["part"]), str(r["payload"])) for r in plain["rows"])
    assert got == _expected_rows(ids)
    with sql_conf(spark, **SINK_CONFS):
        _assert_files_exact(spark, out, 9)
        assert batchlog.verify(spark, str(out))["healthy"] is True

        # The same damage to the new live index; repair rewrites exactly it, nothing else.
        reason = damage(meta, "8.compact", "2.compact")
        _assert_index_problem(batchlog.verify(spark, str(out)), "8.compact", reason)
        untouched = {k: v for k, v in snapshot(out).items() if "8.compact.index" not in k}
        r = batchlog.repair(spark, str(out), quiet=True)
        assert r["indexesOnly"] is True and r["written"] is False, r
        assert [Path(p).name for p in r["indexesRewritten"]] == ["8.compact.index"], r
        assert not list(sink.glob("out/_spark_metadata.*")), "repair rebuilt the whole log"
        after = snapshot(out)
        # the index and the repair's record in the sink's history are all that changed
        changed = ("8.compact.index", "_batchlog/_history/")
        assert {k: v for k, v in after.items() if not any(c in k for c in changed)} == untouched
        report = batchlog.verify(spark, str(out))
        assert report["healthy"] is True and report["indexProblems"] == [], report
        _assert_files_exact(spark, out, 9)
    check_log(out, 3, junk=dead)
