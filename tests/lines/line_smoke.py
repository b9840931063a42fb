"""The feature tour of one Spark line, run by ``dev/line <line> smoke`` in a fresh virtualenv that
holds only pyspark and the batchlog wheel (run from outside the checkout, so ``import batchlog`` is
the installed wheel and ``batchlog.configure`` picks its jar for the installed pyspark).

Every step uses real queries and files and asserts exact rows, names or counts:

1. a stateful streaming query (file source, one input file per micro-batch, ``dropDuplicates``,
   partitioned parquet sink) through the plugin, ``compactInterval`` 3: seven batches, compactions
   at 2 and 5; ``files(b)``, ``batch_of``, ``entries``, read by batch; ``verify``;
2. a rewind to batch 4 with the checkpoint and its state, and the same query rerun: batches 4..6
   run again and their rows are all back (with the state not rewound, dropDuplicates would drop
   them), read back by plain Spark in a process without the batchlog jar;
3. ``vacuum`` deletes a leftover data file the log does not list; a second query on the sink is
   refused, ``takeover`` hands the sink to it, and it runs; ``repair`` rebuilds a deleted
   ``_spark_metadata`` from the batch-tagged file names; ``adopt`` tags the log of a sink plain
   Spark wrote;
4. the ``batchlog`` data source (as of a batch, a downstream stream) and its SQL;
5. the installed ``batchlog`` command (``inspect``);
6. ``spark-submit --packages io.batchlog:batchlog-spark-<line>_<scala>:<version>`` from the local
   Maven repository the build published: Ivy fetches exactly that jar, and the app's sink is
   batch-tagged.

    python line_smoke.py WORKDIR MAVEN_REPO     prints "LINE-SMOKE OK <details>", else fails
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

BATCHES = 7
REWIND_TO = 4
COMPACT_INTERVAL = 3
COMMIT_KEY = "spark.sql.streaming.commitProtocolClass"
T = TypeVar("T")
Row = tuple[int, str, int]


def step(name: str, fn: Callable[[], T]) -> T:
    """Runs one step of the tour and prints how long it took."""
    t0 = time.monotonic()
    result = fn()
    print(f"[smoke] {name}: ok ({time.monotonic() - t0:.1f} s)", flush=True)
    return result


def rows_of(batch: int) -> list[dict[str, Any]]:
    """Input rows of one micro-batch: ids unique across batches, two countries."""
    return [
        {"id": batch * 100 + i, "country": "NL" if i % 2 else "FR", "batch": batch}
        for i in range(3)
    ]


def expected(batches: range) -> list[Row]:
    return sorted((r["id"], r["country"], r["batch"]) for b in batches for r in rows_of(b))


def drop_inputs(inbox: Path, batches: range) -> None:
    """One JSON-lines file per batch, modification times in batch order (the source's order)."""
    inbox.mkdir(parents=True, exist_ok=True)
    base = int(time.time()) - 3600
    for b in batches:
        f = inbox / f"events-{b:03d}.json"
        f.write_text("".join(json.dumps(r) + "\n" for r in rows_of(b)))
        os.utime(f, (base + b, base + b))


def run_query(spark: Any, inbox: Path, out: Path, chk: Path, stateful: bool = True) -> list[int]:
    """Runs the query until its input is consumed (availableNow); returns its batch ids.

    Stateful: ``dropDuplicates`` on ``id`` (the state a rewind must roll back).
    """
    events = (
        spark.readStream.schema("id LONG, country STRING, batch LONG")
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox))
    )
    if stateful:
        events = events.dropDuplicates(["id"])
    query = (
        events.writeStream.format("parquet")
        .option("checkpointLocation", str(chk))
        .partitionBy("country")
        .trigger(availableNow=True)
        .start(str(out))
    )
    try:
        query.awaitTermination(600)
    except Exception as e:  # StreamingQueryException: the query failed
        raise AssertionError(f"the query failed: {e}") from e
    if query.isActive:
        query.stop()
        raise AssertionError("the query did not finish in 600 s")
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")
    lease = out / "_batchlog" / "_batchlog-lease.json"
    deadline = time.monotonic() + 60
    while lease.exists() and time.monotonic() < deadline:  # goes as the query's thread ends
        time.sleep(0.05)
    return [int(p["batchId"]) for p in query.recentProgress]


PLAIN_READER = """
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
jars = spark.conf.get("spark.jars", "")
try:
    spark._jvm.java.lang.Class.forName("io.batchlog.BatchTaggedCommitProtocol")
    loadable = True
except Exception:
    loadable = False
for path in sys.stdin:  # one sink a line, until the smoke closes its input
    df = spark.read.parquet(path.rstrip("\\n"))
    rows = sorted((r["id"], r["country"], r["batch"]) for r in df.collect())
    print("PLAIN " + json.dumps({"jars": jars, "loadable": loadable, "rows": rows}), flush=True)
"""

#: The plain reader: one process for the smoke's reads (a JVM start each would cost more than the
#: read), started at the first.
plain_reader: list[subprocess.Popen[str]] = []
plain_errors = tempfile.TemporaryFile()


def plain_stderr() -> str:
    plain_errors.seek(0)
    return plain_errors.read().decode(errors="replace")[-4000:]


def read_plain(out: Path) -> list[Row]:
    """The sink's rows as plain Spark reads them, in a process without the batchlog jar."""
    if not plain_reader:
        env = {
            k: v for k, v in os.environ.items() if k not in ("BATCHLOG_JAR", "PYSPARK_SUBMIT_ARGS")
        }
        plain_reader.append(
            subprocess.Popen(
                [sys.executable, "-c", PLAIN_READER],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=plain_errors,
                text=True,
            )
        )
    proc = plain_reader[0]
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{out}\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    while line and not line.startswith("PLAIN "):
        line = proc.stdout.readline()
    assert line, f"the plain reader exited ({proc.wait()}) reading {out}:\n{plain_stderr()}"
    result = json.loads(line[len("PLAIN ") :])
    assert result["jars"] == "" and result["loadable"] is False, result
    return [(int(i), str(c), int(b)) for i, c, b in result["rows"]]


def stop_plain_reader() -> None:
    for proc in plain_reader:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0, plain_stderr()
    plain_reader.clear()


def cli(*args: str) -> str:
    """The installed ``batchlog`` command (the wheel's console script) run with ``args``."""
    exe = Path(sys.executable).parent / "batchlog"
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"batchlog {' '.join(args)}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


SUBMIT_APP = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
inbox, out, chk = sys.argv[1:4]
events = spark.readStream.schema("id LONG, country STRING, batch LONG") \\
    .option("maxFilesPerTrigger", 1).json(inbox)
q = events.writeStream.format("parquet").option("checkpointLocation", chk) \\
    .trigger(availableNow=True).start(out)
q.awaitTermination(600)
assert q.exception() is None, q.exception()
print("SUBMIT-APP batches", [int(p["batchId"]) for p in q.recentProgress])
# the bare set-up (the jar and the commit protocol, no spark.sql.extensions) has batchlog's SQL
# and its start check: a second query with a head start is stopped, not silently skipped. Not on
# PySpark 3.5, whose sessions skip Spark's extension service loader (the README says so).
import pyspark
if int(pyspark.__version__.split(".")[0]) >= 4:
    assert spark.conf.get("spark.sql.extensions", None) is None
    latest = spark.sql(f"SELECT * FROM batchlog_latest_batch('{out}')").first()[0]
    print("SUBMIT-APP latest", latest)
    assert '"latestBatch"' in spark.sql(f"BATCHLOG INSPECT '{out}'").first()["report"]
    second = events.writeStream.format("parquet").option("checkpointLocation", chk + "-2") \
        .trigger(availableNow=True).start(out)
    try:
        second.awaitTermination(600)
    except Exception as e:
        print("SUBMIT-APP second query:", "refused" if "written by another query" in str(e) else e)
"""


def submit_with_packages(maven_repo: Path, jar: str, workdir: Path) -> None:
    """``spark-submit --packages`` with this line's Maven coordinates, from ``maven_repo``, and
    the commit protocol: the bare set-up, which has batchlog's SQL and start check too (from
    Spark 4.0: PySpark 3.5's sessions skip Spark's extension service loader)."""
    import importlib.metadata

    import pyspark

    artifact = Path(jar).name.removesuffix(".jar")
    coords = f"io.batchlog:{artifact}:{importlib.metadata.version('batchlog')}"
    inbox, out, chk, ivy = (workdir / f"submit-{d}" for d in ("in", "out", "chk", "ivy"))
    drop_inputs(inbox, range(2))
    app = workdir / "submit_app.py"
    app.write_text(SUBMIT_APP)
    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    cmd = [
        str(Path(home) / "bin" / "spark-submit"),
        "--master", "local[1]",
        "--packages", coords,
        "--repositories", maven_repo.resolve().as_uri(),
        "--conf", f"spark.jars.ivy={ivy}",
        "--conf", f"{COMMIT_KEY}=io.batchlog.BatchTaggedCommitProtocol",
        "--conf", "spark.ui.enabled=false",
        str(app), str(inbox), str(out), str(chk),
    ]  # fmt: skip
    # The app runs on this interpreter (the one with pyspark and batchlog), not on whatever
    # ``python3`` is first on PATH: spark-submit's default when these are unset.
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{coords}:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    assert "SUBMIT-APP batches [0, 1]" in proc.stdout, proc.stdout
    if int(pyspark.__version__.split(".")[0]) >= 4:
        assert "SUBMIT-APP latest 1" in proc.stdout, proc.stdout
        assert "SUBMIT-APP second query: refused" in proc.stdout, proc.stdout
    assert sorted(p.name for p in (ivy / "jars").iterdir()) == [
        f"io.batchlog_{artifact}-" + coords.rsplit(":", 1)[1] + ".jar"
    ]
    for name in ("0", "1"):
        lines = (out / "_spark_metadata" / name).read_text().splitlines()[1:]
        assert lines and all(f'"batchId":{name}' in ln for ln in lines), lines


def log_names(out: Path) -> list[str]:
    meta = out / "_spark_metadata"
    names = [p.name for p in meta.iterdir() if p.name[0].isdigit() and "index" not in p.name]
    return sorted(names, key=lambda n: (int(n.split(".")[0]), n))


def data_files(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("country=*/*.parquet"))


def local(uri: str) -> Path:
    return Path(uri.removeprefix("file:"))


def main(workdir: Path, maven_repo: Path) -> None:
    import batchlog
    import pyspark
    from pyspark.sql import SparkSession

    jar = batchlog.jar_path()
    assert "site-packages" in jar or os.environ.get("BATCHLOG_SMOKE_FROM_CHECKOUT"), (
        f"batchlog must come from the installed wheel, not {jar}"
    )
    inbox, out, chk = workdir / "in", workdir / "out", workdir / "chk"
    drop_inputs(inbox, range(BATCHES))
    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")  # one writing task: a file per country
        .config("spark.sql.streaming.fileSink.log.compactInterval", str(COMPACT_INTERVAL))
    )
    spark = batchlog.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    jvm: Any = spark._jvm
    java = jvm.java.lang.System.getProperty("java.version")
    scala = jvm.scala.util.Properties.versionNumberString()

    def query_and_reads() -> Any:
        assert run_query(spark, inbox, out, chk) == list(range(BATCHES))
        assert log_names(out) == ["0", "1", "2.compact", "3", "4", "5.compact", "6"]
        log = batchlog.SinkLog(spark, str(out))
        assert log.latest_batch() == BATCHES - 1 and log.batches() == list(range(BATCHES))
        for b in range(BATCHES):
            files = log.files(b)
            assert len(files) == 2 and all(f"-batch-{b}-" in f for f in files), (b, files)
            assert all(log.batch_of(f) == b for f in files)
        by_batch = log.entries().groupBy("batchId").count().collect()
        assert sorted((r["batchId"], r["count"]) for r in by_batch) == [
            (b, 2) for b in range(BATCHES)
        ]
        rows_5 = batchlog.read(spark, str(out), "parquet", from_batch=5, to_batch=5).collect()
        assert sorted(r["id"] for r in rows_5) == [500, 501, 502]
        assert batchlog.verify(spark, str(out)).healthy
        return log

    log = step("stateful query, compaction, files/batch_of/entries, read by batch", query_and_reads)

    def rewind_and_rerun() -> None:
        report = batchlog.rewind(spark, str(out), str(chk), REWIND_TO, quiet=True)
        assert report.result is not None and report.result.data_files_deleted == 6, report
        assert log.latest_batch() == REWIND_TO - 1
        assert read_plain(out) == expected(range(REWIND_TO))
        assert run_query(spark, inbox, out, chk) == list(range(REWIND_TO, BATCHES))
        assert log.latest_batch() == BATCHES - 1
        assert read_plain(out) == expected(range(BATCHES))

    step("rewind to 4 (checkpoint and state) and rerun, plain read exact", rewind_and_rerun)
    files_5 = sorted(log.files(5))

    def vacuum() -> None:
        assert batchlog.vacuum(spark, str(out), older_than="0s").orphan_files == 0
        src = local(files_5[0])
        leftover = src.with_name(f"part-00009-batch-2-{uuid.uuid4()}.c000.snappy.parquet")
        shutil.copyfile(src, leftover)  # a failed task's file: on disk, not in the log
        old = time.time() - 7200
        os.utime(leftover, (old, old))
        report = batchlog.vacuum(spark, str(out), older_than="1h", dry_run=False, quiet=True)
        assert (report.orphan_files, report.deleted_files) == (1, 1), report
        assert not leftover.exists()

    step("vacuum deletes an unlisted leftover file", vacuum)

    def takeover() -> None:
        new_chk = workdir / "chk-new"
        drop_inputs(inbox, range(BATCHES, BATCHES + 1))  # batch 7: past what the sink holds
        # A second (stateless) query on the sink, its batch ids 0..6 already logged: it is
        # stopped as it starts, before Spark's sink could skip them.
        try:
            run_query(spark, inbox, out, new_chk, stateful=False)
            raise RuntimeError("a second query wrote a sink another query owns")
        except AssertionError as e:
            assert "cannot write to" in str(e) and "written by another query" in str(e), e
            assert "before its batch 0" in str(e), e
        assert log.latest_batch() == BATCHES - 1
        report = batchlog.takeover(spark, str(out), str(new_chk))
        assert report.done and report.sink_latest_batch == BATCHES - 1, report
        assert report.skipped_batches == BATCHES, report
        # The new owner: the sink skips its batches 0..6 (logged; the same input files as the
        # first owner's, a stateful query would lack their state) and it writes batch 7.
        assert run_query(spark, inbox, out, new_chk, stateful=False) == list(range(BATCHES + 1))
        assert log.latest_batch() == BATCHES
        assert read_plain(out) == expected(range(BATCHES + 1))

    step("a second query refused, takeover, the new owner runs", takeover)

    def repair() -> None:
        shutil.rmtree(out / "_spark_metadata")  # the damage: the whole log lost
        report = batchlog.repair(spark, str(out), quiet=True)
        assert report.written and report.data_files == 2 * (BATCHES + 1), report
        assert batchlog.verify(spark, str(out)).healthy
        assert sorted(batchlog.SinkLog(spark, str(out)).files(5)) == files_5
        assert read_plain(out) == expected(range(BATCHES + 1))

    step("repair rebuilds a deleted _spark_metadata", repair)

    def adopt() -> None:
        plain_out, plain_in = workdir / "plain-out", workdir / "plain-in"
        drop_inputs(plain_in, range(4))
        spark.conf.unset(COMMIT_KEY)  # plain Spark writes this sink
        try:
            ran = run_query(spark, plain_in, plain_out, workdir / "plain-chk", stateful=False)
            assert ran == [0, 1, 2, 3]
        finally:
            spark.conf.set(COMMIT_KEY, batchlog.COMMIT_PROTOCOL_CLASS)
        files = [f.as_uri() for f in data_files(plain_out)]
        assert len(files) == 8 and not any("-batch-" in f for f in files)
        report = batchlog.adopt(spark, str(plain_out), quiet=True)
        assert (report.compact_files, report.compact_files_rewritten) == (1, 1), report
        # 2.compact's 6 entries get their batches (batch file 3 is one batch by its name).
        assert (report.entries_tagged, report.entries_untagged) == (6, 0), report
        entries = batchlog.SinkLog(spark, str(plain_out)).entries().collect()
        assert sorted(local(e["path"]).as_uri() for e in entries) == files
        assert sorted(e["batchId"] for e in entries) == [0, 0, 1, 1, 2, 2, 3, 3]

    step("adopt a sink plain Spark wrote", adopt)

    def source_and_sql() -> None:
        as_of = spark.read.format("batchlog").option("asOfBatch", 2).load(str(out)).collect()
        assert sorted(r["id"] for r in as_of) == [t[0] for t in expected(range(3))]
        down_out, down_chk = workdir / "down-out", workdir / "down-chk"
        # a stream infers its schema only where Spark's file sources would
        spark.conf.set("spark.sql.streaming.schemaInference", "true")
        q = (
            spark.readStream.format("batchlog")
            .option("maxBatchesPerTrigger", 3)
            .load(str(out))
            .writeStream.format("parquet")
            .option("checkpointLocation", str(down_chk))
            .trigger(availableNow=True)
            .start(str(down_out))
        )
        assert q.awaitTermination(300) is not False and q.exception() is None
        assert read_plain(down_out) == expected(range(BATCHES + 1))
        files = spark.sql(f"SELECT path FROM batchlog_files('{out}', 5)").collect()
        assert sorted(r["path"] for r in files) == files_5
        report = spark.sql(f"BATCHLOG VERIFY '{out}'").collect()[0]["report"]
        assert '"healthy":true' in report

    step("the batchlog data source (read, stream) and its SQL", source_and_sql)

    def cascade() -> None:
        down_out, down_chk = workdir / "down-out", workdir / "down-chk"
        side_out, side_chk = workdir / "side-out", workdir / "side-chk"

        def stream(frame: Any, target: Path, checkpoint: Path) -> None:
            q = (
                frame.writeStream.format("parquet")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start(str(target))
            )
            assert q.awaitTermination(300) is not False and q.exception() is None

        def down() -> None:
            frame = spark.readStream.format("batchlog").option("maxBatchesPerTrigger", 3)
            stream(frame.load(str(out)), down_out, down_chk)

        def side() -> None:
            frame = spark.readStream.schema("id LONG, batch LONG, country STRING")
            stream(frame.parquet(str(out)), side_out, side_chk)

        side()  # Spark's file source over the sink: all 8 batches in its batch 0
        new_chk = str(workdir / "chk-new")  # the sink's owner since the takeover, from batch 7
        report = batchlog.rewind(spark, str(out), new_chk, BATCHES, cascade=True, quiet=True)
        # the batchlog source read 0-2, 3-5, 6-7: its batch 2 read batch 7
        hops = sorted((Path(local(h.checkpoint)).name, h.to_batch) for h in report.hops)
        assert hops == [("chk-new", BATCHES), ("down-chk", 2), ("side-chk", 0)], hops
        down()  # before its upstream: nothing to read yet
        assert run_query(spark, inbox, out, Path(new_chk), stateful=False) == [BATCHES]
        down()
        side()
        assert read_plain(down_out) == expected(range(BATCHES + 1))
        assert read_plain(side_out) == expected(range(BATCHES + 1))

    step("rewind --cascade: the sink, a batchlog-source reader, a file-source reader", cascade)
    spark.stop()
    stop_plain_reader()

    def command() -> None:
        # One command: each starts a JVM (four were the smoke's costliest step), and the API and
        # SQL above answered files and verify; this proves the console script and the wheel's jar
        # for this line, with the one answer not asked above.
        lines = cli("inspect", str(out)).splitlines()
        assert f"latest batch    {BATCHES}" in lines, lines
        assert any(s.startswith("compaction      every 3 batches; latest ") for s in lines), lines

    step("batchlog inspect", command)
    step(
        f"spark-submit --packages {Path(jar).name.removesuffix('.jar')} from {maven_repo}",
        lambda: submit_with_packages(maven_repo, jar, workdir),
    )
    print(
        f"LINE-SMOKE OK pyspark {pyspark.__version__} (Scala {scala}, Java {java}), "
        f"jar {Path(jar).name}"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
