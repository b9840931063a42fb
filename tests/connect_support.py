"""A real Spark Connect server for the tests that drive batchlog through a Connect client.

The server is Spark's own ``org.apache.spark.sql.connect.service.SparkConnectServer``, launched
through pyspark's ``bin/spark-submit`` (``local[2]``, the batchlog jar on ``--jars``) in its own
process group, on loopback, and stopped by PID. Its gRPC port is 0: the server binds a free port
itself (no pick-then-bind race with the other processes of a test run) and logs which one it got;
the server counts as up once that log line is there and the port accepts connections.

The client side is ``pyspark.sql.connect.session.SparkSession``, used directly: its builder
coexists with the suite's classic session (``conftest.spark``) in one process. pyspark's generic
``pyspark.sql.SparkSession.builder.remote(url).getOrCreate()`` does not: with a classic
``SparkContext`` up it raises ``SESSION_ALREADY_EXIST``, and without one it sets
``SPARK_CONNECT_MODE_ENABLED`` in ``os.environ``, which switches ``pyspark.sql.functions`` (and any
later ``SparkSession.builder``) to Connect for the rest of the process. Tests on a Connect session
therefore build columns with ``pyspark.sql.connect.functions``, not ``pyspark.sql.functions``.

The client needs pyspark's ``connect`` extra (pandas, pyarrow, grpcio, grpcio-status,
googleapis-common-protos, protobuf, zstandard), pinned in ``python/requirements-dev.txt``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import batchlog
import pyspark
import pytest
from pyspark.sql.connect.session import SparkSession as ConnectSession
from support import stop_group

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: Seconds the server may take from spark-submit to accepting connections.
STARTUP_TIMEOUT_S = 120

#: The server's settings (``org.apache.spark.sql.connect.config.Connect`` in spark-connect 4.3).
BINDING_ADDRESS_KEY = "spark.connect.grpc.binding.address"
BINDING_PORT_KEY = "spark.connect.grpc.binding.port"

#: batchlog's session extensions (``spark.sql.extensions``): its SQL, which the Python API uses over
#: Connect.
BATCHLOG_EXTENSIONS = batchlog.EXTENSIONS_CLASS
#: The extensions the shared server (``connect_url``) names; None: none. The bare set-up: the jar
#: brings batchlog's SQL (``META-INF/services``), so the shared server names none.
CONNECT_EXTENSIONS: str | None = None

_STARTED_RE = re.compile(r"Spark Connect server started at: 127\.0\.0\.1:([0-9]+)")


def batchlog_server_conf(extensions: str | None = BATCHLOG_EXTENSIONS) -> dict[str, str]:
    """Server settings for batchlog: its commit protocol for every file sink, and ``extensions``
    (None: no ``spark.sql.extensions``)."""
    conf = {"spark.sql.streaming.commitProtocolClass": batchlog.COMMIT_PROTOCOL_CLASS}
    if extensions is not None:
        conf["spark.sql.extensions"] = extensions
    return conf


def _server_env(root: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH",
            "BATCHLOG_JAR",
            "PYSPARK_SUBMIT_ARGS",
            "SPARK_CONF_DIR",  # Spark's default log4j2 config: INFO, which has the "started" line
            "SPARK_REMOTE",
            "SPARK_CONNECT_MODE_ENABLED",
        )
    }
    local = root / "local"
    local.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(local),
            # Python UDFs the server runs: this virtualenv's interpreter
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    return env


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def stop_connect_server(proc: subprocess.Popen[bytes]) -> None:
    """Stops the server's process group (the JVM and any Python worker it forked) by PID."""
    stop_group(proc)


def start_connect_server(
    root: Path,
    jars: Sequence[str],
    conf: Mapping[str, str],
    timeout_s: float = STARTUP_TIMEOUT_S,
) -> tuple[subprocess.Popen[bytes], str]:
    """Starts a Spark Connect server (``local[2]``, ``jars`` on ``--jars``, ``conf`` as
    ``--conf``) on a free loopback port, its log in ``root/connect-server.log``; waits until it
    accepts connections. Returns the process (stop it with ``stop_connect_server``) and its
    ``sc://127.0.0.1:<port>`` URL. Fails with the log's tail if it is not up in ``timeout_s``."""
    root.mkdir(parents=True, exist_ok=True)
    log = root / "connect-server.log"
    settings = {
        BINDING_ADDRESS_KEY: "127.0.0.1",
        BINDING_PORT_KEY: "0",  # the server binds a free port itself and logs it
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.warehouse.dir": str(root / "warehouse"),
        **conf,
    }
    cmd = [
        str(SPARK_SUBMIT),
        "--master", "local[2]",
        "--class", CONNECT_SERVER_CLASS,
        "--name", "batchlog-connect-tests",
        "--driver-memory", "1g",
    ]  # fmt: skip
    if jars:
        cmd += ["--jars", ",".join(jars)]
    for k, v in settings.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd.append("spark-internal")  # the primary resource of a class inside Spark's own jars
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            env=_server_env(root),
            cwd=str(root),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped whole, by PID
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            m = _STARTED_RE.search(log.read_text(errors="replace"))
            if m and _accepts(int(m.group(1))):
                return proc, f"sc://127.0.0.1:{m.group(1)}"
            if proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited with {proc.returncode}" if proc.poll() is not None else "timed out"
                raise RuntimeError(
                    f"the Spark Connect server did not start in {timeout_s} s ({why}); "
                    f"{log}:\n{log.read_text(errors='replace')[-6000:]}"
                )
            time.sleep(0.2)
    except BaseException:
        stop_connect_server(proc)
        raise


def _check_extensions_loaded(log: Path, extensions: str | None) -> None:
    """Spark only logs a warning when it cannot load a ``spark.sql.extensions`` class; fail."""
    if extensions is None:
        return
    text = log.read_text(errors="replace")
    for cls in extensions.split(","):
        if f"Cannot use {cls.strip()} to configure session extensions" in text:
            raise RuntimeError(
                f"the Spark Connect server could not load {cls}; {log}:\n{text[-6000:]}"
            )


@pytest.fixture(scope="session")
def connect_url(batchlog_jar: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:<port>`` of one Spark Connect server for the test session, with the
    batchlog jar, batchlog's commit protocol for every file sink and ``CONNECT_EXTENSIONS``."""
    root = tmp_path_factory.mktemp("connect")
    proc, url = start_connect_server(root, [batchlog_jar], batchlog_server_conf(CONNECT_EXTENSIONS))
    try:
        _check_extensions_loaded(root / "connect-server.log", CONNECT_EXTENSIONS)
        yield url
    finally:
        stop_connect_server(proc)


@pytest.fixture
def connect_spark(connect_url: str) -> Iterator[ConnectSession]:
    """A Connect client session on the shared server, for one test (its own server-side
    session: confs and temporary views do not leak between tests); stopped after it."""
    session = ConnectSession.builder.remote(connect_url).getOrCreate()
    try:
        yield session
    finally:
        session.stop()
