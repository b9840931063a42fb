"""Every code block of the documentation runs, and prints what the page shows.

Per page, the blocks run in order in one context, against real sinks written by real streaming
queries in a temporary directory:

- ``python``: executed in one namespace per page that starts with ``spark`` (the suite's session,
  with the batchlog jar) and ``batchlog``; a ``print(...)  # shown`` line must print ``shown``
  (the comment up to a colon or a parenthesis), as in the README's quickstart.
- ``sql``: each statement through ``spark.sql`` (the session has batchlog's extension).
- ``bash``: each line a command, which must succeed.
- ``console``: each ``$ command`` runs and must print exactly the lines below it, up to the next
  ``$``, once both are normalised by ``NORMALISE`` (what varies from run to run: ids, timestamps,
  durations, a process, sizes and column widths that follow the temporary directory's length;
  each rule says why).

Paths: the docs put sinks and their inputs under ``/data/`` and checkpoints under ``/chk/``; the
test maps both to its temporary directory (``Ctx.local``) and maps them back in what the commands
print (``Ctx.shown``). Most pages start from one sink (``world``): ``/data/events``, 10 batches of
a JSON file source (``/data/input``, one file a micro-batch) into a parquet sink partitioned by
``country``, compactInterval 4, checkpoint ``/chk/events``; ``/chk/events-v2``, the checkpoint of
a second query the sink refused; ``/data/old-sink``, written by plain Spark. It is copied back
before each page, so each page starts from the same sink.

Commands:

- ``python -m batchlog ...`` runs the CLI's own parser and command (``batchlog.__main__.run``) in
  this process, on the suite's session (a ``--conf`` set for the command), printing its stdout,
  stderr and the JVM's ``System.err`` (the ``[batchlog]`` progress lines) in the order written:
  what a terminal shows, without a JVM start per command.
- ``python pipeline.py   # writes SINK, checkpointLocation CHK (N new input files)`` and
  ``python downstream.py   # reads SINK, writes SINK2, checkpointLocation CHK``: the runbook's
  query (``apps/docs_pipeline.py``, docs/runbook/index.md) after dropping N new input files; in
  this process, or, where the page's driver dies or keeps running, in a process of its own.
- anything else (``ls``, ``rm``, ``truncate``, ``cp``...) runs in ``bash``.

A block that cannot run here is marked ``<!-- docs-test: skip (reason) -->``; ``SKIPPED`` counts
them per page, so that a new skip is a change to this file too.

``BATCHLOG_DOCS_UPDATE=1`` writes what the commands printed into the console blocks whose output
differs (the ids and timestamps of the run included): review the diff before committing it.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import support
from conftest import (
    COMMIT_PROTOCOL_KEY,
    COMPACT_INTERVAL_KEY,
    UUID_RE,
    VANILLA_COMMIT_PROTOCOL,
    batch_rows,
    drop_inputs,
    subprocess_env,
)
from doc_pages import Block, page_blocks, page_name, pages
from pyspark.sql import SparkSession
from support import (
    FAULT_MANAGER,
    QUERY_TIMEOUT_S,
    REPO,
    batchlog,
    session_conf,
    stop_group,
    wait_until,
)

sys.path.insert(0, str(REPO / "tests" / "apps"))
import docs_pipeline  # noqa: E402
from batchlog.__main__ import parser  # noqa: E402
from batchlog.__main__ import run as run_command  # noqa: E402

UPDATE = os.environ.get("BATCHLOG_DOCS_UPDATE") == "1"
RUN_LANGS = {"python", "sql", "bash", "console"}
#: Blocks that are not code: file contents, formats (``docs/format.md``).
NOT_CODE = {"", "text", "json"}

#: Blocks marked ``docs-test: skip`` per page (the reason is on the page).
SKIPPED = {
    "README.md": 3,
    "docs/benchmarks.md": 9,
    "docs/contributing.md": 3,
    "docs/getting-started.md": 2,
    "docs/storage.md": 2,
    "docs/user-guide/connect.md": 1,
    "docs/user-guide/spark-submit.md": 1,
    "docs/user-guide/scala-java.md": 1,
    "docs/user-guide/cli.md": 1,
    "docs/user-guide/data-source.md": 1,
    "docs/user-guide/metrics.md": 1,
    "docs/user-guide/rewind.md": 1,
    "docs/user-guide/without-spark.md": 1,
}

#: The sink's settings on every page (docs/runbook/index.md says them).
PAGE_CONFS = {COMPACT_INTERVAL_KEY: "4", "spark.batchlog.writer.leaseTimeout": "20s"}
WORLD_BATCHES = 10
COUNTRIES = 3

#: What varies from run to run in what the commands print, normalised on both sides.
NORMALISE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(UUID_RE), "<uuid>"),
    (re.compile(r"broken-\d+"), "broken-<ms>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"), "<time> UTC"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"), "<time> UTC"),
    # `history`: who ran an operation (the user and host running the tests)
    (re.compile(r"(?<=  )[\w.-]+@[\w.-]+(?=  )"), "<user>@<host>"),
    (
        re.compile(r"done in [\d.]+ s \(deleting (\d+) data files: [\d.]+ s\)"),
        r"done in <s> (\1: <s>)",
    ),
    # a cascade's elapsed time, before its restart advice
    (re.compile(r"done in [\d.]+ s\. Restart each hop"), "done in <s>. Restart each hop"),
    (re.compile(r"seen unchanged for \d+ s"), "seen unchanged for <s>"),
    # a lease watch's progress: how far it got at each poll follows the machine's pace (the run
    # of these lines is one line, below)
    (re.compile(r"(watching the writer lease of .*): \d+ / (\d+) s"), r"\1: <s> / \2 s"),
    # the batch a lease names is the one its last refresh (every 5 s) saw running
    (re.compile(r"driver pid \d+ on [^,]+, batch \d+"), "driver pid <pid> on <host>, batch <n>"),
    (
        re.compile(r"driver pid \d+ on [^)]+\), at batch \d+"),
        "driver pid <pid> on <host>), at batch <n>",
    ),  # inspect's `lease holder`, the same lease
    (re.compile(r"time is \d+, the index says \d+"), "time is <ms>, the index says <ms>"),
    # a batchlog source's offset: a hash of the batch's file names, which hold random ids
    (re.compile(r'"fingerprint":"\d+:[0-9a-f]+"'), '"fingerprint":"<n>:<hash>"'),
    # what py4j raises when its JVM halts depends on the moment it notices
    (
        re.compile(r"query failed: (Py4JNetworkError|ConnectionRefusedError): .*"),
        "query failed: <JVM gone>",
    ),
    # log files and indexes hold absolute paths: their sizes follow the temporary directory's
    (re.compile(r"(log files +\d+) \([\d.]+ K?i?B\)"), r"\1 (<size>)"),
    (re.compile(r"(compaction +\d+ +)[\d.]+ K?i?B"), r"\1<size>"),
    (re.compile(r"is \d+ bytes, (its head|the index) says \d+"), r"is <n> bytes, \1 says <n>"),
    # a table's columns are as wide as its longest cell: a temporary path's length
    (re.compile(r"(?<=  )\d+\.\d s(?=  )"), "<s> s"),  # history: how long a batch's write took
    (re.compile(r"query [0-9a-f]{8}, run [0-9a-f]{8}"), "query <id>, run <id>"),
    (re.compile(r"-{3,}"), "---"),
    (re.compile(r" {2,}"), "  "),
]

ROOTS = re.compile(r"(?<![\w:./-])/(data|chk)/")
PIPELINE = re.compile(
    r"python pipeline\.py +# writes (\S+), checkpointLocation ([^\s:]+)"
    r"(?::[^(]*)?(?: \((\d+) new input files?\))?"
)
DOWNSTREAM = re.compile(
    r"python downstream\.py +# reads (\S+), writes (\S+), checkpointLocation (\S+)"
)


def normalise(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        for pattern, repl in NORMALISE:
            line = pattern.sub(repl, line)
        line = line.rstrip()
        if not (out and line == out[-1] and "watching the writer lease of" in line):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return out


# ---- the context of one page ------------------------------------------------------------------


@dataclass
class Ctx:
    spark: SparkSession
    page: Path
    work: Path
    ns: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    updates: dict[Block, str] = field(default_factory=dict)
    pipeline_runs: int = 0
    #: pipeline run number (1-based) -> confs of a process of its own, for a driver that dies
    crash_runs: dict[int, dict[str, str]] = field(default_factory=dict)
    #: what a ``# ...`` line of a console block stands for: a function printing its output
    notes: dict[str, Callable[[Ctx], str]] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)

    def local(self, text: str) -> str:
        """The docs' ``/data/...`` and ``/chk/...`` in the work directory."""
        return ROOTS.sub(lambda m: f"{self.work}/{m.group(1)}/", text)

    def shown(self, text: str) -> str:
        """Output as the docs show it: the work directory's paths as ``/data/...``."""
        return text.replace(str(self.work), "")

    @property
    def inbox(self) -> Path:
        return self.work / "data" / "input"

    def add_inputs(self, n: int) -> None:
        have = len(list(self.inbox.glob("events-*.json"))) if self.inbox.exists() else 0
        drop_inputs(self.inbox, {b: batch_rows(b, COUNTRIES) for b in range(have, have + n)})


# ---- running commands --------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    """A pipeline in a process of its own, its output (stdout and stderr) in ``log``."""

    popen: subprocess.Popen[str]
    log: Path


class _Terminal(io.TextIOBase):
    """stdout and stderr of a command, with the JVM's ``System.err`` drained before each write,
    so that lines come in the order they were written."""

    def __init__(self, drain: Callable[[], str]) -> None:
        self.parts: list[str] = []
        self.drain = drain

    def write(self, s: str) -> int:
        self.parts.append(self.drain())
        self.parts.append(s)
        return len(s)

    def text(self) -> str:
        self.parts.append(self.drain())
        return "".join(self.parts)


@contextlib.contextmanager
def terminal(spark: SparkSession) -> Iterator[_Terminal]:
    jvm = spark._jvm
    assert jvm is not None
    system = jvm.java.lang.System
    original = jvm.java.lang.Class.forName("java.lang.System").getField("err").get(None)
    buf = jvm.java.io.ByteArrayOutputStream()
    system.setErr(jvm.java.io.PrintStream(buf, True, "UTF-8"))

    def drain() -> str:
        s = str(buf.toString("UTF-8"))
        buf.reset()
        return s

    term = _Terminal(drain)
    try:
        with contextlib.redirect_stdout(term), contextlib.redirect_stderr(term):
            yield term
    finally:
        system.setErr(original)


def run_batchlog(ctx: Ctx, command: str) -> tuple[int, str]:
    """``python -m batchlog ...`` on the suite's session: its status and what it printed."""
    argv = shlex.split(ctx.local(command), comments=True)[3:]
    args = parser().parse_args(argv)
    confs = dict(kv.split("=", 1) for kv in args.conf)
    with session_conf(ctx.spark, confs), terminal(ctx.spark) as term:
        status = run_command(ctx.spark, args)
    return status, ctx.shown(term.text())


def run_pipeline(ctx: Ctx, command: str) -> str:
    if m := DOWNSTREAM.match(command):
        upstream, out, chk = (ctx.local(p) for p in m.groups())
        return ctx.shown(docs_pipeline.downstream(ctx.spark, upstream, out, chk)) + "\n"
    m = PIPELINE.match(command)
    assert m, f"{command!r}: say what it writes: `# writes SINK, checkpointLocation CHK`"
    out, chk = ctx.local(m.group(1)), ctx.local(m.group(2))
    ctx.add_inputs(int(m.group(3) or 0))
    ctx.pipeline_runs += 1
    confs = ctx.crash_runs.get(ctx.pipeline_runs)
    if confs is None:
        return ctx.shown(docs_pipeline.pipeline(ctx.spark, str(ctx.inbox), out, chk)) + "\n"
    proc = pipeline_process(ctx, out, chk, confs)
    proc.popen.wait(QUERY_TIMEOUT_S)
    return process_output(ctx, proc)


def pipeline_process(ctx: Ctx, out: str, chk: str, confs: dict[str, str], *extra: str) -> Proc:
    """``apps/docs_pipeline.py`` in a process of its own (its output in ``<work>/pipeline-N``)."""
    cmd = [sys.executable, str(REPO / "tests" / "apps" / "docs_pipeline.py")]
    cmd += [str(ctx.inbox), out, chk, *extra]
    for k, v in {**PAGE_CONFS, **confs}.items():
        cmd += ["--conf", f"{k}={v}"]
    log = ctx.work / f"pipeline-{len(ctx.procs)}.log"
    with log.open("w") as sink:
        popen = subprocess.Popen(
            cmd,
            cwd=str(ctx.work),
            env=subprocess_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    proc = Proc(popen, log)
    ctx.procs.append(proc)
    return proc


def process_output(ctx: Ctx, proc: Proc) -> str:
    """What a pipeline process printed, without Spark's start-up lines (as the runbook)."""
    text = proc.log.read_text()
    kept = [line for line in text.splitlines() if line.startswith(("[batchlog", "query "))]
    assert kept, f"the pipeline printed nothing the page shows:\n{text[-5000:]}"
    return ctx.shown("".join(line + "\n" for line in kept))


def run_shell(ctx: Ctx, command: str) -> tuple[int, str]:
    done = subprocess.run(
        ["bash", "-c", ctx.local(command)],
        cwd=str(ctx.work),
        env=dict(os.environ, LC_ALL="C"),  # ls sorts as the pages show
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=QUERY_TIMEOUT_S,
    )
    return done.returncode, ctx.shown(done.stdout)


def run_command_line(ctx: Ctx, command: str) -> tuple[int, str]:
    if command.startswith("python -m batchlog "):
        return run_batchlog(ctx, command)
    if command.startswith(("python pipeline.py", "python downstream.py")):
        return 0, run_pipeline(ctx, command)
    if command.startswith("# "):
        assert command in ctx.notes, f"no test stands for the note {command!r}"
        return 0, ctx.notes[command](ctx)
    return run_shell(ctx, command)


# ---- the blocks --------------------------------------------------------------------------------


def console_steps(code: str) -> list[tuple[str, list[str]]]:
    """(command, the lines shown below it) of a console block; a leading ``# ...`` line is a
    note (what happens elsewhere, with its output below it)."""
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif not steps:
            assert line.startswith("# "), f"output before any command: {line!r}"
            steps.append((line, []))
        else:
            steps[-1][1].append(line)
    return steps


def run_console(ctx: Ctx, block: Block) -> None:
    rendered, differs = [], False
    for command, shown in console_steps(block.code):
        _, printed = run_command_line(ctx, command)
        actual = printed.splitlines()
        same = normalise(actual) == normalise(shown)
        if not same:
            differs = True
            diff = difflib.unified_diff(
                normalise(shown), normalise(actual), "the page", "printed", lineterm=""
            )
            ctx.problems.append(f"{block.where}: `{command}`\n" + "\n".join(diff))
        prefix = "" if command.startswith("# ") else "$ "
        rendered.append(prefix + command)
        rendered += shown if same else [line.rstrip() for line in actual]
    while rendered and not rendered[-1]:
        rendered.pop()
    if differs:
        ctx.updates[block] = "\n".join(rendered) + "\n"


def run_bash(ctx: Ctx, block: Block) -> None:
    for command in block.code.splitlines():
        if not command.strip() or command.startswith("#"):
            continue
        status, printed = run_command_line(ctx, command)
        if status != 0:
            ctx.problems.append(f"{block.where}: `{command}` exited {status}:\n{printed}")


def run_python(ctx: Ctx, block: Block) -> None:
    shown = [
        re.split(r":| \(", line.split("#", 1)[1])[0].strip()
        for line in block.code.splitlines()
        if line.startswith("print(") and "#" in line
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(ctx.local(block.code), block.where, "exec"), ctx.ns)
    printed = [line.strip() for line in ctx.shown(out.getvalue()).splitlines() if line.strip()]
    if shown and normalise(printed) != normalise(shown):
        ctx.problems.append(f"{block.where}: printed {printed}, the page shows {shown}")


def sql_statements(code: str) -> list[str]:
    lines = [re.sub(r"\s*--[^']*$", "", line) for line in code.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def run_sql(ctx: Ctx, block: Block) -> None:
    for statement in sql_statements(block.code):
        ctx.spark.sql(ctx.local(statement)).collect()


RUNNERS: dict[str, Callable[[Ctx, Block], None]] = {
    "python": run_python,
    "sql": run_sql,
    "bash": run_bash,
    "console": run_console,
}


def write_updates(page: Path, updates: dict[Block, str]) -> None:
    text = page.read_text()
    for block in sorted(updates, key=lambda b: b.start, reverse=True):
        text = text[: block.start] + updates[block] + text[block.end :]
    page.write_text(text)


# ---- the sinks the pages start from ------------------------------------------------------------


@dataclass(frozen=True)
class World:
    work: Path
    pristine: Path

    def restore(self) -> None:
        shutil.rmtree(self.work)
        shutil.copytree(self.pristine, self.work, symlinks=True)


@pytest.fixture(scope="module")
def world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("docs")
    w = World(base / "w", base / "pristine")
    ctx = Ctx(spark, REPO / "README.md", w.work)
    with session_conf(spark, PAGE_CONFS):
        ctx.add_inputs(WORLD_BATCHES)
        last = WORLD_BATCHES - 1
        assert run_pipeline(
            ctx, "python pipeline.py  # writes /data/events, checkpointLocation /chk/events"
        ) == (f"query stopped; sink's latest batch: {last}\n")
        refused = run_pipeline(
            ctx, "python pipeline.py  # writes /data/events, checkpointLocation /chk/events-v2"
        )
        assert refused.startswith("query failed: SinkOwnedByOtherQueryError: "), refused
        old = Ctx(spark, ctx.page, w.work / "old")
        old.add_inputs(3)
        with session_conf(spark, {COMMIT_PROTOCOL_KEY: VANILLA_COMMIT_PROTOCOL}):
            line = docs_pipeline.pipeline(
                spark, str(old.inbox), f"{w.work}/data/old-sink", f"{w.work}/chk/old-sink"
            )
        assert line == "query stopped; sink's latest batch: 2", line
    shutil.copytree(w.work, w.pristine, symlinks=True)
    return w


# ---- the pages --------------------------------------------------------------------------------


def crashed_driver(ctx: Ctx) -> None:
    """docs/runbook/driver-killed.md: the page's first run halts its JVM while it commits
    batch 2, after the batch's tasks wrote their files (as in test_integrity_writers.py)."""
    ctx.crash_runs[1] = {
        "spark.jars": support.testkit_jar_path(),  # via the module: pytest collects test* names
        "spark.hadoop.spark.sql.streaming.checkpointFileManagerClass": FAULT_MANAGER,
        "spark.hadoop.spark.batchlog.test.fault.op": "createAtomic",
        "spark.hadoop.spark.batchlog.test.fault.pathRegex": r"_spark_metadata/2$",
        "spark.hadoop.spark.batchlog.test.fault.action": "halt",
    }


ZOMBIE_NOTE = "# pipeline.py, the zombie (still running, a trigger every 2 s), prints:"


def zombie_driver(ctx: Ctx) -> None:
    """docs/runbook/zombie-driver.md: a query in a process of its own writes /data/events with a
    2-second trigger (batches 0..2, then idle) while the page runs."""
    ctx.add_inputs(3)
    out, chk = ctx.local("/data/events"), ctx.local("/chk/events")
    zombie = pipeline_process(ctx, out, chk, {}, "--trigger", "2")
    meta = Path(out) / "_spark_metadata"
    running = zombie.popen.poll
    wait_until(lambda: (meta / "2").exists() or running() is not None, 180, "batch 2")
    assert running() is None, process_output(ctx, zombie)

    def its_next_batch(ctx: Ctx) -> str:
        ctx.add_inputs(1)
        zombie.popen.wait(120)
        return process_output(ctx, zombie)

    ctx.notes[ZOMBIE_NOTE] = its_next_batch


#: Each page that runs, and how its world is set up (None: the shared sinks of ``world``).
PAGES: dict[str, Callable[[Ctx], None] | None] = {
    "README.md": None,
    "docs/user-guide/pyspark.md": None,
    "docs/user-guide/sql.md": None,
    "docs/user-guide/data-source.md": None,
    "docs/user-guide/rewind.md": None,
    "docs/user-guide/one-writer.md": None,
    "docs/user-guide/cli.md": None,
    "docs/user-guide/without-spark.md": None,
    "docs/user-guide/walkthrough.md": None,
    "docs/runbook/deleted-spark-metadata.md": None,
    "docs/runbook/damaged-compact.md": None,
    "docs/runbook/upstream-rewound.md": None,
    "docs/runbook/second-query.md": None,
    "docs/runbook/move-sink.md": None,
    "docs/runbook/driver-killed.md": crashed_driver,
    "docs/runbook/zombie-driver.md": zombie_driver,
}


@pytest.mark.parametrize("name", list(PAGES))
def test_the_page_runs_and_prints_what_it_shows(
    name: str, spark: SparkSession, world: World, tmp_path: Path
) -> None:
    page = REPO / name
    setup = PAGES[name]
    if setup is None:
        world.restore()
        ctx = Ctx(spark, page, world.work)
    else:
        ctx = Ctx(spark, page, tmp_path / "w")
        ctx.work.mkdir()
    ctx.ns.update(spark=spark, batchlog=batchlog, __name__="__docs__")
    ran = 0
    with session_conf(spark, PAGE_CONFS):
        try:
            if setup is not None:
                setup(ctx)
            for block in page_blocks(page):
                if block.skip is None and block.lang in RUN_LANGS:
                    RUNNERS[block.lang](ctx, block)
                    ran += 1
        finally:
            for proc in ctx.procs:
                stop_group(proc.popen)
            for query in spark.streams.active:
                query.stop()
    assert ran, f"{name}: no block ran"
    if UPDATE and ctx.updates:
        write_updates(page, ctx.updates)
    assert not ctx.problems, f"{name}:\n\n" + "\n\n".join(ctx.problems)


# ---- every block is run or marked ----------------------------------------------------------------


def test_every_block_runs_in_a_test_or_is_marked_skip() -> None:
    assert set(PAGES) <= {page_name(p) for p in pages()}, "PAGES names a page that is not there"
    for page in pages():
        for b in page_blocks(page):
            if b.lang in NOT_CODE:
                assert not any(
                    line.startswith(("$ ", "python -m batchlog")) for line in b.code.splitlines()
                ), f"{b.where}: commands in a block that does not run: make it `console`"
                continue
            if b.skip is not None:
                continue
            assert b.lang in RUN_LANGS, f"{b.where}: a {b.lang} block cannot run: mark it skip"
            assert page_name(page) in PAGES, f"{b.where} runs in no test: add its page to PAGES"


def test_the_skipped_blocks_are_the_known_ones() -> None:
    found: dict[str, int] = {}
    for page in pages():
        for b in page_blocks(page):
            if b.skip is not None:
                assert len(b.skip.split()) >= 3, f"{b.where}: say why it cannot run: {b.skip!r}"
                found[page_name(page)] = found.get(page_name(page), 0) + 1
    assert found == SKIPPED
