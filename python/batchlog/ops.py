"""Operations on a sink and its query's checkpoint: rewind, takeover, adopt, read, verify, repair,
vacuum.

Thin wrappers over ``io.batchlog.BatchLog``: the JVM plans and does the work; plans and reports
come back as the dataclasses of :mod:`batchlog.reports`. Each maintenance operation is also
available as an :class:`Action` (``rewind_action`` ...) whose ``plan()`` shows what it will do
before ``execute()`` does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Literal, TypeVar, overload

from pyspark.sql import DataFrame, SparkSession

from batchlog import _sql
from batchlog._jvm import batchlog_package, jsession, jvm_errors
from batchlog.reports import (
    AdoptReport,
    CascadePlanSummary,
    CascadeReport,
    RepairReport,
    Report,
    RewindPlanSummary,
    RewindReport,
    TakeoverReport,
    VacuumReport,
    VerifyReport,
    from_json,
)

P = TypeVar("P", bound=Report)
R = TypeVar("R", bound=Report)


def sink(spark: SparkSession, path: str) -> Any:
    """The JVM ``io.batchlog.BatchLog`` of the sink at ``path``."""
    with jvm_errors():
        return batchlog_package(spark).BatchLog.forPath(jsession(spark), path)


def to_report(spark: SparkSession, cls: type[R], jreport: Any) -> R:
    """``cls`` from a JVM report object, through the one serializer (``ReportJson``)."""
    return from_json(cls, batchlog_package(spark).api.ReportJson.toJson(jreport))


class Action(Generic[P, R]):
    """A maintenance operation on a sink (``io.batchlog.api.SinkAction``), planned before it acts.

    ``plan()`` computes what it will do and changes nothing; ``execute()`` carries out exactly
    that plan (unless it was made a dry run) and returns the report.
    """

    def __init__(
        self, spark: SparkSession, jaction: Any, plan_type: type[P], report_type: type[R]
    ) -> None:
        self._spark = spark
        self._j = jaction
        self._plan_type = plan_type
        self._report_type = report_type

    def plan(self) -> P:
        """What the operation will do; changes nothing."""
        with jvm_errors():
            return to_report(self._spark, self._plan_type, self._j.summary())

    def execute(self, dry_run: bool = False, quiet: bool = False) -> R:
        """Carries out the plan and reports; with ``dry_run`` only reports it, changing nothing.

        ``quiet`` silences the progress lines on stderr.
        """
        with jvm_errors():
            j = self._j.dryRun(dry_run).quiet(quiet)
            return to_report(self._spark, self._report_type, j.execute())


class SqlAction(Action[P, R]):
    """An :class:`Action` run as a ``BATCHLOG`` SQL statement, over a session without a JVM
    gateway (Spark Connect): ``PLAN`` for the plan, ``DRY RUN`` for a dry run."""

    def __init__(
        self, spark: SparkSession, statement: str, plan_type: type[P], report_type: type[R]
    ) -> None:
        super().__init__(spark, None, plan_type, report_type)
        self._statement = statement

    def plan(self) -> P:
        return from_json(self._plan_type, _sql.statement(self._spark, self._statement + " PLAN"))

    def execute(self, dry_run: bool = False, quiet: bool = False) -> R:
        sql = self._statement + (" DRY RUN" if dry_run else "")
        return from_json(self._report_type, _sql.statement(self._spark, sql))


def _force(force: bool) -> str:
    return " FORCE" if force else ""


def rewind_action(
    spark: SparkSession, sink_path: str, checkpoint_path: str, to_batch: int, force: bool = False
) -> Action[RewindPlanSummary, RewindReport]:
    """The rewind of :func:`rewind` as an :class:`Action`: its plan first, then its execution."""
    if _sql.is_remote(spark):
        return SqlAction(
            spark,
            f"BATCHLOG REWIND {_sql.literal(sink_path)} CHECKPOINT {_sql.literal(checkpoint_path)}"
            f" TO BATCH {int(to_batch)}{_force(force)}",
            RewindPlanSummary,
            RewindReport,
        )
    with jvm_errors():
        j = sink(spark, sink_path).rewind(checkpoint_path, int(to_batch)).force(force)
    return Action(spark, j, RewindPlanSummary, RewindReport)


def cascade_action(
    spark: SparkSession,
    sink_path: str,
    checkpoint_path: str,
    to_batch: int,
    downstream: Sequence[str] = (),
    force: bool = False,
) -> Action[CascadePlanSummary, CascadeReport]:
    """The cascade of :func:`rewind` (``cascade=True``) as an :class:`Action`."""
    if _sql.is_remote(spark):
        named = "".join(f" DOWNSTREAM {_sql.literal(d)}" for d in downstream)
        return SqlAction(
            spark,
            f"BATCHLOG REWIND {_sql.literal(sink_path)} CHECKPOINT {_sql.literal(checkpoint_path)}"
            f" TO BATCH {int(to_batch)} CASCADE{named}{_force(force)}",
            CascadePlanSummary,
            CascadeReport,
        )
    with jvm_errors():
        j = sink(spark, sink_path).cascade(checkpoint_path, int(to_batch)).force(force)
        for d in downstream:
            j = j.downstream(d)
    return Action(spark, j, CascadePlanSummary, CascadeReport)


@overload
def rewind(
    spark: SparkSession,
    sink_path: str,
    checkpoint_path: str,
    to_batch: int,
    dry_run: bool = ...,
    quiet: bool = ...,
    force: bool = ...,
    cascade: Literal[False] = ...,
    downstream: Sequence[str] = ...,
) -> RewindReport: ...


@overload
def rewind(
    spark: SparkSession,
    sink_path: str,
    checkpoint_path: str,
    to_batch: int,
    dry_run: bool = ...,
    quiet: bool = ...,
    force: bool = ...,
    *,
    cascade: Literal[True],
    downstream: Sequence[str] = ...,
) -> CascadeReport: ...


def rewind(
    spark: SparkSession,
    sink_path: str,
    checkpoint_path: str,
    to_batch: int,
    dry_run: bool = False,
    quiet: bool = False,
    force: bool = False,
    cascade: bool = False,
    downstream: Sequence[str] = (),
) -> RewindReport | CascadeReport:
    """Rewinds a file sink and its query's checkpoint so that batch ``to_batch`` runs again.

    Deletes the data files of batches >= ``to_batch``, cuts the sink log back to
    ``to_batch - 1`` and the checkpoint (offsets, commits, file-source logs, state versions)
    back so that restarting the *same* query re-runs ``to_batch`` with exactly the input it had,
    then continues. Stop the query first: while a query writes the sink (its writer lease is
    live) the rewind refuses with ``WriterActiveError``; ``force=True`` overrides that for a
    writer known to be dead (its driver was killed less than the lease timeout ago).

    With ``cascade=True`` every query downstream of the sink is rewound too, transitively: each
    to its first batch that read a rewound batch (the readers the sink registered, and those
    named in ``downstream`` as ``"<its sink>=<its checkpoint>"``). It returns a
    :class:`CascadeReport`, whose ``hops`` list each query with its own rewind plan.

    Returns the plan and (unless ``dry_run``, which changes nothing) the result. An interrupted
    rewind is finished by calling this again with the same arguments; until then the sink
    refuses writes.
    """
    if cascade:
        c = cascade_action(spark, sink_path, checkpoint_path, to_batch, downstream, force)
        return c.execute(dry_run, quiet)
    if downstream:
        raise ValueError("downstream names readers of a cascade: pass cascade=True with it")
    action = rewind_action(spark, sink_path, checkpoint_path, to_batch, force)
    return action.execute(dry_run, quiet)


def takeover_action(
    spark: SparkSession, sink_path: str, checkpoint_path: str, force: bool = False
) -> Action[TakeoverReport, TakeoverReport]:
    """The takeover of :func:`takeover` as an :class:`Action`."""
    if _sql.is_remote(spark):
        return SqlAction(
            spark,
            f"BATCHLOG TAKEOVER {_sql.literal(sink_path)} CHECKPOINT"
            f" {_sql.literal(checkpoint_path)}{_force(force)}",
            TakeoverReport,
            TakeoverReport,
        )
    with jvm_errors():
        j = sink(spark, sink_path).takeover(checkpoint_path).force(force)
    return Action(spark, j, TakeoverReport, TakeoverReport)


def takeover(
    spark: SparkSession,
    sink_path: str,
    checkpoint_path: str,
    dry_run: bool = False,
    force: bool = False,
) -> TakeoverReport:
    """Makes the query of ``checkpoint_path`` the sink's one writer from the batch after its latest.

    A sink refuses every query but its owner (``SinkOwnedByOtherQueryError``). Stop the owner
    first (``force=True`` for one known to be dead). Spark's file sink skips every batch id
    already in the log, so the new owner writes nothing until its batch ids pass the sink's
    latest: ``skipped_batches`` in the report says how many of its batches that is.
    """
    return takeover_action(spark, sink_path, checkpoint_path, force).execute(dry_run)


def adopt_action(spark: SparkSession, sink_path: str) -> Action[AdoptReport, AdoptReport]:
    """The adoption of :func:`adopt` as an :class:`Action` (its plan is a dry run's counts)."""
    if _sql.is_remote(spark):
        sql = f"BATCHLOG ADOPT {_sql.literal(sink_path)}"
        return SqlAction(spark, sql, AdoptReport, AdoptReport)
    with jvm_errors():
        j = sink(spark, sink_path).adopt()
    return Action(spark, j, AdoptReport, AdoptReport)


def adopt(
    spark: SparkSession, sink_path: str, dry_run: bool = False, quiet: bool = False
) -> AdoptReport:
    """Tags the entries of a sink written by plain Spark whose batch can be proven.

    Reports counts: ``entries_tagged``, ``entries_untagged``, ``compact_files_rewritten`` and
    the ``untagged_horizon`` (a rewind must go to this batch or later).
    """
    return adopt_action(spark, sink_path).execute(dry_run, quiet)


def read(
    spark: SparkSession,
    sink_path: str,
    format: str,
    from_batch: int | None = None,
    to_batch: int | None = None,
) -> DataFrame:
    """The sink's rows written by batches ``from_batch..to_batch`` (both inclusive, either open).

    ``read(spark, p, "parquet", to_batch=7)`` is the sink as of batch 7; ``from_batch=8``
    reads what arrived since. Partition columns are included. It is the ``batchlog`` data
    source: ``spark.read.format("batchlog").option("batches", "8-")`` reads the same.
    """
    if _sql.is_remote(spark):
        reader = spark.read.format("batchlog").option("format", format)
        if from_batch is not None or to_batch is not None:
            # an open end is left out: "8-", "-7"; no range at all reads every batch
            batches = ("" if from_batch is None else str(int(from_batch))) + "-"
            batches += "" if to_batch is None else str(int(to_batch))
            reader = reader.option("batches", batches)
        with _sql.sql_errors():
            df = reader.load(sink_path)
            _ = df.schema  # resolved now, as over py4j: a bad range or sink fails here, by its code
        return df
    with jvm_errors():
        jdf = sink(spark, sink_path).read(
            format,
            None if from_batch is None else int(from_batch),
            None if to_batch is None else int(to_batch),
        )
    return DataFrame(jdf, spark)


# ---- reliability: verify, repair, vacuum ---------------------------------------------------


def verify(spark: SparkSession, sink_path: str) -> VerifyReport:
    """Checks a sink's log against its output directory; changes nothing.

    Every live logged file must exist with the logged size and its batch-tagged name must agree
    with its logged batch; every log file the log needs must be readable (``log_errors``). Data
    files the log does not list are reported as ``orphans`` (they do not make a sink unhealthy:
    reads through the log never see them; ``vacuum`` removes old ones). Every live compact file's
    index (``N.compact.index``) must be proved; one that is not is listed in ``index_problems``
    and makes the sink unhealthy: readers rebuild it in memory and compaction never uses it until
    ``repair`` rewrites it. Missing, legacy (v1) or newer-version indexes are only counted
    (``indexes_rebuilt_in_memory``). A compact file whose bytes no longer match the CRC32C its
    proved index records (bit rot: a compact file is written once) is damaged: a log error, its
    runs listed in ``damaged_runs``; compaction and reads refuse it until ``repair`` restores
    them. An entry naming a file outside the output directory (another path, file system, or
    through a symbolic link) is ``foreign``: it makes the sink unhealthy, and rewind and vacuum
    refuse (``ForeignPathError``) until ``repair`` rebuilds the log without it. Links found in
    the output are listed (``links``), never followed; only files named ``part-<digits>-...``
    count as data. ``healthy`` is the verdict.
    """
    if _sql.is_remote(spark):
        report = _sql.statement(spark, f"BATCHLOG VERIFY {_sql.literal(sink_path)}")
        return from_json(VerifyReport, report)
    with jvm_errors():
        return to_report(spark, VerifyReport, sink(spark, sink_path).verify())


def repair_action(
    spark: SparkSession, sink_path: str, force: bool = False, compact_interval: int | None = None
) -> Action[RepairReport, RepairReport]:
    """The repair of :func:`repair` as an :class:`Action`."""
    if _sql.is_remote(spark):
        sql = f"BATCHLOG REPAIR {_sql.literal(sink_path)}{_force(force)}"
        if compact_interval is not None:
            sql += f" COMPACT INTERVAL {int(compact_interval)}"
        return SqlAction(spark, sql, RepairReport, RepairReport)
    with jvm_errors():
        j = sink(spark, sink_path).repair().force(force)
        if compact_interval is not None:
            j = j.compactInterval(int(compact_interval))
    return Action(spark, j, RepairReport, RepairReport)


def repair(
    spark: SparkSession,
    sink_path: str,
    dry_run: bool = False,
    force: bool = False,
    quiet: bool = False,
    compact_interval: int | None = None,
) -> RepairReport:
    """Rebuilds a lost or damaged ``_spark_metadata`` from the data files' batch-tagged names.

    Does nothing when the log is healthy (unless ``force``). The old log files are copied to
    ``_spark_metadata.broken-<ts>`` (``moved_aside``), never deleted, and replaced file by file:
    ``_spark_metadata`` never disappears. Files without a batch in their name are reported
    (``untagged``) and left out. Stop the query first (``force`` also overrides a live writer
    lease); restart it with its checkpoint afterwards. ``written`` tells whether a new log was
    written.

    The new log is laid out for the query's compact interval: ``compact_interval`` if given,
    else the one the sink records (``compact_interval_source`` says where it came from). When
    nothing tells it (``compact_interval_assumed``), the new log is one compact file of the
    newest batch, which a query of any interval reads and continues (``compact_interval`` is
    then the one this session derives from it), and no interval is recorded. When the only
    problems are damaged compact-file indexes (``indexes_only``), exactly those are rewritten
    from their compact files instead (``indexes_rewritten``; none with ``dry_run``). When the
    only problems are damaged runs of compact files (``runs_only``), exactly those batches'
    entries are restored, from their batch files or the data files named with their batch, and
    the damaged file is kept in ``_spark_metadata.damaged-<ts>`` (``runs_restored``, each with
    its source; with ``dry_run``, what would be restored).
    """
    return repair_action(spark, sink_path, force, compact_interval).execute(dry_run, quiet)


def vacuum_action(
    spark: SparkSession, sink_path: str, older_than: str = "1h"
) -> Action[VacuumReport, VacuumReport]:
    """The vacuum of :func:`vacuum` as an :class:`Action`."""
    if _sql.is_remote(spark):
        sql = f"BATCHLOG VACUUM {_sql.literal(sink_path)} OLDER THAN {_sql.literal(older_than)}"
        return SqlAction(spark, sql, VacuumReport, VacuumReport)
    with jvm_errors():
        j = sink(spark, sink_path).vacuum().olderThan(older_than)
    return Action(spark, j, VacuumReport, VacuumReport)


def vacuum(
    spark: SparkSession,
    sink_path: str,
    older_than: str = "1h",
    dry_run: bool = True,
    quiet: bool = False,
) -> VacuumReport:
    """Deletes orphan data files (not in the sink's log) older than ``older_than`` (e.g. ``"1h"``).

    A dry run by default. Never deletes a live logged file, nor, while a writer is live, a file
    of a batch after the latest logged one (it may be running). Reports counts and bytes of
    candidates, deleted and skipped files. Only files inside the output named as data files
    (``part-<digits>-...``) are candidates; links are never followed nor deleted, other files are
    counted (``other_file_count``) and left. Refuses, deleting nothing, while the log names a
    file outside the output (``ForeignPathError``) or the output holds a streaming query
    checkpoint (``CheckpointInOutputError``).
    """
    return vacuum_action(spark, sink_path, older_than).execute(dry_run, quiet)
