"""Plumbing every test module shares: this checkout's package first on ``sys.path``, the Spark
session with the batchlog jar, the test kit's jar, session confs set for a block, and waiting
for a condition (never a bare sleep) or a query, with a deadline.

The suite tests *this checkout's* Python package and the jar built into it
(``python/batchlog/jars/batchlog-spark-4.3_2.13.jar`` for the primary line, ``dev/sbt
copyJarToPython``), whatever the virtualenv's
editable install points at.
"""

from __future__ import annotations

import gc
import io
import linecache
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def project_version() -> str:
    """batchlog's version, as python/pyproject.toml says it (build.sbt takes it from there)."""
    text = (REPO / "python" / "pyproject.toml").read_text()
    return text.split('\nversion = "', 1)[1].split('"', 1)[0]


PYTHON_DIR = REPO / "python"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

import batchlog  # noqa: E402
from py4j.clientserver import FinalizerWorker  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

assert Path(batchlog.__file__).resolve().parent == PYTHON_DIR / "batchlog", batchlog.__file__


#: The test kit's jar (``dev/sbt copyTestkitJar``): fault injection and the halt-after-rewind-step
#: listener, never part of the product jar. Sessions that inject faults add it to the class path.
#: ``$BATCHLOG_TESTKIT_JAR`` if set (a long chaos run keeps its own copy while the tree rebuilds)
TESTKIT_JAR = Path(
    os.environ.get("BATCHLOG_TESTKIT_JAR") or REPO / "tests" / "jars" / "batchlog-testkit.jar"
)
FAULT_MANAGER = "io.batchlog.testkit.FaultInjectingCheckpointFileManager"
HALT_LISTENER = "io.batchlog.testkit.HaltAfterRewindStep"
STEP_LISTENER_KEY = "spark.batchlog.rewind.stepListener"
HALT_AFTER_STEP_KEY = "spark.batchlog.test.haltAfterRewindStep"


def testkit_jar_path() -> str:
    """The test kit's jar; ``FileNotFoundError`` saying how to build it if it is missing."""
    if not TESTKIT_JAR.is_file():
        raise FileNotFoundError(
            f"The batchlog test kit jar is not built ({TESTKIT_JAR}): run `dev/sbt copyTestkitJar` "
            f"in {REPO} (dev/test does), then rerun the tests."
        )
    return str(TESTKIT_JAR)


def jars_with_testkit() -> str:
    """``spark.jars`` / ``--jars`` for a process that injects faults: batchlog's and the kit's."""
    return f"{batchlog.jar_path()},{testkit_jar_path()}"


def halt_after_rewind_step_confs(step: str) -> list[str]:
    """CLI ``--conf`` arguments that make a rewind's JVM halt (status 137) after ``step``."""
    return [
        f"--conf=spark.jars={jars_with_testkit()}",
        f"--conf={STEP_LISTENER_KEY}={HALT_LISTENER}",
        f"--conf={HALT_AFTER_STEP_KEY}={step}",
    ]


def pause_after_rewind_step_confs(step: str, pause_dir: Path) -> list[str]:
    """CLI ``--conf`` arguments that make a rewind wait after ``step``: it creates
    ``pause_dir/paused``, then waits for ``pause_dir/resume`` (the test kit's
    ``PauseAfterRewindStep``)."""
    return [
        f"--conf=spark.jars={jars_with_testkit()}",
        f"--conf={STEP_LISTENER_KEY}=io.batchlog.testkit.PauseAfterRewindStep",
        f"--conf=spark.batchlog.test.pauseAfterRewindStep={step}",
        f"--conf=spark.batchlog.test.pauseDir={pause_dir}",
    ]


#: hadoop-aws and its AWS SDK (``dev/setup`` fetches them): ``s3a://`` for the S3 tests.
S3A_CLASSPATH = str(REPO / ".tools" / "storage" / "s3a" / "*")

#: Google's Hadoop connector (``dev/setup`` fetches it): ``gs://`` for the GCS tests.
GCS_CLASSPATH = str(REPO / ".tools" / "storage" / "gcs" / "*")

#: hadoop-azure and what it needs that pyspark lacks (``dev/setup`` fetches them): ``abfs://``
#: for the Azure tests.
ABFS_CLASSPATH = str(REPO / ".tools" / "storage" / "azure" / "*")


MAINTENANCE_INTERVAL = "spark.sql.streaming.stateStore.maintenanceInterval"
MAINTENANCE_S = 2


def get_spark() -> SparkSession:
    """The one session of the test process: local[2], the batchlog jar, quiet logs, and
    ``s3a://``, ``gs://`` and ``abfs://`` on its driver's class path (the ``s3``, ``gcs`` and
    ``abfs`` fixtures point them at their servers)."""
    spark = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .appName("batchlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # a rewind waits out the state store maintenance a stopped query still owes (60 s by
        # default): 2 s keeps the stateful rewind tests short, and their late snapshots early
        .config(MAINTENANCE_INTERVAL, f"{MAINTENANCE_S}s")
        .config("spark.driver.extraClassPath", f"{S3A_CLASSPATH}:{GCS_CLASSPATH}:{ABFS_CLASSPATH}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str | None]) -> Iterator[None]:
    """Sets (``None``: unsets) session confs for the block, then restores the previous values."""
    before = {k: spark.conf.get(k, None) for k in conf}
    try:
        for k, v in conf.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


#: Seconds a test's streaming query, or a helper process, may run before the test fails (instead
#: of hanging CI).
QUERY_TIMEOUT_S = 300


def poll(cond: Callable[[], object], timeout: float, step: float = 0.05) -> bool:
    """Polls ``cond`` until it is true (True) or ``timeout`` seconds pass (False)."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= end:
            return False
        time.sleep(step)
    return True


def wait_until(cond: Callable[[], object], timeout: float, what: str, step: float = 0.05) -> None:
    """Polls ``cond`` until it is true; fails the test, saying ``what`` it waited for, after
    ``timeout`` seconds. The way to wait for an event (never a bare ``time.sleep``)."""
    assert poll(cond, timeout, step), f"timed out after {timeout} s waiting for {what}"


def run_cli(*args: str, timeout: float = QUERY_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``python -m batchlog ARGS`` in a subprocess (its own Spark session, this checkout's
    package)."""
    return subprocess.run(
        [sys.executable, "-m", "batchlog", *args],
        cwd=str(REPO),
        env=dict(os.environ, PYTHONPATH=str(PYTHON_DIR)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_here(spark: SparkSession, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI's command ``ARGS`` run on ``spark`` in this process (``batchlog.__main__``'s parser
    and ``run``: its output and exit status as ``run_cli`` gives them), for tests of what a
    command prints and returns. A CLI process costs a JVM's start, about 4 s of CPU; test_cli.py
    and the tests of a command's own session (its defaults, a crash of its JVM) run it as users
    do, with ``run_cli``."""
    from batchlog.__main__ import parser, run

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run(spark, parser().parse_args(list(args)))
    return subprocess.CompletedProcess(["batchlog", *args], rc, out.getvalue(), err.getvalue())


def await_query(query: Any, output_dir: Path | str) -> None:
    """Waits for an ``availableNow`` query to finish (raising its error), at most
    ``QUERY_TIMEOUT_S``; then waits for its writer lease to go (``wait_lease_released``)."""
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT_S)
        assert finished, f"the query writing {output_dir} ran over {QUERY_TIMEOUT_S} s"
    finally:
        if query.isActive:
            query.stop()
        wait_lease_released(output_dir)


#: The writer lease a running query holds in its sink's ``_spark_metadata``.
LEASE_FILE = "_batchlog-lease.json"


def wait_lease_released(output_dir: Path | str, timeout_s: float = 30.0) -> None:
    """Waits until the sink's writer lease is gone, as it goes just after a query's thread ends.

    ``awaitTermination`` returns a moment before the query's thread has ended; tests that
    snapshot the sink right after a query wait for this, so that the lease's removal does not
    land inside the snapshot.
    """
    lease = Path(output_dir) / "_batchlog" / LEASE_FILE
    wait_until(lambda: not lease.exists(), timeout_s, f"{lease} to go after its query", step=0.02)


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """Stops the process group ``proc`` leads (started with ``start_new_session``: a JVM and
    anything it forked) by PID: SIGTERM, then SIGKILL if it is still there after 30 s."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


#: The JDK's ``jcmd``: a JVM's live objects counted from outside, no py4j needed (a Connect
#: server, a driver in another process).
JCMD = shutil.which("jcmd")


def live_instances(pid: int) -> Counter[str]:
    """Live instances by class in JVM ``pid`` (the histogram collects first)."""
    out = subprocess.run(
        [str(JCMD), str(pid), "GC.class_histogram"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    counts: Counter[str] = Counter()
    for m in re.finditer(r"^\s*\d+:\s+(\d+)\s+\d+\s+(\S+)", out, re.M):
        counts[m.group(2)] += int(m.group(1))
    return counts


def settle(spark: SparkSession) -> None:
    """Lets the JVM free what Python no longer holds. py4j frees a JVM object once Python drops
    its proxy; a proxy whose methods were called sits in a reference cycle (its cached methods
    name it), which Python's cycle collector breaks on its own schedule, or now. The frees go to
    the JVM from py4j's finalizer thread, one request at a time: all of them have landed once its
    queue is empty and the thread is back in its idle wait (a sleep, not a request)."""
    # Spark's events of an ended execution hold its plan (the read's table and file index) until
    # every listener has had them, on the listener bus's threads
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(30000)  # type: ignore[union-attr]
    gc.collect()
    queue = spark.sparkContext._gateway._gateway_client.finalizer_deque  # type: ignore[union-attr]
    (worker,) = [t for t in threading.enumerate() if isinstance(t, FinalizerWorker)]

    def idle() -> bool:
        frame = sys._current_frames().get(worker.ident or -1)
        return (
            not queue
            and frame is not None
            and "sleep" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        )

    deadline = time.monotonic() + 30
    while not idle():
        if time.monotonic() > deadline:
            raise RuntimeError("py4j's finalizer thread did not go idle in 30 s")
        time.sleep(0.05)


#: A data file's uuid in a batch-tagged name (``part-...-batch-<b>-<uuid>...``).
UUID = re.compile(rb"-batch-\d+-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


def rot_compact(compact: Path, batch: int, field: str) -> None:
    """Bit rot in ``compact``: one digit of batch ``batch``'s first line changed (``field``: a
    numeric field's first digit, or ``path``: its uuid's last digit), the file's length and
    modification time kept, its checksum file gone (its JSON stays valid)."""
    st = compact.stat()
    data = bytearray(compact.read_bytes())
    end = data.index(f',"batchId":{batch}}}'.encode())
    start = data.rindex(b"\n", 0, end) + 1
    line = bytes(data[start:end])
    if field == "path":  # the uuid's last digit
        uuid = UUID.search(line)
        assert uuid, line
        at = start + max(i for i in range(*uuid.span(1)) if chr(line[i]).isdigit())
    else:
        at = start + line.index(f'"{field}":'.encode()) + len(field) + 3  # the value's 1st digit
    digit = chr(data[at])
    assert digit.isdigit(), (field, digit)
    data[at] = ord("1" if digit == "9" else str(int(digit) + 1))
    compact.write_bytes(bytes(data))
    compact.with_name(f".{compact.name}.crc").unlink(missing_ok=True)
    os.utime(compact, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert compact.stat().st_size == st.st_size and compact.stat().st_mtime_ns == st.st_mtime_ns
