"""Golden sinks (issue 26): sinks written by earlier batchlog versions, read by this one.

Each sink under ``tests/fixtures/golden/<name>/`` was written by real streaming queries of the
version that made it (``make.py`` there) and is put back at the path it was written at
(``/tmp/batchlog-golden/<name>``, see ``golden_support``). This version must read it exactly as
that version did: its batches, each batch's files, each file's batch, every live entry, a healthy
``verify``, the same rewind dry run, the same rows through the ``batchlog`` data source by batch
and through plain Spark, and (for the downstream checkpoint) a restart that reads exactly the
upstream batches it had not read. A change that breaks an old sink fails here; never regenerate an
old sink to make it pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from golden_support import (
    DOWN_CHK,
    DOWN_OUT,
    GOLDEN_DIR,
    INFER,
    SINKS,
    answers,
    every_sink_installed,
    expected,
    install,
    plain_reads,
)
from golden_support import ROOT as GOLDEN_ROOT
from pyspark.sql import SparkSession
from support import QUERY_TIMEOUT_S, batchlog, project_version, session_conf


@pytest.fixture(scope="module")
def plain() -> Iterator[dict[str, dict[str, Any]]]:
    """Every golden sink put back at its path (the lock on ``/tmp/batchlog-golden`` held for the
    module), and what plain Spark reads from each (one process for all)."""
    with every_sink_installed():
        yield plain_reads(list(SINKS))


def test_every_golden_sink_is_tested() -> None:
    stored = sorted(p.name for p in GOLDEN_DIR.iterdir() if (p / "expected.json").is_file())
    assert stored == sorted(SINKS)


@pytest.mark.parametrize("name", sorted(SINKS))
def test_golden_sink_reads_as_written(
    spark: SparkSession, plain: dict[str, dict[str, Any]], name: str
) -> None:
    want = expected(name)
    found = answers(spark, name, plain[name])
    # the sink's own facts first, so that a failure says which answer changed
    for key in [
        "latest_batch",
        "batches",
        "files",
        "entries",
        "batch_of",
        "verify",
        "rewind_dry_run",
        "read_by_batch",
        "read_all",
        "plain_spark",
        "downstream_restart",
    ]:
        assert found.get(key) == want.get(key), key
    # answers added after a sink was written are compared where its expected.json has them
    for key in ["history"]:
        if key in want:
            assert found[key] == want[key], key
    assert found["verify"]["healthy"] is True
    assert found["verify"]["log_errors"] == []
    # every file of a batch is that batch's; every row read by batch is a row plain Spark reads
    for b, files in found["files"].items():
        assert files and all(found["batch_of"][f] == int(b) for f in files)
    by_batch = sorted(r for rows in found["read_by_batch"].values() for r in rows)
    everything = list(found["read_all"])
    for r in by_batch:
        everything.remove(r)
    if found["verify"]["untagged_entries"] == 0:
        assert everything == []  # untagged entries are read by no batch, only in a read of all


# ---- versions this batchlog does not know (docs/format.md, Versions) ----------------------------


def test_a_newer_index_version_is_read_by_a_scan_and_left_alone(
    spark: SparkSession, plain: dict[str, dict[str, Any]]
) -> None:
    want = expected("plain")
    out = GOLDEN_ROOT / "plain" / "out"
    index = out / "_spark_metadata" / "5.compact.index"
    lines = index.read_text().splitlines()
    newer = "\n".join(["batchlog-index v4 x", *lines[1:], "fast 0 1 2"]) + "\n"
    index.write_text(newer)
    try:
        log = batchlog.SinkLog(spark, str(out))
        assert log.batches() == want["batches"]
        assert {str(b): sorted(log.files(b)) for b in log.batches()} == want["files"]
        report = batchlog.verify(spark, str(out))
        assert report.healthy and report.index_problems == [] and report.log_errors == []
        assert report.indexes_rebuilt_in_memory == want["verify"]["indexes_rebuilt_in_memory"] + 1
        repair = batchlog.repair(spark, str(out), dry_run=True, quiet=True)
        assert (repair.needed, repair.index_problems, repair.written) == (False, [], False)
        assert index.read_text() == newer  # left for the version that wrote it
    finally:
        install("plain")


def test_a_newer_sink_record_is_refused_and_left_alone(
    spark: SparkSession, plain: dict[str, dict[str, Any]]
) -> None:
    spec = SINKS["plain"]
    out, chk = GOLDEN_ROOT / "plain" / spec["out"], GOLDEN_ROOT / "plain" / spec["chk"]
    record = out / "_batchlog" / "_batchlog-sink.json"
    newer = json.loads(record.read_text())
    newer.update(version=2, fence="a field of a newer batchlog")

    def refusal(content: dict[str, Any]) -> str:
        """The rewind's error on the sink whose record is ``content``; the record left as is."""
        record.write_text(json.dumps(content))
        before = record.read_bytes()
        with pytest.raises(batchlog.CorruptLogError) as raised:
            batchlog.rewind(spark, str(out), str(chk), spec["rewind_to"], dry_run=True, quiet=True)
        assert record.read_bytes() == before
        return str(raised.value)

    this = f"this batchlog ({project_version()}) reads version 1 and neither uses nor changes it"
    try:
        assert (
            f"batchlog's record file:{record} is of version 2, written by a newer batchlog; {this}."
            " Use the newer batchlog on this sink (see docs/format.md, Versions)."
        ) in refusal(newer)
        # a newer release names itself, and its record is refused by its version alone, whatever
        # its other fields (here: none of version 1's)
        assert (
            f"batchlog's record file:{record} is of version 3, written by batchlog 0.7.0; {this}. "
            "Use batchlog 0.7.0 or later on this sink (see docs/format.md, Versions)."
        ) in refusal({"version": 3, "writtenBy": "0.7.0", "layout": {}})
    finally:
        install("plain")


def test_a_newer_batchlog_source_offset_is_refused_naming_the_checkpoint(
    spark: SparkSession, plain: dict[str, dict[str, Any]]
) -> None:
    root = install("downstream")
    chk = root / DOWN_CHK
    offsets = chk / "offsets" / "0"  # batch 0 read upstream 0..4
    lines = offsets.read_text().split("\n")
    newer = {**json.loads(lines[-1]), "upstreamEpoch": 0}  # a field of a newer batchlog
    offsets.write_text("\n".join([*lines[:-1], json.dumps(newer, separators=(",", ":"))]))
    (chk / "offsets" / ".0.crc").unlink()  # Hadoop's checksum of the old bytes
    try:
        with session_conf(spark, INFER):
            query = (
                spark.readStream.format("batchlog")
                .load(str(root / "up" / "out"))
                .writeStream.format("json")
                .option("checkpointLocation", str(chk))
                .trigger(availableNow=True)
                .start(str(root / DOWN_OUT))
            )
        with pytest.raises(batchlog.InvalidArgumentError) as raised:
            batchlog.await_query(query, QUERY_TIMEOUT_S)
        assert (
            f"Invalid checkpointLocation = file:{chk}: its offsets log holds "
            f"{json.dumps(newer, separators=(',', ':'))} for a batchlog source, which is not a "
            "batchlog source offset of this version"
        ) in str(raised.value)
        assert "Run the query with the batchlog version that wrote its checkpoint" in str(
            raised.value
        )
        assert not (chk / "offsets" / "1").exists() and not (chk / "commits" / "1").exists()
    finally:
        install("downstream")
