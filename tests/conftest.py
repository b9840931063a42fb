"""Shared fixtures and helpers for batchlog's integration suite: real Spark, no mocks.

The suite tests *this checkout's* Python package (``<repo>/python`` goes first on ``sys.path``,
whatever the virtualenv's editable install points at) and the jar built into it
(``python/batchlog/jars/batchlog-spark-4.3_2.13.jar`` for the primary line, ``dev/sbt
copyJarToPython``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import cpu_report
import jvm_archive
import pytest
from plain_reader import READER, VANILLA_COMMIT_PROTOCOL, plain_env
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support import (
    PYTHON_DIR,
    QUERY_TIMEOUT_S,
    REPO,
    await_query,
    batchlog,
    get_spark,
    session_conf,
    testkit_jar_path,
)

# re-exported for the test modules
__all__ = ["PYTHON_DIR", "QUERY_TIMEOUT_S", "VANILLA_COMMIT_PROTOCOL", "session_conf"]

#: Every Spark JVM the suite starts (pyspark's driver, ``spark-submit``, the Connect server) runs
#: with the test JVMs' flags (``project/test-jvm-options``: the client compiler only, the serial
#: collector), unless ``SPARK_SUBMIT_OPTS`` is set. On two cores C2's compiling and G1's concurrent
#: threads cost the suite's short JVMs more CPU than they save: ``test_repair_swap.py`` took 320 s
#: of CPU with Spark's defaults and 194 s with these (209 -> 175 s wall). Neither flag changes what
#: Spark or batchlog does; ``SPARK_SUBMIT_OPTS=" "`` runs the suite on the JVM's defaults.
#: They also start from the suite's class-data archive (``tests/jvm_archive.py``): 45% less CPU
#: for a JVM's start.
TEST_JVM_OPTIONS = (REPO / "project" / "test-jvm-options").read_text().strip()
if "SPARK_SUBMIT_OPTS" not in os.environ:
    os.environ["SPARK_SUBMIT_OPTS"] = f"{TEST_JVM_OPTIONS} {jvm_archive.flags(TEST_JVM_OPTIONS)}"

COMMIT_PROTOCOL_KEY = "spark.sql.streaming.commitProtocolClass"
COMPACT_INTERVAL_KEY = "spark.sql.streaming.fileSink.log.compactInterval"

#: The fields of Spark's SinkFileStatus, in Spark's order; batchlog appends "batchId".
VANILLA_FIELDS = [
    "path",
    "size",
    "isDir",
    "modificationTime",
    "blockReplication",
    "blockSize",
    "action",
]
TAGGED_FIELDS = VANILLA_FIELDS + ["batchId"]
#: The first line of each batch batchlog commits also holds "commit" (its query, run, rows and
#: write duration), just before "batchId" (docs/format.md).
COMMITTED_FIELDS = VANILLA_FIELDS + ["commit", "batchId"]


def is_tagged_line(e: dict[str, object]) -> bool:
    """A batch-tagged line as batchlog writes it: Spark's fields in Spark's order, then ``commit``
    on a batch's first line, then ``batchId``."""
    return list(e) in (TAGGED_FIELDS, COMMITTED_FIELDS)


INPUT_SCHEMA = "id LONG, country STRING, amount INT"
COUNTRIES = ["de", "fr", "jp"]
UUID_RE = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

LOCAL_BLOCK_SIZE = 32 * 1024 * 1024  # Hadoop's local file system default block size


# ---- order ------------------------------------------------------------------------------------

#: The modules that take minutes, longest first (measured: `--durations`). dev/test runs the suite
#: in several processes (pytest-xdist, ``--dist loadfile``: a module stays in one process, whose
#: fixtures it shares), and each process takes the next module when it is free; started first,
#: the long ones end together instead of one of them alone at the end.
LONG_MODULES = [
    "test_rewind_crash.py",  # 345 s (2026-11-27, alone, 3 processes; tests/cpu_report.py)
    "test_delta_coexistence.py",  # 299 s
    "test_storage.py",  # 191 s
    "test_crash_kill.py",  # 159 s
    "test_s3_compaction.py",  # 154 s
    "test_containment.py",  # 149 s
    "test_integrity_writers.py",  # 147 s
    "test_source.py",  # 127 s
    "test_repair_no_memory.py",  # 99 s
    "test_docs_blocks.py",  # 97 s
    "test_repair_swap.py",  # 88 s
    "test_rewind.py",  # 76 s
    "test_source_kill.py",  # 68 s
    "test_cli.py",  # 67 s
    "test_configure.py",  # 58 s
    "test_spark_submit_cluster.py",  # 50 s
]


def pytest_configure(config: pytest.Config) -> None:
    cpu_report.register(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker, the long modules first (a stable sort: each module's own order,
    and the other modules' names, kept). A run in one process keeps the file order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# ---- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def jvm_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory of every JVM the test process starts (``java.io.tmpdir``, hence
    Spark's local dirs, block managers, artifact dirs and the native libraries snappy and lz4
    unpack): a folder of pytest's own temporary root, before any JVM starts. A JVM the suite
    SIGKILLs or halts (the crash tests, some 25 a run) runs no shutdown hook and left all of that
    in ``/tmp``, for good; now pytest's rotation of its temporary roots removes it."""
    d = tmp_path_factory.mktemp("jvm-tmp", numbered=False)
    os.environ["SPARK_SUBMIT_OPTS"] = (
        os.environ.get("SPARK_SUBMIT_OPTS", "") + f" -Djava.io.tmpdir={d}"
    ).strip()
    return d


@pytest.fixture(scope="session")
def batchlog_jar() -> str:
    """The built batchlog jar (``batchlog.jar_path()``); fails clearly if it was not built."""
    try:
        jar = batchlog.jar_path()
    except batchlog.BatchLogError as e:
        pytest.fail(
            f"The batchlog jar is not built: {e}\n"
            f"Run `dev/sbt copyJarToPython` in {REPO} to build it into "
            "python/batchlog/jars/, then rerun the tests.",
            pytrace=False,
        )
    return jar


@pytest.fixture(scope="session")
def testkit_jar() -> str:
    """The test kit's jar (fault injection, halting a rewind), for the processes that inject
    faults; fails clearly if it was not built."""
    try:
        return testkit_jar_path()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def spark(batchlog_jar: str, jvm_tmpdir: Path) -> Iterator[SparkSession]:
    """One local Spark session for the suite, with the batchlog jar on its class path."""
    session = get_spark()
    assert batchlog_jar in session.conf.get("spark.jars", "")
    jvm = session.sparkContext._jvm  # type: ignore[attr-defined]
    assert jvm.System.getProperty("java.io.tmpdir") == str(jvm_tmpdir)
    yield session
    session.stop()


# ---- streaming helpers -------------------------------------------------------------------------


def batch_rows(batch: int, n_countries: int, rows: int = 4) -> list[dict[str, Any]]:
    """Input rows for one micro-batch: ``rows`` rows over the first ``n_countries`` countries."""
    countries = COUNTRIES[:n_countries]
    return [
        {"id": batch * 100 + i, "country": countries[i % n_countries], "amount": batch}
        for i in range(rows)
    ]


def drop_inputs(input_dir: Path, batches: Mapping[int, Sequence[dict[str, Any]]]) -> None:
    """Writes one JSON-lines file per batch, ``events-<batch>.json``.

    Each file's modification time is a fixed offset per batch, so the file source (which orders
    files by modification time, one per trigger here) reads them in batch order.
    """
    input_dir.mkdir(parents=True, exist_ok=True)
    base = int(time.time()) - 3600
    for batch, rows in batches.items():
        f = input_dir / f"events-{batch:03d}.json"
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(f, (base + batch, base + batch))


def run_stream(
    spark: SparkSession,
    input_dir: Path,
    output_dir: Path,
    checkpoint_dir: Path,
    fmt: str = "parquet",
    partition_by: Sequence[str] = ("country",),
) -> list[int]:
    """Runs a file-source -> file-sink query with ``availableNow`` and one file per batch.

    Waits for it to finish, fails on a query error, and returns the batch ids it ran.
    """
    events = (
        spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(input_dir))
    )
    writer = events.writeStream.format(fmt).option("checkpointLocation", str(checkpoint_dir))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    query: StreamingQuery = writer.trigger(availableNow=True).start(str(output_dir))
    await_query(query, output_dir)
    assert query.exception() is None, query.exception()
    return [int(p["batchId"]) for p in query.recentProgress]


# ---- reading the sink from outside -------------------------------------------------------------


def read_log_file(path: Path) -> list[dict[str, Any]]:
    """The entries of one ``_spark_metadata`` file; asserts its ``v1`` header."""
    lines = path.read_text().split("\n")
    assert lines[0] == "v1", f"{path}: header {lines[0]!r}"
    return [json.loads(line) for line in lines[1:]]


def raw_log_lines(path: Path) -> list[str]:
    """The entry lines (text) of one ``_spark_metadata`` file, header excluded."""
    lines = path.read_text().split("\n")
    assert lines[0] == "v1", f"{path}: header {lines[0]!r}"
    return lines[1:]


def log_file_names(output_dir: Path) -> list[str]:
    """Names of the log files ``N`` / ``N.compact`` in the sink's ``_spark_metadata``."""
    meta = output_dir / "_spark_metadata"
    names = [p.name for p in meta.iterdir() if re.fullmatch(r"[0-9]+(\.compact)?", p.name)]
    return sorted(names, key=lambda n: int(n.split(".")[0]))


def data_files(output_dir: Path) -> list[Path]:
    """Every data file under the sink's output directory (not the log, not checksums)."""
    return sorted(
        p
        for p in output_dir.rglob("part-*")
        if p.is_file() and "_spark_metadata" not in p.parts and not p.name.endswith(".crc")
    )


def uri(path: Path) -> str:
    """A local path as Spark logs it: ``file:///abs/path``."""
    return "file://" + str(path.resolve())


def tagged_files_by_batch(output: Path) -> dict[int, set[str]]:
    """Data files on disk whose batch-tagged name says which batch wrote them, by batch."""
    out: dict[int, set[str]] = {}
    for p in data_files(output):
        m = re.fullmatch(rf"part-[0-9]{{5}}-batch-([0-9]+)-{UUID_RE}\..*", p.name)
        if m:
            out.setdefault(int(m.group(1)), set()).add(uri(p))
    return out


def assert_entry_matches_disk(entry: Mapping[str, object]) -> None:
    """A log entry's vanilla fields describe the data file on disk exactly."""
    path = str(entry["path"])
    assert path.startswith("file:///"), path
    local = Path(path[len("file://") :])
    assert local.is_file(), path
    st = local.stat()
    assert entry["size"] == st.st_size, entry
    assert entry["isDir"] is False, entry
    assert entry["modificationTime"] == st.st_mtime_ns // 1_000_000, entry
    assert entry["blockReplication"] == 1, entry
    assert entry["blockSize"] == LOCAL_BLOCK_SIZE, entry
    assert entry["action"] == "add", entry


def read_back_plain(sinks: Iterable[Sequence[str]]) -> list[dict[str, Any]]:
    """Reads sinks back with plain PySpark, in a separate process without batchlog.

    ``sinks`` is ``[(format, output_dir), ...]``. The process (``plain_reader.py``: one per test
    process, proven plain when it starts) has no batchlog jar (``spark.jars`` unset, the class not
    loadable) and Spark's default commit protocol; it reads each sink with
    ``spark.read.format(fmt).load(path)`` and reports, per sink, ``count``, ``rows`` (dicts),
    ``columns`` and ``inputFiles``.
    """
    return READER.sinks(sinks)


def row_tuples(rows: Iterable[Mapping[str, Any]]) -> list[tuple]:
    """``(id, country, amount)`` for each row, sorted: comparable across formats."""
    return sorted((int(r["id"]), str(r["country"]), int(r["amount"])) for r in rows)


def subprocess_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a subprocess that imports this checkout's ``batchlog``."""
    env = plain_env()
    env["PYTHONPATH"] = str(PYTHON_DIR)
    env.update(extra or {})
    return env
