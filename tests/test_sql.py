"""batchlog's SQL (``io.batchlog.sql.BatchLogExtensions``, set by ``batchlog.configure``): the
``batchlog_*`` table functions and the ``BATCHLOG`` statements, checked against the Python API on
sinks written by real streaming queries.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import COMPACT_INTERVAL_KEY, batch_rows, drop_inputs, run_stream
from pyspark.sql import SparkSession
from support import batchlog, session_conf


def make_sink(spark: SparkSession, root: Path, batches: int = 5) -> tuple[str, str]:
    drop_inputs(root / "in", {b: batch_rows(b, 3) for b in range(batches)})
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        run_stream(spark, root / "in", root / "out", root / "chk")
    return str(root / "out"), str(root / "chk")


def one(spark: SparkSession, sql: str) -> dict:
    rows = spark.sql(sql).collect()
    assert len(rows) == 1
    return rows[0].asDict()


def test_table_functions_answer_what_the_api_answers(spark: SparkSession, tmp_path: Path) -> None:
    out, _ = make_sink(spark, tmp_path)
    log = batchlog.SinkLog(spark, out)
    files = spark.sql(f"SELECT * FROM batchlog_files('{out}', 3)").collect()
    assert sorted(r.path for r in files) == sorted(log.files(3))
    assert {r.batchId for r in files} == {3} and all(r.size > 0 for r in files)
    batches = spark.sql(f"SELECT batchId FROM batchlog_batches('{out}')").collect()
    assert [r.batchId for r in batches] == log.batches() == [0, 1, 2, 3, 4]
    one_file = log.files(2)[0]
    assert one(spark, f"SELECT * FROM batchlog_batch_of('{out}', '{one_file}')") == {"batchId": 2}
    assert spark.sql(f"SELECT * FROM batchlog_batch_of('{out}', '/nope')").collect() == []
    assert one(spark, f"SELECT * FROM batchlog_latest_batch('{out}')") == {"batchId": 4}
    entries = spark.sql(f"SELECT path, batchId FROM batchlog_entries('{out}')").collect()
    assert sorted((r.path, r.batchId) for r in entries) == sorted(
        (p, b) for b in log.batches() for p in log.files(b)
    )
    # "which batch wrote this file": a join of the sink's rows with the log
    joined = spark.sql(
        f"SELECT e.batchId, count(*) AS n FROM parquet.`{out}` d "
        f"JOIN batchlog_entries('{out}') e "
        "ON d._metadata.file_name = substring_index(e.path, '/', -1) "
        "GROUP BY e.batchId ORDER BY e.batchId"
    ).collect()
    assert [(r.batchId, r.n) for r in joined] == [(b, 4) for b in range(5)]


def test_rewind_statement_plans_dry_runs_and_rewinds(spark: SparkSession, tmp_path: Path) -> None:
    out, chk = make_sink(spark, tmp_path)
    before = sorted(p.name for p in Path(out).rglob("*.parquet"))
    stmt = f"BATCHLOG REWIND '{out}' CHECKPOINT '{chk}' TO BATCH 3"
    plan = one(spark, stmt + " PLAN")
    assert plan["operation"] == "rewind" and plan["dry_run"] is True
    assert json.loads(plan["report"])["affectedBatches"] == [3, 4]
    dry = one(spark, stmt + " DRY RUN")
    assert json.loads(dry["report"])["result"] is None
    # EXPLAIN-free: a dry run and a plan changed nothing
    assert sorted(p.name for p in Path(out).rglob("*.parquet")) == before
    done = one(spark, stmt)
    assert done["dry_run"] is False
    report = json.loads(done["report"])
    assert report["result"]["dataFilesDeleted"] == 6
    assert batchlog.SinkLog(spark, out).latest_batch() == 2
    # the query reruns batches 3 and 4 exactly once
    run_stream(spark, tmp_path / "in", Path(out), Path(chk))
    rows = spark.read.parquet(out).collect()
    assert sorted(r.id for r in rows) == sorted(b * 100 + i for b in range(5) for i in range(4))


def test_verify_inspect_vacuum_repair_adopt_takeover_statements(
    spark: SparkSession, tmp_path: Path
) -> None:
    out, chk = make_sink(spark, tmp_path)
    verify = json.loads(one(spark, f"BATCHLOG VERIFY '{out}'")["report"])
    assert verify["healthy"] is True and verify["liveFiles"] == 15
    inspect = json.loads(one(spark, f"batchlog inspect \"{out}\" checkpoint '{chk}';")["report"])
    assert inspect["latestBatch"] == 4 and inspect["compactInterval"] == 3
    orphan = (
        Path(out)
        / "country=de"
        / "part-00000-batch-9-00000000-0000-0000-0000-000000000000.c000.snappy.parquet"
    )
    orphan.write_bytes(b"x")
    vac = one(spark, f"BATCHLOG VACUUM '{out}' OLDER THAN '0s' DRY RUN")
    assert vac["dry_run"] is True and json.loads(vac["report"])["candidateFiles"] == 1
    assert orphan.exists()
    assert (
        json.loads(one(spark, f"BATCHLOG VACUUM '{out}' OLDER THAN '0s'")["report"])["deletedFiles"]
        == 1
    )
    assert not orphan.exists()
    repair = json.loads(one(spark, f"BATCHLOG REPAIR '{out}' DRY RUN")["report"])
    assert repair["written"] is False
    adopt = json.loads(one(spark, f"BATCHLOG ADOPT '{out}' PLAN")["report"])
    assert adopt["entriesUntagged"] == 0
    takeover = json.loads(
        one(spark, f"BATCHLOG TAKEOVER '{out}' CHECKPOINT '{chk}' PLAN")["report"]
    )
    assert takeover["dryRun"] is True and takeover["alreadyOwner"] is True


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("BATCHLOG REWIND '{out}' TO BATCH 2", "REWIND needs CHECKPOINT '<path>'"),
        ("BATCHLOG REWIND '{out}' CHECKPOINT 'c'", "REWIND needs TO BATCH <n>"),
        ("BATCHLOG VERIFY '{out}' DRY RUN", "VERIFY takes no DRY clause"),
        ("BATCHLOG EXPLODE '{out}'", "unknown operation EXPLODE"),
        ("BATCHLOG VACUUM '{out}' DRY RUN PLAN", "PLAN is given twice, or with another mode"),
        ("BATCHLOG VERIFY '{out}", "a string opened with ' is not closed"),
        ("BATCHLOG REPAIR '{out}' COMPACT INTERVAL 0", "COMPACT INTERVAL must be >= 1"),
    ],
)
def test_bad_statements_name_the_fault_and_the_form(
    spark: SparkSession, tmp_path: Path, sql: str, fragment: str
) -> None:
    with pytest.raises(Exception) as e:
        spark.sql(sql.format(out=tmp_path))
    assert "[BATCHLOG.INVALID_ARGUMENT]" in str(e.value) and fragment in str(e.value)


def test_errors_carry_their_code(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=re.escape("[BATCHLOG.NOT_A_SINK]")):
        spark.sql(f"SELECT * FROM batchlog_files('{tmp_path}', 1)").collect()
    with pytest.raises(Exception, match=re.escape("[BATCHLOG.INVALID_ARGUMENT]")):
        spark.sql(f"SELECT * FROM batchlog_files('{tmp_path}')").collect()
    # other SQL still goes to Spark's parser
    assert spark.sql("SELECT 1 AS batchlog").collect()[0][0] == 1
