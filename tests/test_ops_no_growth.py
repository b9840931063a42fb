"""What a long-lived driver calls on a sink keeps nothing once it returns (issue 25): the
``SinkLog`` lookups, reads by batch, ``verify``, a dry-run ``vacuum`` and a dry-run ``rewind``,
called round after round in one driver (``tests/apps/ops_rounds.py``), each on a new ``SinkLog``
and on one the driver keeps, leave as many live
batchlog objects, Hadoop file statuses and file systems after the tenth round as after the second
(the first two warm the caches: a log's index of its compact file, Spark's code). So do calls
that fail: a rewind refused while a query writes the sink, a damaged compact file verified and
read, bad arguments, a path that is not a sink (each error, and what it held, goes with it).
Counted in the driver's JVM from outside (``jcmd GC.class_histogram``, which collects first), as
the soak benchmark does over thousands of batches (``bench/run soak``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support import JCMD, PYTHON_DIR, REPO, live_instances, stop_group

APP = REPO / "tests" / "apps" / "ops_rounds.py"
WARM_UP, MEASURED = 2, 8
#: What a call that kept something would leave behind: batchlog's own objects, Hadoop's file
#: statuses (a listing kept) and file systems (one made per call instead of Hadoop's cached one).
WATCHED = re.compile(
    r"^io\.batchlog\.|^org\.apache\.hadoop\.fs\.(LocatedFileStatus|FileStatus|BlockLocation"
    r"|LocalFileSystem|RawLocalFileSystem)$"
)


def watched(counts: Counter[str]) -> dict[str, int]:
    return {name: n for name, n in sorted(counts.items()) if WATCHED.search(name)}


@pytest.mark.skipif(JCMD is None, reason="needs the JDK's jcmd to count the driver's objects")
@pytest.mark.parametrize(
    "command", ["round", "failing"], ids=["lookups-reads-dry-runs", "calls-that-fail"]
)
def test_rounds_of_calls_keep_nothing(batchlog_jar: str, tmp_path: Path, command: str):
    proc = subprocess.Popen(
        [sys.executable, str(APP), str(tmp_path)],
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(PYTHON_DIR), str(REPO / "tests")])),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:

        def expect(prefix: str) -> str:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith(prefix), f"expected {prefix!r} from the app, got {line!r}"
            return line

        def send(command: str, reply: str) -> None:
            proc.stdin.write(f"{command}\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            expect(reply)

        def rounds(n: int) -> None:
            for _ in range(n):
                send(command, "DONE")

        def counted() -> dict[str, int]:
            send("settle", "SETTLED")
            return watched(live_instances(pid))

        def grown() -> dict[str, tuple[int, int]]:
            return {k: (before.get(k, 0), n) for k, n in counted().items() if n > before.get(k, 0)}

        pid = int(expect("READY ").split()[1])
        rounds(WARM_UP)
        before = counted()
        rounds(MEASURED)
        # Something of the last round may still be on its way out: once, under load, the last
        # read's table, file index and two file statuses were still held after the app settled
        # (it drains Spark's listener bus, whose end-of-execution events hold their query's plan,
        # since). What goes within 30 s is not kept; what is kept stays, however often counted.
        left = grown()
        deadline = time.monotonic() + 30
        while left and time.monotonic() < deadline:
            time.sleep(1)
            left = grown()
        assert left == {}, f"live objects after round {WARM_UP} and {WARM_UP + MEASURED}: {left}"
        # the counts are of something: the driver's file system, batchlog's listener of the
        # session, the live query's writer guard, and (rounds that succeed) the log the driver
        # keeps with its cached index of the compact file
        for name in (
            "org.apache.hadoop.fs.RawLocalFileSystem",
            "io.batchlog.commit.HeadStartListener",
            "io.batchlog.commit.WriterGuard",
            *(["io.batchlog.log.CompactIndex"] if command == "round" else []),
        ):
            assert before.get(name, 0) >= 1, (name, before)
        proc.stdin.write("exit\n")
        proc.stdin.close()
        assert proc.wait(120) == 0
    finally:
        stop_group(proc)
