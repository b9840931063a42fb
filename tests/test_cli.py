"""``python -m batchlog`` as a real subprocess (``PYTHONPATH=<repo>/python``): exact output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import batchlog
import pytest
from conftest import (
    COMMIT_PROTOCOL_KEY,
    COMPACT_INTERVAL_KEY,
    QUERY_TIMEOUT_S,
    REPO,
    VANILLA_COMMIT_PROTOCOL,
    batch_rows,
    data_files,
    drop_inputs,
    log_file_names,
    read_log_file,
    run_stream,
    session_conf,
    subprocess_env,
)
from pyspark.sql import SparkSession


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "batchlog", *args],
        env=subprocess_env(),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=QUERY_TIMEOUT_S,
    )


def query_id(checkpoint: Path) -> str:
    qid: str = json.loads((checkpoint / "metadata").read_text())["id"]
    return qid


def human(n: int) -> str:
    """The CLI's size format, for the small sizes used here."""
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def files_of(batch: int) -> int:
    return batch % 3 + 1


@pytest.fixture(scope="module")
def sinks(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``tagged``: a json sink written through batchlog, batches 0..4, compactInterval 3.

    ``mixed``: batches 0..2 through batchlog, then 3..5 by plain Spark, whose compaction at 5
    drops the batch ids of its own (untagged-name) files 3, 4 and 5.
    """
    work = tmp_path_factory.mktemp("cli-sinks")
    plugin = {
        COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS,
        COMPACT_INTERVAL_KEY: "3",
    }
    vanilla = {COMMIT_PROTOCOL_KEY: VANILLA_COMMIT_PROTOCOL, COMPACT_INTERVAL_KEY: "3"}

    tagged = work / "tagged"
    drop_inputs(work / "input-tagged", {b: batch_rows(b, files_of(b)) for b in range(5)})
    with session_conf(spark, plugin):
        ran = run_stream(spark, work / "input-tagged", tagged, work / "chk-tagged", fmt="json")
    assert ran == [0, 1, 2, 3, 4]

    mixed = work / "mixed"
    drop_inputs(work / "input-mixed", {b: batch_rows(b, files_of(b)) for b in range(3)})
    with session_conf(spark, plugin):
        ran = run_stream(spark, work / "input-mixed", mixed, work / "chk-mixed", fmt="json")
    assert ran == [0, 1, 2]
    drop_inputs(work / "input-mixed", {b: batch_rows(b, files_of(b)) for b in range(3, 6)})
    with session_conf(spark, vanilla):
        ran = run_stream(spark, work / "input-mixed", mixed, work / "chk-mixed", fmt="json")
    assert ran == [3, 4, 5]
    return {"tagged": tagged, "mixed": mixed}


def batch_table(output: Path) -> list[tuple[int, int, int]]:
    """(batch, files, bytes) per tagged batch, from the batch-tagged data file names on disk."""
    per: dict[int, tuple[int, int]] = {}
    for p in data_files(output):
        if "-batch-" in p.name:
            b = int(p.name.split("-batch-")[1].split("-")[0])
            n, size = per.get(b, (0, 0))
            per[b] = (n + 1, size + p.stat().st_size)
    return [(b, n, size) for b, (n, size) in sorted(per.items())]


def expected_table(rows: list[tuple[int, int, int]]) -> list[str]:
    sizes = [human(size) for _, _, size in rows]
    assert all(size < 100_000 for _, _, size in rows)  # the bytes column stays 5 wide
    w = max([len("size")] + [len(s) for s in sizes])
    out = ["batch  files  bytes  size", "-----  -----  -----  " + "-" * w]
    out += [f"{b:>5}  {n:>5}  {size:>5}  {s}" for (b, n, size), s in zip(rows, sizes)]
    return out


def log_bytes(output: Path) -> tuple[int, int]:
    names = log_file_names(output)
    return len(names), sum((output / "_spark_metadata" / n).stat().st_size for n in names)


def test_inspect(sinks: dict[str, Path]) -> None:
    out = sinks["tagged"]
    rows = batch_table(out)
    assert [(b, n) for b, n, _ in rows] == [(0, 1), (1, 2), (2, 3), (3, 1), (4, 2)]
    n_logs, logs_size = log_bytes(out)
    assert n_logs == 5  # 0 1 2.compact 3 4
    total = sum(size for _, _, size in rows)

    proc = cli("inspect", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"sink            {out}",
        "latest batch    4",
        "compaction      every 3 batches; latest 2.compact; next at batch 5",
        f"log files       5 ({human(logs_size)})",
        "log publish     hard link of a temp file (local disk)",
        "compaction copy client-side copy (not an object store that publishes whole uploads)",
        "rewind horizon  batch 0 (sink lineage 0; pass --checkpoint for the checkpoint's)",
        f"written by      query {query_id(out.parent / 'chk-tagged')} (from batch 0)",
        "lease holder    none (no writer's lease)",
        f"live files      9 ({human(total)}) in 5 batches",
        "",
        *expected_table(rows),
    ]
    # with the checkpoint: Spark keeps every offset and commit of 5 batches (minBatchesToRetain 100)
    proc = cli("inspect", str(out), "--checkpoint", str(out.parent / "chk-tagged"))
    assert proc.returncode == 0, proc.stderr
    assert (
        "rewind horizon  batch 0 (sink lineage 0, checkpoint 0 (minBatchesToRetain 100))"
        in proc.stdout.splitlines()
    )


def test_inspect_a_young_sink_shows_its_writers_interval(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Before its first compact file a log is read at the reading session's interval (here
    Spark's default, 10); ``inspect`` shows the writing query's, from the sink's record."""
    out = tmp_path / "young"
    drop_inputs(tmp_path / "input", {b: batch_rows(b, 1) for b in range(2)})
    plugin = {COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS, COMPACT_INTERVAL_KEY: "4"}
    with session_conf(spark, plugin):
        ran = run_stream(spark, tmp_path / "input", out, tmp_path / "chk", fmt="json")
    assert ran == [0, 1]
    proc = cli("inspect", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "compaction      every 4 batches; latest (none yet); next at batch 3" in (
        proc.stdout.splitlines()
    ), proc.stdout


def test_inspect_mixed_log_proves_plain_spark_batches(sinks: dict[str, Path]) -> None:
    out = sinks["mixed"]
    meta = out / "_spark_metadata"
    assert log_file_names(out) == ["0", "1", "2.compact", "3", "4", "5.compact"]
    rows = batch_table(out)
    assert [(b, n) for b, n, _ in rows] == [(0, 1), (1, 2), (2, 3)]
    untagged = [p for p in data_files(out) if "-batch-" not in p.name]
    assert len(untagged) == 1 + 2 + 3  # plain Spark's files of batches 3, 4, 5
    # Plain Spark's compaction at 5 dropped their batch, but its batch files 3 and 4 survive and
    # prove theirs; batch 5's own files are those of 5.compact that none of 2.compact, 3, 4 holds.
    by_batch = {b: [e["path"] for e in read_log_file(meta / str(b))] for b in (3, 4)}
    merged = {e["path"] for n in ("2.compact", "3", "4") for e in read_log_file(meta / n)}
    by_batch[5] = [e["path"] for e in read_log_file(meta / "5.compact") if e["path"] not in merged]
    for b, paths in by_batch.items():
        assert len(paths) == files_of(b)
        size = sum(Path(p[len("file:") :]).stat().st_size for p in paths)
        rows.append((b, len(paths), size))
    total = sum(size for _, _, size in rows)
    _, logs_size = log_bytes(out)

    proc = cli("inspect", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"sink            {out}",
        "latest batch    5",
        "compaction      every 3 batches; latest 5.compact; next at batch 8",
        f"log files       6 ({human(logs_size)})",
        "log publish     hard link of a temp file (local disk)",
        "compaction copy client-side copy (not an object store that publishes whole uploads)",
        "rewind horizon  batch 0 (sink lineage 0; pass --checkpoint for the checkpoint's)",
        f"written by      query {query_id(out.parent / 'chk-mixed')} (from batch 0)",
        "lease holder    none (no writer's lease)",
        f"live files      12 ({human(total)}) in 6 batches",
        "",
        *expected_table(rows),
    ]


def test_files(sinks: dict[str, Path]) -> None:
    out = sinks["tagged"]
    meta = out / "_spark_metadata"
    # batch 1 now lives in 2.compact; batch 4 in its own log file 4
    expected = {
        1: [e["path"] for e in read_log_file(meta / "2.compact") if e["batchId"] == 1],
        4: [e["path"] for e in read_log_file(meta / "4")],
    }
    assert [len(v) for v in expected.values()] == [2, 2]
    for batch, paths in expected.items():
        proc = cli("files", str(out), "--batch", str(batch))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "".join(f"{p}\n" for p in paths)
        for p in paths:
            assert f"-batch-{batch}-" in str(p)


def test_not_a_sink_exits_2(tmp_path: Path) -> None:
    proc = cli("inspect", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        f"batchlog: NotASinkError: {tmp_path} is not a file-sink output: it has no "
        "_spark_metadata directory. Pass the path given to writeStream...start(path) "
        "(the directory that holds _spark_metadata). Nothing was changed."
    )


def test_bad_arguments_exit_2(sinks: dict[str, Path]) -> None:
    proc = cli("files", str(sinks["tagged"]))  # argparse: no JVM started
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "the following arguments are required: --batch" in proc.stderr

    proc = cli("files", str(sinks["tagged"]), "--batch", "-1")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        "batchlog: InvalidArgumentError: Invalid batch = -1: must be >= 0. Nothing was changed."
    )
