"""The end-to-end smoke test of ``dev/test --fast``: a real streaming query through the plugin,
with compactions, ``SinkLog.files(b)`` for every batch, and the sink read back by plain Spark (a
process without the batchlog jar)."""

from __future__ import annotations

from pathlib import Path

import batchlog
import pytest
from conftest import (
    COMMIT_PROTOCOL_KEY,
    COMPACT_INTERVAL_KEY,
    batch_rows,
    drop_inputs,
    log_file_names,
    read_back_plain,
    row_tuples,
    run_stream,
    session_conf,
    tagged_files_by_batch,
)
from pyspark.sql import SparkSession

BATCHES = 5  # compactInterval 2: compactions at batches 1 and 3


@pytest.mark.smoke
def test_smoke_plugin_compaction_files_and_plain_read(spark: SparkSession, tmp_path: Path) -> None:
    inbox, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    inputs = {b: batch_rows(b, b % 3 + 1) for b in range(BATCHES)}
    drop_inputs(inbox, inputs)
    confs = {COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS, COMPACT_INTERVAL_KEY: "2"}
    with session_conf(spark, confs):
        assert run_stream(spark, inbox, out, chk) == list(range(BATCHES))

    assert log_file_names(out) == ["0", "1.compact", "2", "3.compact", "4"]
    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == BATCHES - 1
    assert {b: set(log.files(b)) for b in range(BATCHES)} == tagged_files_by_batch(out)
    [plain] = read_back_plain([("parquet", str(out))])
    assert row_tuples(plain["rows"]) == row_tuples(r for rows in inputs.values() for r in rows)
