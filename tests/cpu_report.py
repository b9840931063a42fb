"""CPU per test module, the JVMs it starts included: a pytest plugin for measuring the suite.

``BATCHLOG_TEST_CPU_DIR=DIR pytest tests ...`` writes, per pytest process, JSON files in DIR
(module -> CPU seconds, wall seconds; each test's CPU); ``python tests/cpu_report.py DIR`` prints
them summed, costliest first, and the costliest tests. pytest's own ``--durations`` gives wall
time, which on a busy machine says little about cost: the suite's processes share two cores with
sbt. CPU is what a run pays. (ScalaTest's counterpart: ``BATCHLOG_TEST_CPU=1`` prints a
``[cpu]`` line per suite.)

A test's CPU is the CPU the process tree of its pytest process used while it ran: the pytest
process, every live descendant (the pyspark driver JVM, a ``spark-submit``, a server), and the
descendants that ended and were reaped (``cutime``/``cstime``). The pytest process is made a
child subreaper: a JVM whose parent ends first (the one a ``python app.py`` or the CLI started)
is its child then, instead of init's, and stays counted, as a zombie once it ends (they are not
reaped: the measuring run keeps them until it exits). A JVM a module's fixture started and a
later module uses is charged to the module that runs; the clock tick (10 ms) is the resolution.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ENV = "BATCHLOG_TEST_CPU_DIR"
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces: split after its closing parenthesis
    return text[text.rindex(")") + 2 :].split()


def tree_cpu_s(root: int) -> float:
    """The CPU seconds of ``root``, its live descendants and the children they reaped."""
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat(entry)
        if fields is None:
            continue
        # after the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
        parent[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(f) for f in fields[11:15])
    total = 0
    for pid, t in ticks.items():
        p = pid
        while p and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += t
    return total / TICK


PR_SET_CHILD_SUBREAPER = 36


class CpuReport:
    def __init__(self, out: Path) -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.out = out
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.tests: dict[str, float] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        c0, w0 = tree_cpu_s(os.getpid()), time.monotonic()
        yield
        module = item.path.name
        cpu = tree_cpu_s(os.getpid()) - c0
        self.cpu[module] += cpu
        self.wall[module] += time.monotonic() - w0
        self.tests[item.nodeid] = round(cpu, 2)

    def pytest_sessionfinish(self) -> None:
        if not self.cpu:  # xdist's controller runs no test
            return
        self.out.mkdir(parents=True, exist_ok=True)
        report = {m: [round(self.cpu[m], 2), round(self.wall[m], 2)] for m in self.cpu}
        (self.out / f"cpu-{os.getpid()}.json").write_text(json.dumps(report, indent=1))
        (self.out / f"tests-{os.getpid()}.json").write_text(json.dumps(self.tests, indent=1))


def register(config: pytest.Config) -> None:
    """Registers the plugin if ``BATCHLOG_TEST_CPU_DIR`` is set."""
    out = os.environ.get(ENV)
    if out:
        config.pluginmanager.register(CpuReport(Path(out)), "batchlog-cpu-report")


def main(argv: list[str]) -> None:
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    for f in Path(argv[1]).glob("cpu-*.json"):
        for module, (c, w) in json.loads(f.read_text()).items():
            cpu[module] += c
            wall[module] += w
    print(f"{'module':40} {'CPU s':>8} {'wall s':>8}")
    for module in sorted(cpu, key=cpu.__getitem__, reverse=True):
        print(f"{module:40} {cpu[module]:8.1f} {wall[module]:8.1f}")
    print(f"{'total':40} {sum(cpu.values()):8.1f} {sum(wall.values()):8.1f}")
    tests: dict[str, float] = {}
    for f in Path(argv[1]).glob("tests-*.json"):
        tests.update(json.loads(f.read_text()))
    print(f"\nthe {min(25, len(tests))} costliest tests (CPU s):")
    for test in sorted(tests, key=tests.__getitem__, reverse=True)[:25]:
        print(f"{tests[test]:8.1f}  {test}")


if __name__ == "__main__":
    main(sys.argv)
