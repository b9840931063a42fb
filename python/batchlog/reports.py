"""The plans and reports batchlog's operations return, as frozen dataclasses.

They mirror the JVM case classes of ``io.batchlog.ops.Reports`` field for field (the JVM's
``camelCase`` names in ``snake_case``) and are read, in one place (:func:`from_json`), from the
JSON that ``io.batchlog.api.ReportJson`` writes. A test checks that both sides name the same
fields.

For code written against batchlog 0.1, whose reports were dictionaries, a report still answers
``report["camelCaseKey"]`` and ``report.get("camelCaseKey")``; prefer the attributes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T", bound="Report")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


@dataclasses.dataclass(frozen=True)
class Report:
    """Base of every report: attribute access, plus read-only ``report["jsonKey"]``."""

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, _snake(key))
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        """The field whose JSON name is ``key``, or ``default``."""
        return getattr(self, _snake(key), default)

    def to_dict(self) -> dict[str, Any]:
        """The report as the JVM wrote it: JSON names, nested reports as dictionaries."""
        return {_camel(f.name): _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(v: Any) -> Any:
    if isinstance(v, Report):
        return v.to_dict()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_convert(item, v) for v in value]
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], value)
    if isinstance(tp, type) and issubclass(tp, Report):
        return from_dict(tp, value)
    return value


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """``cls`` from the JVM's JSON object ``data``; fails on a missing or an unknown field."""
    hints = typing.get_type_hints(cls)
    names = {_camel(f.name): f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - set(names)
    missing = set(names) - set(data)
    if unknown or missing:
        raise ValueError(
            f"{cls.__name__}: the JVM sent fields {sorted(unknown)} that Python does not know and "
            f"not {sorted(missing)}; the batchlog jar and Python package are of different versions"
        )
    return cls(**{py: _convert(hints[py], data[js]) for js, py in names.items()})


def from_json(cls: type[T], text: str) -> T:
    """``cls`` from JSON written by ``io.batchlog.api.ReportJson``."""
    return from_dict(cls, json.loads(text))


# ---- pieces ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BatchFiles(Report):
    """Files and bytes one batch wrote."""

    batch_id: int
    files: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class SinkReaderInfo(Report):
    """A query that reads the sink (registered at each of its starts): its checkpoint, the index
    of its source that reads the sink, ``kind`` (``batchlog`` or ``file``), its own file sink if
    any, when first and last seen (ms), and ``stale`` when unseen longer than
    ``spark.batchlog.readers.staleAfter``."""

    query_id: str
    checkpoint: str
    source_index: int
    kind: str
    sink: str | None
    since_ms: int
    seen_ms: int
    stale: bool


@dataclasses.dataclass(frozen=True)
class LoggedFile(Report):
    """A logged data file: its path as logged (a URI), size and batch (None when untagged)."""

    path: str
    size: int
    batch_id: int | None


@dataclasses.dataclass(frozen=True)
class OpenUpload(Report):
    """A multipart upload left open under the sink's log directories (S3): its parts are billed."""

    path: str
    upload_id: str
    initiated_time: int


@dataclasses.dataclass(frozen=True)
class OrphanFile(LoggedFile):
    """A data file in the output directory that the log does not list."""

    modification_time: int


@dataclasses.dataclass(frozen=True)
class SizeMismatch(LoggedFile):
    """A logged file whose size on disk is not the logged one."""

    actual_size: int


@dataclasses.dataclass(frozen=True)
class ForeignEntry(LoggedFile):
    """A logged file not inside the output directory; ``reason`` says why. Nothing acts on it."""

    reason: str


@dataclasses.dataclass(frozen=True)
class WrongBatch(LoggedFile):
    """A logged file whose batch-tagged name names another batch than its entry."""

    name_batch_id: int


@dataclasses.dataclass(frozen=True)
class IndexProblem(Report):
    """An index file beside a live compact file that is not used, and why."""

    file: str
    compact_id: int
    problem: str


@dataclasses.dataclass(frozen=True)
class DamagedRun(Report):
    """A run of a compact file whose bytes do not match the CRC32C its proved index records."""

    file: str
    compact_id: int
    batch_id: int | None
    offset: int
    length: int
    entries: int


@dataclasses.dataclass(frozen=True)
class RestoredRun(Report):
    """A damaged run a repair restores (in a dry run: would restore), and where from."""

    file: str
    batch_id: int
    entries: int
    source: str


@dataclasses.dataclass(frozen=True)
class LogCut(Report):
    """How a compactible log directory is cut back: log files rebuilt and deleted, by name."""

    dir: str
    keep_up_to: int
    rebuild: list[str]
    delete: list[str]


@dataclasses.dataclass(frozen=True)
class SourceLogCut(LogCut):
    """The cut of file source ``source``'s log (``sources/<source>/``)."""

    source: int


@dataclasses.dataclass(frozen=True)
class RepairLogFile(Report):
    """A log file a repair writes: its name, entries and the batches they come from."""

    name: str
    entries: int
    batches: int


# ---- reports -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HorizonReport(Report):
    """The oldest batch a rewind can reach (sink lineage, checkpoint retention) and the owner;
    given a checkpoint and an owner on record, how many of its committed batches the sink has from
    another writer (skipped by Spark's sink: their rows are not in it), the first and last."""

    sink_horizon: int
    checkpoint_horizon: int | None
    horizon: int
    min_batches_to_retain: int
    owner: str | None
    owner_since: int | None
    checkpoint_query_id: str | None
    checkpoint_skipped_batches: int | None
    checkpoint_skipped_first: int | None
    checkpoint_skipped_last: int | None


@dataclasses.dataclass(frozen=True)
class LeaseHolder(Report):
    """The writer's lease as ``inspect`` read it, once: the query, run and driver holding it, the
    batch it was at and when it last refreshed it (ms, by the writer's own clock). One read cannot
    tell a live writer from a killed one whose lease is not yet judged dead: that takes watching it
    unchanged for ``timeout_ms``."""

    query_id: str
    run_id: str
    host: str
    pid: int
    batch_id: int
    refreshed_at_ms: int
    timeout_ms: int


@dataclasses.dataclass(frozen=True)
class SinkSummary(Report):
    """``inspect``: compaction state, log files, per-batch totals and the rewind horizon, the
    sink's readers, the writer's lease (``None``: no query writes it) and ``retained_from``, the
    retention watermark: the oldest batch the sink's log retention has not dropped entries of (0 if
    it dropped none)."""

    output_path: str
    metadata_path: str
    latest_batch: int
    compact_interval: int
    latest_compact: str | None
    next_compaction_batch: int
    log_files: int
    log_bytes: int
    untagged_files: int
    untagged_bytes: int
    batches: list[BatchFiles]
    horizon: HorizonReport
    log_publish: str
    compaction: str
    readers: list[SinkReaderInfo]
    lease: LeaseHolder | None
    retained_from: int


@dataclasses.dataclass(frozen=True)
class SinkBatch(Report):
    """A batch in a sink's history: the live files it wrote, their bytes, the newest one's time
    (ms since the epoch), and what its commit recorded: its rows, how long its write took, the
    query and the run that wrote it. Each of those is ``None`` where its commit did not record it
    (committed before batchlog recorded them); ``history(rows=True)`` then counts the rows."""

    batch_id: int
    files: int
    bytes: int
    time_ms: int
    rows: int | None
    duration_ms: int | None
    query_id: str | None
    run_id: str | None


@dataclasses.dataclass(frozen=True)
class SinkCompaction(Report):
    """A compaction in a sink's history: its live compact file, the file's size and time."""

    batch_id: int
    file: str
    bytes: int
    time_ms: int


@dataclasses.dataclass(frozen=True)
class SinkOperation(Report):
    """A maintenance operation in a sink's history: who ran it (Hadoop user, host, Spark
    application), when it ended and how long it took, what it was asked, its ``outcome``
    (``done``, or ``failed: <code>``) and what it ``changed``, counted."""

    operation: str
    time_ms: int
    duration_ms: int
    user: str
    host: str
    application_id: str
    batchlog_version: str
    arguments: dict[str, str]
    outcome: str
    changed: dict[str, int]


@dataclasses.dataclass(frozen=True)
class SinkHistory(Report):
    """``history``: a sink's live batches, its live compactions and the operations run on it
    within ``operations_retention_ms``, each oldest first."""

    sink: str
    latest_batch: int
    untagged_files: int
    batches: list[SinkBatch]
    compactions: list[SinkCompaction]
    operations: list[SinkOperation]
    operations_retention_ms: int


@dataclasses.dataclass(frozen=True)
class RewindPlanSummary(Report):
    """What a rewind to ``to_batch`` will do (what a dry run prints)."""

    sink: str
    checkpoint: str
    to_batch: int
    sink_latest_batch: int
    offsets_latest: int
    commits_latest: int
    horizon: int
    sink_horizon: int
    checkpoint_horizon: int
    resuming: bool
    query_id: str
    force: bool
    affected_batches: list[int]
    data_files: int
    data_bytes: int
    orphan_files: int
    data_files_per_batch: list[BatchFiles]
    sink_log: LogCut
    source_logs: list[SourceLogCut]
    state_files: list[str]
    state_bytes: int
    remove_state_dir: bool
    commits_to_delete: list[int]
    offsets_to_delete: list[int]


@dataclasses.dataclass(frozen=True)
class RewindResult(Report):
    """What a rewind did."""

    to_batch: int
    data_files_deleted: int
    data_bytes: int
    elapsed_ms: int
    data_files_ms: int


@dataclasses.dataclass(frozen=True)
class RewindReport(Report):
    """A rewind's plan and, unless it was a dry run, its result."""

    plan: RewindPlanSummary
    result: RewindResult | None


@dataclasses.dataclass(frozen=True)
class CheckpointRewindSummary(Report):
    """The rewind of a cascade's hop that writes no file sink (``foreachBatch``, Kafka, a table):
    its checkpoint only, batch ``to_batch`` planned anew (``offsets_to_delete`` from it on), its
    file sources' logs and its state cut back."""

    checkpoint: str
    to_batch: int
    offsets_to_delete: list[int]
    commits_to_delete: list[int]
    source_logs: list[SourceLogCut]
    state_files: list[str]
    state_bytes: int
    remove_state_dir: bool


@dataclasses.dataclass(frozen=True)
class CascadeHopSummary(Report):
    """One hop of a cascade rewind: the query of ``checkpoint`` (writing the file sink ``sink``,
    if any) goes back to ``to_batch`` because its source ``source_index`` (``kind``: ``batchlog``,
    ``file``, or ``root`` for the sink the cascade starts from) read batch ``upstream_from`` or
    later of ``upstream``. ``plan`` is its own rewind plan; ``None`` for a query writing no file
    sink, whose checkpoint alone is rewound (``checkpoint_rewind``): its batches
    ``to_batch..last_batch`` run again when it restarts, and what they wrote outside batchlog is
    written again."""

    depth: int
    upstream: str | None
    upstream_from: int
    source_index: int
    kind: str
    registered: bool
    sink: str | None
    checkpoint: str
    to_batch: int
    last_batch: int
    plan: RewindPlanSummary | None
    checkpoint_rewind: CheckpointRewindSummary | None


@dataclasses.dataclass(frozen=True)
class CascadeUnaffectedReader(Report):
    """A reader of a rewound sink that the cascade leaves as it is, and why."""

    checkpoint: str
    upstream: str
    why: str


@dataclasses.dataclass(frozen=True)
class CascadePlanSummary(Report):
    """What a cascade rewind will do: ``hops``, the sink it starts from first; ``command`` runs
    it again (and finishes it after a crash)."""

    sink: str
    checkpoint: str
    to_batch: int
    resuming: bool
    hops: list[CascadeHopSummary]
    unaffected: list[CascadeUnaffectedReader]
    command: str


@dataclasses.dataclass(frozen=True)
class CascadeReport(Report):
    """A cascade's plan and, unless it was a dry run, each hop's result (``None`` for a listed
    hop)."""

    plan: CascadePlanSummary
    results: list[RewindResult | None] | None
    elapsed_ms: int

    @property
    def hops(self) -> list[CascadeHopSummary]:
        """The plan's hops."""
        return self.plan.hops


@dataclasses.dataclass(frozen=True)
class TakeoverReport(Report):
    """A takeover's plan and whether it was carried out."""

    sink: str
    checkpoint: str
    query_id: str
    previous_owner: str | None
    previous_owner_since: int | None
    sink_latest_batch: int
    from_batch: int
    checkpoint_next_batch: int
    skipped_batches: int
    already_owner: bool
    dry_run: bool
    done: bool


@dataclasses.dataclass(frozen=True)
class AdoptReport(Report):
    """What adopt tagged (or, in a dry run, would tag)."""

    sink: str
    dry_run: bool
    compact_files: int
    compact_files_rewritten: int
    entries_tagged: int
    entries_untagged: int
    untagged_horizon: int


@dataclasses.dataclass(frozen=True)
class VerifyReport(Report):
    """A sink's log checked against its output directory; ``healthy`` is the verdict."""

    sink: str
    metadata_path: str
    healthy: bool
    latest_batch: int
    compact_interval: int
    live_files: int
    live_bytes: int
    untagged_entries: int
    log_errors: list[str]
    index_problems: list[IndexProblem]
    index_advice: str | None
    indexes_rebuilt_in_memory: int
    damaged_runs: list[DamagedRun]
    missing_count: int
    missing: list[LoggedFile]
    size_mismatch_count: int
    size_mismatch: list[SizeMismatch]
    wrong_batch_count: int
    wrong_batch: list[WrongBatch]
    orphan_count: int
    orphan_bytes: int
    orphans: list[OrphanFile]
    foreign_count: int
    foreign: list[ForeignEntry]
    links: list[str]
    checkpoints_in_output: list[str]
    other_file_count: int
    open_uploads: list[OpenUpload]


@dataclasses.dataclass(frozen=True)
class RepairReport(Report):
    """A repair's plan and outcome (``written``, ``moved_aside``, ``indexes_rewritten``)."""

    sink: str
    metadata_path: str
    log_exists: bool
    log_healthy: bool
    log_problems: list[str]
    needed: bool
    compact_interval: int
    compact_interval_source: str
    compact_interval_assumed: bool
    owner: str | None
    rewind_in_progress: int | None
    latest_batch: int
    data_files: int
    data_bytes: int
    log_files: list[RepairLogFile]
    batches: list[BatchFiles]
    untagged_count: int
    untagged: list[str]
    suspect_batches: list[int]
    index_problems: list[IndexProblem]
    indexes_only: bool
    dry_run: bool
    written: bool
    moved_aside: str | None
    indexes_rewritten: list[str]
    damaged_runs: list[DamagedRun]
    runs_only: bool
    runs_restored: list[RestoredRun]


@dataclasses.dataclass(frozen=True)
class VacuumReport(Report):
    """What vacuum deleted (or, in a dry run, would delete) and what it kept."""

    sink: str
    dry_run: bool
    latest_batch: int
    older_than_ms: int
    cutoff_time: int
    live_files: int
    orphan_files: int
    orphan_bytes: int
    candidate_files: int
    candidate_bytes: int
    deleted_files: int
    skipped_recent_files: int
    skipped_recent_bytes: int
    writer_live: bool
    skipped_running_files: int
    skipped_running_bytes: int
    candidates: list[OrphanFile]
    skipped_running: list[str]
    skipped_recent: list[str]
    skipped_links: list[str]
    other_file_count: int
    uploads_to_abort: list[OpenUpload]
    recent_uploads: int
    aborted_uploads: int
