"""Storage servers for the storage tests, started by the tests themselves: a single-node HDFS
(Hadoop's ``MiniDFSCluster`` in its own JVM, ``tests/servers/MiniHdfs.java``) on a free loopback
port, stopped by PID; and what a test needs to look at a sink on it from outside (Hadoop's own
``FileSystem``, through the session's JVM: nothing is read from the local disk).

``dev/setup`` fetches ``hadoop-client-minicluster`` of the Hadoop inside pyspark into
``.tools/storage``; the cluster runs on pyspark's own Hadoop client jars plus that one.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession
from support import REPO

PYSPARK_JARS = Path(pyspark.__file__).parent / "jars"
STORAGE_TOOLS = REPO / ".tools" / "storage"
UUID_RE = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def hadoop_version() -> str:
    """The Hadoop version inside pyspark (its ``hadoop-client-api`` jar)."""
    for jar in PYSPARK_JARS.iterdir():
        m = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name)
        if m:
            return m.group(1)
    raise RuntimeError(f"no hadoop-client-api jar in {PYSPARK_JARS}")


def minicluster_jar() -> Path:
    jar = STORAGE_TOOLS / f"hadoop-client-minicluster-{hadoop_version()}.jar"
    if not jar.is_file():
        pytest.fail(f"{jar} is missing: run `dev/setup` in {REPO} (dev/test does)", pytrace=False)
    return jar


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stops the server's process group (the JVM and anything it forked) by PID."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``hdfs://127.0.0.1:<port>`` of a single-node HDFS started for the session."""
    root = tmp_path_factory.mktemp("hdfs")
    ready = root / "ready"
    log = root / "minihdfs.log"
    cp = os.pathsep.join([str(PYSPARK_JARS / "*"), str(minicluster_jar())])
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                "java",
                "-Xmx512m",
                "-cp",
                cp,
                str(REPO / "tests" / "servers" / "MiniHdfs.java"),
                "0",
                str(root / "data"),
                str(ready),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped whole, by PID
        )
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"MiniHdfs did not start:\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        yield ready.read_text().strip()
    finally:
        _stop(proc)


class RemoteFs:
    """A Hadoop ``FileSystem`` seen through the session's JVM, for assertions on a remote sink."""

    def __init__(self, spark: SparkSession, uri: str) -> None:
        jvm = spark._jvm
        assert jvm is not None
        self._jvm = jvm
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        self._fs = jvm.org.apache.hadoop.fs.Path(uri).getFileSystem(conf)

    def _path(self, uri: str):  # type: ignore[no-untyped-def]
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def exists(self, uri: str) -> bool:
        return bool(self._fs.exists(self._path(uri)))

    def names(self, uri: str) -> list[str]:
        return sorted(str(s.getPath().getName()) for s in self._fs.listStatus(self._path(uri)))

    def files(self, uri: str) -> list[str]:
        """Every file below ``uri`` (full URIs)."""
        out = []
        it = self._fs.listFiles(self._path(uri), True)
        while it.hasNext():
            out.append(str(it.next().getPath().toString()))
        return sorted(out)

    def data_files_by_batch(self, out: str) -> dict[int, set[str]]:
        """The sink's data files whose batch-tagged names say which batch wrote them."""
        by_batch: dict[int, set[str]] = {}
        for f in self.files(out):
            if "/_spark_metadata/" in f:
                continue
            m = re.fullmatch(rf"part-[0-9]{{5}}-batch-([0-9]+)-{UUID_RE}\..*", f.rsplit("/", 1)[1])
            if m:
                by_batch.setdefault(int(m.group(1)), set()).add(f)
        return by_batch

    def log_names(self, out: str) -> list[str]:
        """The sink's log files ``N`` / ``N.compact``, in batch order."""
        log = self.names(f"{out}/_spark_metadata")
        names = [n for n in log if re.fullmatch(r"[0-9]+(\.compact)?", n)]
        return sorted(names, key=lambda n: int(n.split(".")[0]))
