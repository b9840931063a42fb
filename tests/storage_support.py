"""Storage servers for the storage tests, started by the tests themselves on free loopback ports
and stopped by PID: a single-node HDFS (Hadoop's ``MiniDFSCluster`` in its own JVM,
``tests/servers/MiniHdfs.java``) and an S3-compatible store (moto in server mode,
``tests/servers/s3_server.py``, reached through ``s3a://``); and what a test needs to look at a
sink there from outside (Hadoop's own ``FileSystem``, through the session's JVM: nothing is read
from the local disk).

``dev/setup`` fetches ``hadoop-client-minicluster`` of the Hadoop inside pyspark into
``.tools/storage`` (the cluster runs on pyspark's own Hadoop client jars plus that one), and
hadoop-aws with its AWS SDK into ``.tools/storage/s3a``, which ``support.get_spark`` puts on the
test session's driver class path.

For the compaction benchmark at sizes moto cannot hold, :func:`start_seaweedfs` starts SeaweedFS
(``dev/seaweedfs`` installs it) the same way: free loopback ports, its own process group, stopped
by PID. The tests keep moto.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from conftest import row_tuples
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support import (
    ABFS_CLASSPATH,
    GCS_CLASSPATH,
    LEASE_FILE,
    QUERY_TIMEOUT_S,
    REPO,
    S3A_CLASSPATH,
    stop_group,
    wait_until,
)

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


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stops the server's process group (the JVM and anything it forked) by PID."""
    stop_group(proc)


def _wait_ready(proc: subprocess.Popen[bytes], ready: Path, log: Path, what: str) -> str:
    deadline = time.monotonic() + 180
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)
    return ready.read_text().strip()


def start_s3(
    root: Path, ignore_if_none_match: bool = False, faults: Path | None = None
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Starts moto in server mode (its own process group) with its request log in ``root``;
    returns the process, its endpoint ``http://127.0.0.1:<port>`` and the log. With
    ``ignore_if_none_match`` the server ignores conditional creates; with ``faults`` it checks
    copy conditions as S3 does and injects the faults that file names (see ``s3_server.py``)."""
    root.mkdir(parents=True, exist_ok=True)
    ready, log = root / "ready", root / "requests.log"
    ready.unlink(missing_ok=True)  # a stale one would name a server that is gone
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "servers" / "s3_server.py"), str(ready)]
            + (["--ignore-if-none-match"] if ignore_if_none_match else [])
            + (["--faults", str(faults)] if faults is not None else []),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        return proc, _wait_ready(proc, ready, log, "the S3 server (moto)"), log
    except BaseException:
        stop_server(proc)
        raise


#: SeaweedFS's ``weed`` (``dev/seaweedfs`` installs it; the version in its file name).
SEAWEEDFS_DIR = REPO / ".tools" / "seaweedfs"


def _free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports the kernel picked (held together, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SeaweedFs:
    """A SeaweedFS started by :func:`start_seaweedfs`: its process, S3 endpoint, master (for
    vacuums) and Prometheus metrics (the S3 gateway's request counter), and its log."""

    proc: subprocess.Popen[bytes]
    endpoint: str
    master: str
    metrics: str
    log: Path

    def requests(self) -> int:
        """S3 requests served so far (``SeaweedFS_s3_request_total``, every type and status)."""
        with urllib.request.urlopen(self.metrics, timeout=30) as r:
            text = r.read().decode()
        return int(sum(float(m) for m in METRIC_RE.findall(text)))

    def vacuum(self) -> None:
        """Reclaims the disk of objects deleted so far (the master's vacuum of every volume with
        garbage; SeaweedFS frees a deleted object's bytes only then). The filer hands a deleted
        object's chunks to the volume servers in batches every 1.1 s: those go first."""
        time.sleep(3)
        url = f"{self.master}/vol/vacuum?garbageThreshold=0.0001"
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=1800):
            pass


METRIC_RE = re.compile(r"^SeaweedFS_s3_request_total\{[^}]*\} (\S+)$", re.M)


def start_seaweedfs(root: Path) -> SeaweedFs:
    """Starts a single-process SeaweedFS (``weed server``: master, volume server, filer and S3
    gateway) with its data in ``root``, every port a free loopback one, in its own process group;
    returns once its S3 gateway stored and deleted an object. Its only identity is the tests'
    ``testing`` / ``testing`` key (the one :func:`s3a_conf` gives S3A). The master's own vacuum
    is left to objects that are almost all garbage (``SeaweedFs.vacuum`` does the rest, when the
    caller chooses: not in the middle of a timing) and it reports no telemetry."""
    bins = sorted(SEAWEEDFS_DIR.glob("weed-*"))
    if not bins:
        raise FileNotFoundError(f"no SeaweedFS in {SEAWEEDFS_DIR}: run `dev/seaweedfs` in {REPO}")
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    ports = _free_ports(9)
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, metrics = ports
    log = root / "seaweedfs.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    args = [
        str(bins[-1]),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={root / 'data'}",
        f"-metricsPort={metrics}",
        "-metricsIp=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        "-master.telemetry=false",
        "-master.garbageThreshold=0.95",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-filer.localSocket={root / 'filer.sock'}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.localSocket={root / 's3.sock'}",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    store = SeaweedFs(
        proc,
        f"http://127.0.0.1:{s3}",
        f"http://127.0.0.1:{master}",
        f"http://127.0.0.1:{metrics}/metrics",
        log,
    )
    try:
        _wait_seaweedfs(store)
        return store
    except BaseException:
        stop_server(proc)
        raise


def _wait_seaweedfs(store: SeaweedFs) -> None:
    """Until an object can be put and deleted (the volume server has joined the master)."""
    s3 = s3_client(store.endpoint)
    bucket, deadline, last = "seaweedfs-ready", time.monotonic() + 180, ""
    while True:
        if store.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"SeaweedFS did not start ({last}):\n{store.log.read_text()[-4000:]}"
            )
        try:
            s3.create_bucket(Bucket=bucket)
        except Exception as e:  # noqa: BLE001 - not up yet, or the bucket is there
            last = repr(e)
        try:
            s3.put_object(Bucket=bucket, Key="ready", Body=b"ready")
            s3.delete_object(Bucket=bucket, Key="ready")
            s3.delete_bucket(Bucket=bucket)
            store.requests()
            return
        except Exception as e:  # noqa: BLE001 - not up yet
            last = repr(e)
        time.sleep(0.5)


#: The bucket the S3 tests write to (created by the ``s3`` fixture).
S3_BUCKET = "batchlog-tests"


def s3a_conf(endpoint: str) -> dict[str, str]:
    """Hadoop settings for ``s3a://`` on the moto server at ``endpoint`` (path-style, no TLS)."""
    return {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": "testing",
        "fs.s3a.secret.key": "testing",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client of the test servers (moto, SeaweedFS), with the tests' only key."""
    import boto3  # moto[server] brings it

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


#: A request in moto's log (werkzeug's, with or without colour codes): method and path.
REQUEST_LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/')


def create_bucket(endpoint: str, bucket: str) -> None:
    s3_client(endpoint).create_bucket(Bucket=bucket)


def cli_conf(store: str, spark: SparkSession) -> list[str]:
    """``--conf`` arguments (they go before the command) that let the CLI's own session reach
    ``store`` as the test's does."""
    if store.startswith("s3a://"):
        classpath, keys = S3A_CLASSPATH, s3a_conf("").keys()
    elif store.startswith("gs://"):
        classpath, keys = GCS_CLASSPATH, gcs_conf("").keys()
    elif store.startswith("abfs://"):
        classpath, keys = ABFS_CLASSPATH, abfs_conf("").keys()
    else:
        return []
    hconf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    args = ["--conf", f"spark.driver.extraClassPath={classpath}"]
    for k in keys:
        args += ["--conf", f"spark.hadoop.{k}={hconf.get(k)}"]
    return args


#: The bucket the GCS tests write to (the ``gcs`` fixture's server starts with it).
GCS_BUCKET = "batchlog-tests"


def gcs_conf(endpoint: str) -> dict[str, str]:
    """Hadoop settings for ``gs://`` through Google's connector, on fake-gcs-server at
    ``endpoint``. Hadoop 3.5's core-default.xml has defaults for its own GCS module under the
    same keys, sizes written as ``64m``, which Google's connector reads as plain numbers: they
    are set here in bytes. Google's newest connector here (3.1.3) was built for Hadoop 3.4."""
    return {
        "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
        "fs.gs.storage.root.url": endpoint,
        "fs.gs.auth.type": "UNAUTHENTICATED",
        "fs.gs.project.id": "batchlog-tests",
        "fs.gs.block.size": str(64 << 20),
        "fs.gs.rewrite.max.chunk.size": str(512 << 20),
        "fs.gs.outputstream.buffer.size": str(8 << 20),
        "fs.gs.inputstream.inplace.seek.limit": str(8 << 20),
        "fs.gs.inputstream.min.range.request.size": str(2 << 20),
        # Parquet's vectored reads call a Hadoop 3.4 method that 3.5 changed (NoSuchMethodError
        # in the connector's vectored read): plain reads instead
        "parquet.hadoop.vectored.io.enabled": "false",
    }


def start_gcs(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Starts fake-gcs-server (``dev/fake-gcs-server`` builds it) on a free loopback port, behind
    the fault step ``servers/gcs_proxy.py`` (both in one process group), holding the bucket
    :data:`GCS_BUCKET` in memory (its file-system backend loses the connector's directory
    objects: a checkpoint's ``sources/0`` is then not found); returns the process and the step's
    endpoint ``http://127.0.0.1:<port>``. Faults are injected with :func:`inject_gcs`; requests
    are logged in ``root/requests.log``."""
    built = subprocess.run(
        [str(REPO / "dev" / "fake-gcs-server")], capture_output=True, text=True, timeout=1200
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (root / "data" / GCS_BUCKET).mkdir(parents=True, exist_ok=True)
    [port] = _free_ports(1)
    upstream = f"http://127.0.0.1:{port}"
    faults = root / "faults.json"
    faults.write_text("{}")
    ready, log = root / "ready", root / "requests.log"
    server = [built.stdout.strip(), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
    server += ["-backend", "memory", "-data", str(root / "data"), "-external-url", upstream]
    server += ["-log-level", "warn"]
    step = [sys.executable, str(REPO / "tests" / "servers" / "gcs_proxy.py"), upstream]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*step, str(ready), str(faults), "--", *server],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        endpoint = _wait_ready(proc, ready, log, "fake-gcs-server and its fault step")
        _FAULTS[endpoint] = faults
        _LOGS[endpoint] = log
        return proc, endpoint
    except BaseException:
        stop_server(proc)
        raise


#: The fault file of each endpoint with a fault step this process started (GCS, Azure: see
#: ``servers/gcs_proxy.py``, ``servers/azure_proxy.py``).
_FAULTS: dict[str, Path] = {}
#: The request log of each.
_LOGS: dict[str, Path] = {}


def endpoint_of(kind: str) -> str:
    """The endpoint of this process's server of ``kind`` (``s3``, ``gcs``, ``abfs``)."""
    return _SERVERS[kind][1]


def _of(kind: str, files: dict[str, Path]) -> Path:
    """The file of this process's server of ``kind`` (``gcs``, ``abfs``) in ``files``."""
    [file] = [files[endpoint] for k, (_, endpoint) in _SERVERS.items() if k == kind]
    return file


def gcs_requests(kind: str = "gcs") -> list[str]:
    """``METHOD /path?query STATUS`` of every request this process's GCS (or Azure: ``abfs``)
    server was sent, in order (a lost answer's status: ``503/lost:<the store's>``)."""
    lines = _of(kind, _LOGS).read_text(errors="replace").splitlines()
    return [
        f"{m.group(1)} {m.group(2)} {m.group(3)}"
        for m in map(re.compile(r'^"([A-Z]+) (\S+) HTTP/1\.1" (\S+)').match, lines)
        if m
    ]


def inject_gcs(**faults: int | str) -> None:
    """Sets the faults of this process's GCS server (``lose_answer=REGEX``, ``fail_publish=``,
    see ``servers/gcs_proxy.py``); none: clears them."""
    _of("gcs", _FAULTS).write_text(json.dumps(faults))


def inject_abfs(**faults: int | str) -> None:
    """Sets the faults of this process's Azurite (``lose_answer=REGEX``, ``fail_publish=``,
    ``fail_copy=``, see ``servers/azure_proxy.py``); none: clears them."""
    _of("abfs", _FAULTS).write_text(json.dumps(faults))


def create_gcs_bucket(endpoint: str, name: str) -> None:
    """Creates bucket ``name`` on the GCS test server at ``endpoint`` (its JSON API)."""
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=batchlog-tests",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


@contextlib.contextmanager
def gcs_fault_bucket(spark: SparkSession, retries: int = 1) -> Iterator[tuple[str, str]]:
    """A new bucket on this process's GCS server: its ``gs://`` URI and name. Google's connector
    retries a failed request ten times, over two minutes: the bucket's file systems, made in the
    block (Hadoop caches one a bucket), retry ``retries`` times, so a test of a fault the
    connector cannot get past takes seconds."""
    [endpoint] = [endpoint for kind, (_, endpoint) in _SERVERS.items() if kind == "gcs"]
    name = f"faults-{uuid.uuid4().hex[:10]}"
    create_gcs_bucket(endpoint, name)
    hconf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    key = "fs.gs.http.max.retry"
    before = hconf.get(key)
    hconf.set(key, str(retries))
    try:
        yield f"gs://{name}", name
    finally:
        if before is None:
            hconf.unset(key)
        else:
            hconf.set(key, before)


@contextlib.contextmanager
def abfs_fault_container(spark: SparkSession) -> Iterator[tuple[str, str]]:
    """A new container on this process's Azurite: its ``abfs://`` URI and name. ABFS retries a
    failed request up to 30 times, 3 to 30 s apart: the container's file systems, made in the
    block (Hadoop caches one a container), retry once, 0.1 s later, so a test of a fault the
    driver cannot get past takes seconds."""
    name = f"faults-{uuid.uuid4().hex[:10]}"
    hconf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    quick = {
        "fs.azure.io.retry.max.retries": "1",
        "fs.azure.io.retry.min.backoff.interval": "100",
        "fs.azure.io.retry.backoff.interval": "100",
        "fs.azure.io.retry.max.backoff.interval": "100",
    }
    before = {k: hconf.get(k) for k in quick}
    for k, v in quick.items():
        hconf.set(k, v)
    try:
        yield f"abfs://{name}@{ABFS_HOST}", name
    finally:
        for k, v in before.items():
            if v is None:
                hconf.unset(k)
            else:
                hconf.set(k, v)


def gcs_faults_seen(kind: str = "gcs") -> list[str]:
    """``bucket/object status`` of each request the GCS (or Azure: ``abfs``) server's fault step
    answered in place of the store, in order."""
    file = _of(kind, _FAULTS)
    seen = file.with_name(file.name + ".lost")
    return seen.read_text().splitlines() if seen.exists() else []


#: Azurite's well-known development account and key (public: the emulator accepts only these).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
#: The container the Azure tests write to (the connector creates it on first use).
ABFS_CONTAINER = "batchlog-tests"
#: The host name in ``abfs://`` URIs: the account's, as on Azure; the endpoint setting sends
#: every request to Azurite instead (path-style: ``http://127.0.0.1:<port>/<account>/...``).
ABFS_HOST = f"{AZURITE_ACCOUNT}.dfs.core.windows.net"


def abfs_conf(endpoint: str) -> dict[str, str]:
    """Hadoop settings for ``abfs://`` on Azurite at ``endpoint`` (``127.0.0.1:<port>``).
    Azurite serves the Blob API only, no Data Lake (``dfs``) endpoint: Hadoop 3.5's ABFS driver
    reaches a flat-namespace account through the Blob API (``fs.azure.fns.account.service.type``),
    as it does on Azure. Its default HTTP client needs TLS; Azurite here is plain HTTP."""
    return {
        f"fs.azure.account.key.{ABFS_HOST}": AZURITE_KEY,
        "fs.azure.abfs.endpoint": endpoint,
        "fs.azure.always.use.https": "false",
        "fs.azure.account.auth.type": "SharedKey",
        "fs.azure.account.hns.enabled": "false",
        "fs.azure.fns.account.service.type": "BLOB",
        "fs.azure.ingress.service.type": "BLOB",
        "fs.azure.createRemoteFileSystemDuringInitialization": "true",
        "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
        # the driver's metrics go to the account at the JVM's exit, retried against a server the
        # test stopped first: the JVM then outlived its test by hours
        "fs.azure.metrics.collection.enabled": "false",
    }


#: Azurite's blob service (``dev/setup`` installs it from npm).
AZURITE = REPO / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"


def start_azurite(root: Path, faults: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    """Starts Azurite's blob service on a free loopback port, in its own process group, its
    data in ``root``; with ``faults``, behind the fault step ``servers/azure_proxy.py`` (both in
    one process group; faults injected with :func:`inject_abfs`, requests logged in
    ``root/requests.log``). Returns the process and the endpoint ``127.0.0.1:<port>``."""
    if not AZURITE.exists():
        pytest.fail(f"{AZURITE} is missing: run `dev/setup` in {REPO}", pytrace=False)
    root.mkdir(parents=True, exist_ok=True)
    [port] = _free_ports(1)
    log = root / "azurite.log"
    args = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(root / "data")]
    args += ["--skipApiVersionCheck", "--loose", "--silent"]
    if faults:
        fault_file, ready, requests = root / "faults.json", root / "ready", root / "requests.log"
        fault_file.write_text("{}")
        step = [sys.executable, str(REPO / "tests" / "servers" / "azure_proxy.py")]
        step += [f"http://127.0.0.1:{port}", str(ready), str(fault_file), "--"]
        with open(requests, "wb") as out:
            proc = subprocess.Popen(
                [*step, str(AZURITE), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            endpoint = _wait_ready(proc, ready, requests, "Azurite and its fault step")
        except BaseException:
            stop_server(proc)
            raise
        _FAULTS[endpoint] = fault_file
        _LOGS[endpoint] = requests
        return proc, endpoint
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(AZURITE), *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 120
    while "successfully listens" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError(f"Azurite did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


@dataclass
class StoreServer:
    """An object store's test server a script started (``bench/``): S3 (moto) or GCS
    (fake-gcs-server behind its fault step), with what a process needs to reach it."""

    kind: str  # "s3", "gcs" or "abfs"
    endpoint: str
    proc: subprocess.Popen[bytes]
    root: Path

    @property
    def faults(self) -> Path:
        """The fault file (``servers/s3_server.py``, ``servers/gcs_proxy.py``: the same names)."""
        return self.root / "faults.json"

    @property
    def log(self) -> Path:
        """The request log (werkzeug's lines: ``"METHOD /path HTTP/1.1" STATUS``)."""
        return self.root / "requests.log"

    def bucket(self, name: str) -> str:
        """Creates bucket ``name``: its URI (``s3a://name``, ``gs://name``; on ``abfs://``, a
        container ABFS creates on first use)."""
        if self.kind == "abfs":
            return f"abfs://{name}@{ABFS_HOST}"
        if self.kind == "gcs":
            create_gcs_bucket(self.endpoint, name)
            return f"gs://{name}"
        create_bucket(self.endpoint, name)
        return f"s3a://{name}"

    @property
    def hadoop(self) -> dict[str, str]:
        """The Hadoop settings that reach the store."""
        if self.kind == "abfs":
            return abfs_conf(self.endpoint)
        return gcs_conf(self.endpoint) if self.kind == "gcs" else s3a_conf(self.endpoint)

    @property
    def classpath(self) -> str:
        """The connector's jars (a driver class path)."""
        if self.kind == "abfs":
            return ABFS_CLASSPATH
        return GCS_CLASSPATH if self.kind == "gcs" else S3A_CLASSPATH

    def stop(self) -> None:
        stop_server(self.proc)


def start_store(kind: str, root: Path, faults: bool = True) -> StoreServer:
    """Starts the test server of ``kind`` (``s3``, ``gcs``, ``abfs``) in ``root``; on S3 with its
    fault step if ``faults`` (GCS and Azure always have one: it logs their requests)."""
    root.mkdir(parents=True, exist_ok=True)
    if kind == "abfs":
        proc, endpoint = start_azurite(root)
    elif kind == "gcs":
        proc, endpoint = start_gcs(root)
    else:
        fault_file = root / "faults.json"
        if faults:
            fault_file.write_text("{}")
        proc, endpoint, _ = start_s3(root, faults=fault_file if faults else None)
    return StoreServer(kind, endpoint, proc, root)


@pytest.fixture(scope="session")
def gcs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``gs://batchlog-tests`` on fake-gcs-server, one for the test process, reached through
    Google's Hadoop connector; the session's Hadoop configuration points ``gs://`` at it."""
    start = lambda: start_gcs(tmp_path_factory.mktemp("gcs"))  # noqa: E731
    yield from _store(spark, "gcs", GCS_CLASSPATH, start, gcs_conf, f"gs://{GCS_BUCKET}")


@pytest.fixture(scope="session")
def abfs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``abfs://batchlog-tests@devstoreaccount1.dfs.core.windows.net`` on Azurite, one for the
    test process, reached through Hadoop's ABFS driver (Blob API); the session's Hadoop
    configuration points ``abfs://`` at it."""
    start = lambda: start_azurite(tmp_path_factory.mktemp("azurite"))  # noqa: E731
    yield from _store(
        spark, "abfs", ABFS_CLASSPATH, start, abfs_conf, f"abfs://{ABFS_CONTAINER}@{ABFS_HOST}"
    )


def _store(
    spark: SparkSession,
    kind: str,
    classpath: str,
    start: Callable[[], tuple[subprocess.Popen[bytes], str]],
    conf: Callable[[str], dict[str, str]],
    uri: str,
) -> Iterator[str]:
    """A session fixture's body: ``uri`` on this process's server of ``kind`` (started by
    ``start``), its connector's jars (``classpath``) checked first, and the session's Hadoop
    configuration pointed at the server (``conf`` of its endpoint)."""
    if not Path(classpath).parent.is_dir():
        pytest.fail(f"{classpath} is missing: run `dev/setup` in {REPO}", pytrace=False)
    with _one_server(kind, start) as endpoint:
        hconf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        for k, v in conf(endpoint).items():
            hconf.set(k, v)
        yield uri


#: The servers of this test process by kind (``s3``, ``gcs``): a session fixture imported into two
#: test modules is set up once per module, and a second server for one bucket name would leave
#: two views of the bucket: Hadoop's FileSystem, cached by bucket, on the first, and a
#: FileContext made later (which Spark's checkpoint manager uses) on the second, so a file
#: written through one is missing from the other.
_SERVERS: dict[str, tuple[subprocess.Popen[bytes], str]] = {}


@contextlib.contextmanager
def _one_server(
    kind: str, start: Callable[[], tuple[subprocess.Popen[bytes], str]]
) -> Iterator[str]:
    """The endpoint of this process's server of ``kind``, started by ``start`` if there is none;
    the fixture that started it stops it (at the session's end)."""
    started = kind not in _SERVERS
    if started:
        _SERVERS[kind] = start()
    proc, endpoint = _SERVERS[kind]
    try:
        yield endpoint
    finally:
        if started:
            stop_server(proc)
            del _SERVERS[kind]


@pytest.fixture(scope="session")
def s3(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``s3a://batchlog-tests`` on an S3-compatible server (moto) started for the session; the
    session's Hadoop configuration points ``s3a://`` at it."""

    def start() -> tuple[subprocess.Popen[bytes], str]:
        proc, endpoint, _ = start_s3(tmp_path_factory.mktemp("s3"))
        create_bucket(endpoint, S3_BUCKET)
        return proc, endpoint

    yield from _store(spark, "s3", S3A_CLASSPATH, start, s3a_conf, f"s3a://{S3_BUCKET}")


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
                # the flags of the suite's other JVMs (conftest.py: SPARK_SUBMIT_OPTS)
                *os.environ.get("SPARK_SUBMIT_OPTS", "").split(),
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
        yield _wait_ready(proc, ready, log, "MiniHdfs")
    finally:
        stop_server(proc)


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

    # ABFS on Azurite lists a directory twice (its marker blob, and the prefix of the names
    # below it), and every file below it twice through listFiles: names are counted once here.

    def names(self, uri: str) -> list[str]:
        return sorted({str(s.getPath().getName()) for s in self._fs.listStatus(self._path(uri))})

    def files(self, uri: str) -> list[str]:
        """Every file below ``uri`` (full URIs), each once."""
        out = set()
        it = self._fs.listFiles(self._path(uri), True)
        while it.hasNext():
            out.add(str(it.next().getPath().toString()))
        return sorted(out)

    def delete(self, uri: str) -> None:
        self._fs.delete(self._path(uri), True)

    def read_bytes(self, uri: str) -> bytes:
        stream = self._fs.open(self._path(uri))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Writes (or overwrites) one file: damage a test does, never a publish of batchlog's."""
        stream = self._fs.create(self._path(uri), True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def copy(self, src: str, dst: str) -> None:
        """Copies one file within the store (as a leftover of a failed task would be there)."""
        fs_util = self._jvm.org.apache.hadoop.fs.FileUtil
        conf = self._fs.getConf()
        assert fs_util.copy(self._fs, self._path(src), self._fs, self._path(dst), False, conf)

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


class Store:
    """moto with a fault file; one bucket per test (a store's refusal is remembered per bucket)."""

    def __init__(self, spark: SparkSession, endpoint: str, faults: Path, log: Path) -> None:
        self.spark = spark
        self.endpoint = endpoint
        self.faults = faults
        self.log = log
        self.client = s3_client(endpoint)

    def bucket(self, **s3a: str) -> str:
        """A new bucket, its ``s3a://`` settings per bucket (they do not touch other tests'), with
        ``s3a`` (``fs.s3a.<key>`` settings: ``**{"retry.limit": "1"}``) for it alone."""
        name = f"copy-{uuid.uuid4().hex[:10]}"
        self.client.create_bucket(Bucket=name)
        hconf = self.spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        settings = {**s3a_conf(self.endpoint), **{f"fs.s3a.{k}": v for k, v in s3a.items()}}
        for k, v in settings.items():
            hconf.set(k.replace("fs.s3a.", f"fs.s3a.bucket.{name}.", 1), v)
        hconf.set(
            "fs.s3a.aws.credentials.provider", s3a_conf("")["fs.s3a.aws.credentials.provider"]
        )
        return name

    def inject(self, **faults: bool | int | str) -> None:
        self.faults.write_text(json.dumps(faults))

    def uploads_in_progress(self, bucket: str) -> list[Any]:
        return list(self.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []))

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request the server logged so far, in order."""
        lines = self.log.read_text(errors="replace").splitlines()
        return [(m.group(1), m.group(2)) for m in map(REQUEST_LINE.search, lines) if m]

    def bytes_read(self) -> list[tuple[str, int]]:
        """(bucket/key, bytes sent) of every object GET so far, in the order their bodies ended."""
        f = self.faults.with_name(self.faults.name + ".bytes")
        lines = f.read_text().splitlines() if f.exists() else []
        return [(k, int(n)) for k, n in (line.rsplit(" ", 1) for line in lines)]

    def get(self, bucket: str, key: str) -> bytes:
        return bytes(self.client.get_object(Bucket=bucket, Key=key)["Body"].read())


def faulty_s3(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, name: str
) -> Iterator[Store]:
    """A module's moto behind ``s3_server.py``'s fault step (``Store``), stopped at the end: what
    a test module's fixture yields from."""
    if not Path(S3A_CLASSPATH).parent.is_dir():
        pytest.fail(f"{S3A_CLASSPATH} is missing: run `dev/setup`", pytrace=False)
    root = tmp_path_factory.mktemp(name)
    faults = root / "faults.json"
    faults.write_text("{}")
    proc, endpoint, log = start_s3(root, faults=faults)
    try:
        yield Store(spark, endpoint, faults, log)
    finally:
        stop_server(proc)


#: A query's input: three rows per batch, ids unique across batches, two countries.
def rows_of(batch: int) -> list[dict[str, object]]:
    """Three input rows per batch, ids unique across batches, two countries."""
    return [
        {"id": batch * 100 + i, "country": "NL" if i % 2 else "FR", "amount": batch}
        for i in range(3)
    ]


def expected(batches: range) -> list[tuple]:
    return row_tuples(r for b in batches for r in rows_of(b))


def start_query(
    spark: SparkSession, inbox: Path, out: str, chk: str, stateful: bool = True
) -> StreamingQuery:
    """Starts the query over the input (availableNow, one file a batch): partitioned parquet."""
    events = (
        spark.readStream.schema("id LONG, country STRING, amount LONG")
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox))
    )
    if stateful:
        events = events.dropDuplicates(["id"])
    return (
        events.writeStream.format("parquet")
        .option("checkpointLocation", chk)
        .partitionBy("country")
        .trigger(availableNow=True)
        .start(out)
    )


def run_query(
    spark: SparkSession, fs: RemoteFs, inbox: Path, out: str, chk: str, stateful: bool = True
) -> list[int]:
    """Runs the query over the input (availableNow, one file a batch); returns its batch ids once
    its writer lease is gone from the store."""
    return await_on_store(start_query(spark, inbox, out, chk, stateful), fs, out)


def await_on_store(query: StreamingQuery, fs: RemoteFs, out: str) -> list[int]:
    """Waits for an ``availableNow`` query writing ``out`` to finish (failing on its error), then
    for its writer lease to go from the store; returns its batch ids."""
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), f"the query on {out} ran too long"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, query.exception()
    lease = f"{out}/_batchlog/{LEASE_FILE}"
    wait_until(lambda: not fs.exists(lease), 30, f"{lease} to go after its query")
    return [int(p["batchId"]) for p in query.recentProgress]


def rows(spark: SparkSession, out: str) -> list[tuple]:
    """The sink's rows as plain Spark's reader sees them (through ``_spark_metadata``)."""
    return row_tuples(r.asDict() for r in spark.read.parquet(out).collect())
