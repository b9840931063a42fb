"""Plain Spark for reading sinks back: one PySpark process per test process, without batchlog.

Most tests end by asking what plain Spark (no batchlog jar, Spark's own commit protocol) reads from
a sink. Each such read used to start its own PySpark process: about 12 s of CPU, most of it the
JVM's start, a hundred times and more a run. Now each test process (pytest-xdist worker) starts
one reader (``tests/apps/plain_reader.py``) on its first read and asks it for every read after; it
is still a separate process and JVM without batchlog, proven so when it starts, and each read
builds its DataFrame anew from the files. A reader that fails or stops answering is stopped (its
process group) and the next read starts a new one; the last one is stopped when the test process
exits (its standard input closes, then by PID).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from support import ABFS_CLASSPATH, GCS_CLASSPATH, QUERY_TIMEOUT_S, REPO, S3A_CLASSPATH

APP = REPO / "tests" / "apps" / "plain_reader.py"
PREFIX = "PLAIN-READER "
#: Spark's own file-sink commit protocol (the default of spark.sql.streaming.commitProtocolClass).
VANILLA_COMMIT_PROTOCOL = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"


def plain_env() -> dict[str, str]:
    """The environment of a plain PySpark process: nothing that would give it batchlog."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "BATCHLOG_JAR", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR")
    }
    env["PYSPARK_PYTHON"] = sys.executable
    return env


class PlainReader:
    """The test process's plain-Spark reader; see the module's text."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()

    def sinks(self, sinks: Iterable[Sequence[str]]) -> list[dict[str, Any]]:
        """Per ``(format, path)``: ``count``, ``rows`` (dicts), ``columns``, ``inputFiles``."""
        found: list[dict[str, Any]] = self._ask(
            {"op": "sinks", "sinks": [[fmt, str(path)] for fmt, path in sinks]}
        )
        return found

    def ids(
        self, out: Path | str, column: str = "id", hadoop: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """A parquet sink's ``rows``, sorted ``ids`` and rows per ``part``; ``hadoop``: settings
        to reach its store (``s3a://``, ``gs://``: the reader has hadoop-aws and Google's
        connector on its class path)."""
        req = {"op": "ids", "path": str(out), "column": column, "hadoop": dict(hadoop or {})}
        found: dict[str, Any] = self._ask(req)
        return found

    def _ask(self, req: dict[str, Any]) -> Any:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps(req) + "\n")
                self._proc.stdin.flush()
                reply = self._reply(f"reading {req}")
            except BaseException:
                self.close()
                raise
            if "error" in reply:
                raise AssertionError(f"plain Spark failed reading {req}:\n{reply['error']}")
            return reply["ok"]

    def _start(self) -> None:
        self.close()
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, str(APP), f"{S3A_CLASSPATH}:{GCS_CLASSPATH}:{ABFS_CLASSPATH}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=plain_env(),
            cwd=str(REPO),
            text=True,
            start_new_session=True,
        )
        self._lines = queue.Queue()
        threading.Thread(
            target=self._pump, args=(self._proc.stdout, self._lines), daemon=True
        ).start()
        plain = self._reply("starting")["plain"]
        # Prove the reader really is plain Spark.
        assert plain["spark.jars"] == "", plain
        assert plain["batchlogClassLoadable"] is False, plain
        assert plain["commitProtocolClass"] == VANILLA_COMMIT_PROTOCOL, plain

    @staticmethod
    def _pump(stdout: IO[str], lines: queue.Queue[str | None]) -> None:
        """The reader's answer lines into ``lines``, then None at its end."""
        for line in stdout:
            if line.startswith(PREFIX):
                lines.put(line[len(PREFIX) :])
        lines.put(None)

    def _reply(self, doing: str) -> dict[str, Any]:
        """The reader's next answer, within the tests' query timeout."""
        try:
            line = self._lines.get(timeout=QUERY_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(
                f"plain Spark gave no answer in {QUERY_TIMEOUT_S} s {doing}:\n{self._stderr()}"
            ) from None
        if line is None:
            raise AssertionError(f"plain Spark exited {doing}:\n{self._stderr()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _stderr(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-5000:]

    def close(self) -> None:
        """Stops the reader: its input closed, then its process group killed if it lingers."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                pass
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None


#: The test process's reader.
READER = PlainReader()
atexit.register(READER.close)
