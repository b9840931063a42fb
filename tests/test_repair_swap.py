"""repair never leaves the sink without a readable ``_spark_metadata``: it copies the old log
aside, then replaces its files in place (see ``RepairSwap``). A repair halted at each of its
steps (the JVM halts, as if killed, through the test kit's ``FaultInjectingCheckpointFileManager``)
leaves the directory in place, a log at least as readable as before, and an intent that makes the
next ``repair`` (no flags) finish the job; the same query then continues and plain Spark reads
every row exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from reliability_support import (
    FAULT_MANAGER,
    batchlog,
    check_log,
    jars_with_testkit,
    plain_read,
    run_cli,
    snapshot,
    spark_session,
    sql_conf,
)
from repair_support import (
    DEFAULT_INTERVAL,
    RECORDS,
    assert_batches,
    assert_plain_reads_all,
    meta_names,
    record,
    run_query,
    sink_of_8,
    with_indexes,
)

spark = spark_session  # the module's session fixture

INTENT = "_batchlog-repair.json"

#: step -> (operation, path regex) of the call the JVM halts at; in the order repair runs them
HALTS = {
    "intent": ("rename", r"_batchlog/_batchlog-repair\.json$"),
    "copy-aside": ("createAtomic", r"_spark_metadata\.broken-\d+/5\.compact$"),
    "retire-misleading": ("delete", r"_spark_metadata/5\.compact\.index$"),
    "publish": ("rename", r"_spark_metadata/5\.compact$"),
    "clean-up": ("delete", r"_spark_metadata/3$"),
    "intent-removal": ("delete", r"_batchlog/_batchlog-repair\.json$"),
}
#: from this step on the new log is complete
COMPLETE_FROM = "clean-up"


def halt_confs(op: str, regex: str) -> list[str]:
    confs = {
        "spark.jars": jars_with_testkit(),
        "spark.sql.streaming.checkpointFileManagerClass": FAULT_MANAGER,
        "spark.batchlog.test.fault.op": op,
        "spark.batchlog.test.fault.pathRegex": regex,
        "spark.batchlog.test.fault.action": "halt",
    }
    return [f"--conf={k}={v}" for k, v in confs.items()]


@pytest.mark.parametrize("step", list(HALTS))
def test_a_repair_halted_at_each_step_is_finished_by_the_next(
    spark: SparkSession, tmp_path: Path, step: str, testkit_jar: str
) -> None:
    inp, out, chk = sink_of_8(spark, tmp_path)
    meta = out / "_spark_metadata"
    assert {"2.compact.index", "5.compact.index"} <= meta_names(out)
    data = (meta / "5.compact").read_bytes()
    (meta / "5.compact").write_bytes(data[: len(data) // 2])  # cut inside a line
    (meta / ".5.compact.crc").unlink(missing_ok=True)
    epoch = record(out)["epoch"]

    cli = run_cli(*halt_confs(*HALTS[step]), "repair", str(out))
    assert cli.returncode != 0, cli.stdout + cli.stderr[-3000:]
    assert "[batchlog-fault] halting the JVM" in cli.stderr, cli.stderr[-3000:]
    assert "done:" not in cli.stdout
    # the log directory never went away; once the new log is published it reads completely
    assert meta.is_dir()
    if list(HALTS).index(step) >= list(HALTS).index(COMPLETE_FROM):
        assert_plain_reads_all(out, inp)
        assert check_log(out, 3, junk=RECORDS)["latest"] == 7
    intent_left = (out / "_batchlog" / INTENT).exists()
    assert intent_left is (step != "intent")
    if intent_left:
        # the query refuses to start on a half-repaired sink: nothing is written, nothing skipped
        before = snapshot(out), snapshot(chk)
        with pytest.raises(StreamingQueryException, match="is being repaired"):
            run_query(spark, inp, out, chk)
        assert (snapshot(out), snapshot(chk)) == before

    with sql_conf(spark, **DEFAULT_INTERVAL):
        plan = batchlog.repair(spark, str(out), dry_run=True, quiet=True)
        assert plan["needed"] is True, plan
        if intent_left:
            assert any("did not finish" in p for p in plan["logProblems"]), plan["logProblems"]
        r = batchlog.repair(spark, str(out), quiet=True)
    assert r["written"] is True and r["compactInterval"] == 3
    assert meta_names(out) == with_indexes({"2.compact", "5.compact", "6", "7"})
    assert not (out / "_batchlog" / INTENT).exists()
    assert record(out)["epoch"] > epoch
    # the damaged file is kept, copied aside (by the halted run, or by the second)
    kept = [b / "5.compact" for b in out.glob("_spark_metadata.broken-*")]
    assert any(f.exists() and f.read_bytes() == data[: len(data) // 2] for f in kept), kept
    assert plain_read(out)["rows"] == len(inp.all_ids())
    # the killed repair left no history record (a record is written once an operation ended);
    # the one that finished it, one
    ops = batchlog.SinkLog(spark, str(out)).history().operations
    assert [(o.operation, o.outcome) for o in ops] == [("repair", "done")]

    inp.add(8, 4)
    run_query(spark, inp, out, chk)
    assert check_log(out, 3, junk=RECORDS)["latest"] == 11
    assert_plain_reads_all(out, inp)
    assert_batches(spark, out, inp, range(12))
