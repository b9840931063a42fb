"""Bit rot in a compact file is never laundered (issue 23, part 1), end to end.

One character of an entry of the live ``5.compact`` changes (a uuid digit of its path, a digit of
its size or of its modification time), the file keeps its length and modification time and its
JSON stays valid. ``verify`` names the damage (file, batch, bytes); the query's next batch, a
compaction, fails with ``CORRUPT_LOG`` and publishes nothing; ``repair`` restores exactly the
damaged batch's entries (from its batch file, or from the data files when the batch file is gone:
all but the batch's commit record, which no data file holds);
the query restarts and continues through another compaction, and plain Spark reads every row
exactly once. Real Spark, real files; one pristine sink per module, restored per case.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import read_back_plain
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from reliability_support import (
    SINK_CONFS,
    batchlog,
    check_log,
    run_stream,
    snapshot,
    spark_session,
    sql_conf,
    write_input,
)
from support import cli_here, rot_compact

spark = spark_session  # the module's session fixture

ROWS_PER_FILE = 4
DAMAGED = 4  # a batch whose lines are in 5.compact (compacts 2, 5 at interval 3)


@pytest.fixture(scope="module")
def base(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``work``: a sink of 8 batches (2.compact, 5.compact, 6, 7), interval 3, with its input and
    checkpoint; ``saved``: a copy of it (every logged path names ``work``)."""
    root = tmp_path_factory.mktemp("bitrot")
    work = root / "work"
    write_input(work / "in", 0, 8, ROWS_PER_FILE)
    run_stream(spark, work / "in", work / "out", work / "chk")
    assert check_log(work / "out", 3)["latest"] == 7
    shutil.copytree(work, root / "saved")
    return root


@pytest.fixture
def sink(base: Path) -> Path:
    """The pristine sink, restored at ``work`` (same paths, same modification times)."""
    work = base / "work"
    shutil.rmtree(work)
    shutil.copytree(base / "saved", work, copy_function=shutil.copy2)
    return work


def _run_bytes(meta: Path) -> tuple[int, int, int]:
    """(offset, end, count) of batch ``DAMAGED``'s run, from ``5.compact.index`` (``v3``: a run
    line has five fields, a ``block`` line nine, the ``compact`` and ``checksum`` lines others)."""
    for line in (meta / "5.compact.index").read_text(encoding="utf-8").splitlines()[2:]:
        fields = line.split()
        if len(fields) == 5 and fields[0] == str(DAMAGED):
            _, off, length, count, _ = fields
            return int(off), int(off) + int(length), int(count)
    raise AssertionError("no run of the damaged batch")


def _expected_rows(ids: list[int]) -> list[tuple[int, str, str]]:
    return sorted((i, f"p{i % 3}", "x" * 20) for i in ids)


def _plain_rows(out: Path) -> list[tuple[int, str, str]]:
    [plain] = read_back_plain([("parquet", str(out))])
    return sorted((int(r["id"]), str(r["part"]), str(r["payload"])) for r in plain["rows"])


CASES = [
    # (field changed, batch file kept: the source repair restores from)
    ("path", False),
    ("size", True),
    ("modificationTime", False),
]


@pytest.mark.parametrize(("field", "batch_file_kept"), CASES)
def test_bit_rot_is_refused_and_repaired(
    spark: SparkSession, sink: Path, field: str, batch_file_kept: bool
) -> None:
    out, inp, chk = sink / "out", sink / "in", sink / "chk"
    meta = out / "_spark_metadata"
    ids = [k * 1000 + i for k in range(8) for i in range(ROWS_PER_FILE)]
    original = (meta / "5.compact").read_bytes()
    start, end, count = _run_bytes(meta)
    rot_compact(meta / "5.compact", DAMAGED, field)
    if not batch_file_kept:
        (meta / str(DAMAGED)).unlink()
        meta.joinpath(f".{DAMAGED}.crc").unlink(missing_ok=True)
    damage = (
        f"_spark_metadata/5.compact is damaged: the bytes of batch {DAMAGED} "
        f"(bytes {start}..{end}) do not match the CRC32C its index "
    )
    way_out = f"Stop the query and run `python -m batchlog repair file:{out}`"

    # verify: unhealthy, naming the file, the batch and its bytes, and the way out.
    with sql_conf(spark, **SINK_CONFS):
        report = batchlog.verify(spark, str(out))
    assert report.healthy is False
    [error] = report.log_errors
    assert damage in error and way_out in error, error
    [run] = report.damaged_runs
    assert (run.compact_id, run.batch_id, run.offset, run.offset + run.length, run.entries) == (
        5,
        DAMAGED,
        start,
        end,
        count,
    )
    assert report.index_problems == [] and report.missing_count == 0, report
    assert report.size_mismatch_count == 0, report

    # The next batch compacts (8.compact) and refuses: CORRUPT_LOG, nothing published.
    ids += write_input(inp, 8, 2, ROWS_PER_FILE)
    with pytest.raises(StreamingQueryException) as e:
        run_stream(spark, inp, out, chk)
    assert damage in str(e.value), str(e.value)
    names = {p.name for p in meta.iterdir() if not p.name.startswith(".")}
    assert not names & {"8", "8.compact", "8.compact.index"}, names

    # repair: a dry run says what and from where and changes nothing; then it restores.
    source = (
        f"batch file file:{meta}/{DAMAGED}"
        if batch_file_kept
        else f"the data files named with batch {DAMAGED} (size and modification time from the "
        "file system)"
    )
    before = snapshot(out)
    with sql_conf(spark, **SINK_CONFS):
        dry = batchlog.repair(spark, str(out), dry_run=True, quiet=True)
    assert dry.runs_only is True and dry.written is False, dry
    [planned] = dry.runs_restored
    assert (planned.batch_id, planned.entries, planned.source) == (DAMAGED, count, source)
    assert snapshot(out) == before, "a dry run changed the sink"
    if field == "size":  # the CLI, as the error message says
        cli = cli_here(spark, "repair", f"file:{out}")
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "restoring only the damaged batches of compact files" in cli.stdout, cli.stdout
        assert source in cli.stdout, cli.stdout
    else:
        with sql_conf(spark, **SINK_CONFS):
            done = batchlog.repair(spark, str(out), quiet=True)
        assert [(r.batch_id, r.entries, r.source) for r in done.runs_restored] == [
            (DAMAGED, count, source)
        ]
        assert done.written is False and done.moved_aside is None, done
    # Exactly the entries as the query logged them: the compact file's bytes as written. From the
    # data files, all but the batch's commit record (its first line's "commit": query, run, rows,
    # duration): no file holds it, and the damaged line is the one thing not to trust.
    expected, dropped = (original, 0)
    if not batch_file_kept:
        commit = rb'"commit":\{[^{}]*\},(?="batchId":%d\}\n)' % DAMAGED
        expected, dropped = re.subn(commit, b"", original)
        assert dropped == 1, "the damaged batch's first line holds its commit record"
    assert (meta / "5.compact").read_bytes() == expected
    [evidence] = [p for p in out.iterdir() if re.match(r"_spark_metadata\.damaged-\d+$", p.name)]
    assert {p.name for p in evidence.iterdir() if not p.name.startswith(".")} == {
        "5.compact",
        "5.compact.index",
    }
    with sql_conf(spark, **SINK_CONFS):
        healthy = batchlog.verify(spark, str(out))
        assert healthy.healthy is True and healthy.damaged_runs == [], healthy
        # Nothing left to do: the way out leads out, not to "nothing to do" before the repair.
        again = batchlog.repair(spark, str(out), dry_run=True, quiet=True)
        assert again.needed is False and again.runs_restored == [], again
        # history: the restored batch's rows are unknown, not guessed; asked for, they are counted
        sink_log = batchlog.SinkLog(spark, str(out))
        recorded = {b.batch_id: b.rows for b in sink_log.history().batches}
        lost = {DAMAGED} if not batch_file_kept else set()
        assert recorded == {b: None if b in lost else ROWS_PER_FILE for b in range(8)}, recorded
        counted = {b.batch_id: b.rows for b in sink_log.history(rows=True).batches}
        assert counted == {b: ROWS_PER_FILE for b in range(8)}, counted

    # The query restarts and continues through compaction 8 and batch 9.
    run_stream(spark, inp, out, chk)
    assert check_log(out, 3)["latest"] == 9
    assert (meta / "8.compact").exists()
    assert _plain_rows(out) == _expected_rows(ids)
    with sql_conf(spark, **SINK_CONFS):
        assert batchlog.verify(spark, str(out)).healthy is True
