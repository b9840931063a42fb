"""The class-data archive every Spark JVM of the suite starts from (JDK class-data sharing, CDS).

A Spark JVM spends most of its start loading, parsing and verifying some 15,000 classes from
pyspark's jars: a session and one streaming query took 11.0 s of CPU on the 2-core CI machine,
and 6.1 s (4.9 s instead of 9.7 s wall) with an archive of those classes, mapped instead of loaded.
The suite starts hundreds of such JVMs (each test process's session, the CLI, ``spark-submit``
drivers, the apps of the crash tests, the plain-Spark reader).

One archive per pyspark, Java and JVM flags: ``target/jvm-archives/<key>.jsa``, made once by a
training run (``tests/apps/class_archive_training.py``, about 30 s) with
``-XX:ArchiveClassesAtExit``, then named in ``SPARK_SUBMIT_OPTS`` for every JVM the suite starts.
The JVM itself checks that the archive matches (the same Java, the same class path as a prefix,
each jar unchanged): a JVM with another class path (another pyspark, ``--driver-class-path``)
just loads its classes as before. The archive changes nothing a JVM does, only how its classes
get into memory; its messages are off (``-Xlog:cds=off``) so that no test sees them.
``BATCHLOG_TEST_CLASS_ARCHIVE=0`` runs the suite without it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from support import PYTHON_DIR, REPO

ARCHIVE_DIR = REPO / "target" / "jvm-archives"
TRAINING_APP = REPO / "tests" / "apps" / "class_archive_training.py"
#: The archive's messages (a class path that does not match, say) would go to the JVM's stdout.
QUIET = "-Xlog:cds=off,cds+dynamic=off"


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def _key(jvm_options: str) -> str:
    """What the archive depends on: Java, pyspark's jars (names, sizes, times), the JVM flags."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    h = hashlib.sha256()
    version = subprocess.run([_java(), "-version"], capture_output=True, text=True, check=True)
    h.update(version.stderr.encode())
    h.update(jvm_options.encode())
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        h.update(f"{jar.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    return f"pyspark-{pyspark.__version__}-{h.hexdigest()[:16]}"


def _train(archive: Path, jvm_options: str) -> None:
    """Runs the training app, writing the archive to a temporary file renamed into place."""
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    env = dict(
        os.environ,
        PYTHONPATH=str(PYTHON_DIR),
        SPARK_SUBMIT_OPTS=f"{jvm_options} -XX:ArchiveClassesAtExit={tmp} {QUIET}",
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(TRAINING_APP)], env=env, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        sys.stderr.write(
            f"[tests] no class-data archive (the suite's JVMs start slower): {TRAINING_APP.name} "
            f"exited {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}\n"
        )
        return
    os.replace(tmp, archive)
    for old in ARCHIVE_DIR.glob("*.jsa"):  # of another pyspark or flags: 200 MB each
        if old != archive:
            old.unlink(missing_ok=True)
    sys.stderr.write(f"[tests] class-data archive {archive} in {time.monotonic() - t0:.0f} s\n")


def flags(jvm_options: str) -> str:
    """The flags that start a JVM with ``jvm_options`` from the archive, made first if missing
    (only by the controlling pytest process: its workers start after it); "" without one."""
    if os.environ.get("BATCHLOG_TEST_CLASS_ARCHIVE", "1") == "0":
        return ""
    archive = ARCHIVE_DIR / f"{_key(jvm_options)}.jsa"
    if not archive.is_file() and "PYTEST_XDIST_WORKER" not in os.environ:
        _train(archive, jvm_options)
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else ""
