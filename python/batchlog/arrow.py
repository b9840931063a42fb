"""Read a batchlog sink without Spark: which batches, which files, a ``pyarrow`` dataset of them.

>>> from batchlog import arrow
>>> log = arrow.SinkLog("/data/events")
>>> log.batches(), log.files(7)[:1], log.batch_of(log.files(7)[0])
>>> table = arrow.dataset("/data/events", batches="4-6").to_table()

Only the log says which files of a sink's directory are live and which batch wrote each: a plain
``pyarrow.dataset("/data/events")`` also reads files of failed and rewound batches. This module
reads the log as the JVM does (``docs/format.md`` is the contract), on ``pyarrow``'s file systems:
a local path, ``s3://``/``s3a://`` and ``gs://`` (or pass ``filesystem=``). It starts no JVM and
imports no ``pyspark``; it never writes. It needs ``pyarrow`` and ``google-crc32c``
(``pip install 'batchlog[arrow]'``).

It answers as ``batchlog.SinkLog`` does, with the same errors (``CorruptLogError`` for a damaged
log file or compact file, ``MissingLogFileError``, ``NotASinkError``). Two things it does not do:
hide entries by age (Spark's sink option ``retention`` and ``spark.batchlog.retention.age`` are
settings of the reading session, not of the sink), and read HDFS (pyarrow needs libhdfs for it).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from batchlog import _logformat as fmt
from batchlog._logformat import Entry, Run, Unproved
from batchlog.errors import (
    InvalidArgumentError,
    MissingLogFileError,
    NotASinkError,
)

if TYPE_CHECKING:
    import pyarrow.dataset as ds

__all__ = ["Entry", "SinkLog", "dataset"]

METADATA_DIR = "_spark_metadata"
#: The interval a log reads at when its compact files do not fix it and no sink record says it.
SPARK_DEFAULT_INTERVAL = 10
_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
T = TypeVar("T")


def _fs_path(uri: str) -> str:
    """The path ``pyarrow.fs`` knows a logged URI (or a plain path) by."""
    u = urlparse(uri)
    if u.scheme in ("", "file"):
        return unquote(u.path)
    return u.netloc + unquote(u.path)


def _resolve(path: str, filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    """The file system of the sink ``path`` and its path there: a plain path (relative to the
    working directory), a ``file:`` URI (``file:/x`` as Hadoop writes it, or ``file:///x``), or a
    store's URI (``s3a://`` and ``gcs://`` read as pyarrow's ``s3://`` and ``gs://``)."""
    u = urlparse(path)
    if filesystem is not None:
        return filesystem, _fs_path(path).rstrip("/")
    if u.scheme in ("", "file"):
        local = path if not u.scheme else unquote(u.path)  # a URI is encoded, a plain path not
        return pafs.LocalFileSystem(), os.path.abspath(local)
    fs, p = pafs.FileSystem.from_uri(f"{_SCHEMES.get(u.scheme, u.scheme)}://{u.netloc}{u.path}")
    return fs, p.rstrip("/")


def _same_path(a: str, b: str) -> bool:
    ua, ub = urlparse(a), urlparse(b)
    return (
        (ua.scheme or "file") == (ub.scheme or "file")
        and ua.netloc == ub.netloc
        and unquote(ua.path) == unquote(ub.path)
    )


@dataclass(frozen=True)
class _Layout:
    """One listing of ``_spark_metadata``: its log files, latest batch, interval, live files."""

    files: dict[int, pafs.FileInfo]  # log id -> its file (N or N.compact)
    indexes: set[int]  # compact ids with an index beside them
    latest: int | None
    interval: int

    @property
    def live(self) -> range:
        return range(0) if self.latest is None else fmt.valid_batches(self.latest, self.interval)

    def is_compact(self, log_id: int) -> bool:
        return fmt.is_compaction_batch(log_id, self.interval)


class _Missing(Exception):
    """A live log file is gone: a compaction may have replaced it meanwhile (read again)."""

    def __init__(self, file: str, log_id: int, interval: int) -> None:
        super().__init__(file)
        self.file, self.log_id, self.interval = file, log_id, interval


class SinkLog:
    """The log of the sink whose output directory is ``path``, read without Spark.

    Each call reads the log as it is then (one listing of ``_spark_metadata``, then the files it
    needs). ``files(b)`` reads only batch ``b``'s lines: from its batch file, or through the
    newest compact file's index (a few ranged reads, each proved by its CRC32C).
    """

    def __init__(self, path: str, filesystem: pafs.FileSystem | None = None) -> None:
        self.path = path
        self._fs, self._root = _resolve(path, filesystem)
        self._meta = f"{self._root}/{METADATA_DIR}"
        if self._fs.get_file_info(self._meta).type != pafs.FileType.Directory:
            raise NotASinkError(
                f"{path} is not a file-sink output: it has no {METADATA_DIR} directory. Pass the "
                "path given to writeStream...start(path) (the directory that holds "
                f"{METADATA_DIR})."
            )
        self._record_interval: int | None = None

    # ---- what it answers --------------------------------------------------------------------

    def latest_batch(self) -> int | None:
        """The latest committed batch id, or ``None`` if the sink has committed nothing."""
        return self._layout().latest

    def batches(self) -> list[int]:
        """Ids of the batches that wrote at least one live file, ascending."""

        def read(layout: _Layout) -> list[int]:
            found: set[int] = set()
            for log_id in layout.live:
                runs = self._proved_runs(layout, log_id) if layout.is_compact(log_id) else None
                if runs is not None and all(r.batch_id is not None for r in runs):
                    found.update(r.batch_id for r in runs if r.batch_id is not None)
                else:
                    entries = self._entries_of(layout, log_id)
                    found.update(e.batch_id for e in entries if e.batch_id is not None)
            return sorted(found)

        return self._reading(read)

    def files(self, batch: int) -> list[str]:
        """Paths (URIs, as logged) of the live files written by ``batch``."""
        if batch < 0:
            raise InvalidArgumentError(f"Invalid batch = {batch}: must be >= 0.")

        def read(layout: _Layout) -> list[str]:
            live = layout.live
            if layout.latest is None or batch > layout.latest:
                return []
            compact = live[0] if layout.is_compact(live[0]) else None
            where = compact if compact is not None and batch <= compact else batch
            if layout.is_compact(where) and where in layout.indexes:
                found = self._lookup(layout, where, batch)
                if found is not None:
                    return found
            if where not in live:  # a batch file older than the newest compact file
                where = live[0]
            return [e.path for e in self._entries_of(layout, where) if e.batch_id == batch]

        return self._reading(read)

    def batch_of(self, path: str) -> int | None:
        """The batch that wrote ``path`` (a logged URI or a plain path); ``None`` if untagged.

        Raises ``KeyError`` if the log does not hold ``path``."""
        hint = fmt.batch_of_name(path)
        name = unquote(path[path.rfind("/") + 1 :])

        def same(p: str) -> bool:  # only a path ending in the same name is parsed and compared
            return p == path or (unquote(p).endswith(name) and _same_path(p, path))

        if hint is not None and any(same(p) for p in self.files(hint)):
            return hint
        for e in self.entries():
            if same(e.path):
                return e.batch_id
        raise KeyError(f"{path} is not a live file of the sink {self.path}")

    def entries(self) -> list[Entry]:
        """Every live entry, its batch resolved as the JVM resolves it (``None``: untagged)."""
        return self._reading(
            lambda layout: [e for i in layout.live for e in self._entries_of(layout, i)]
        )

    def dataset(
        self,
        batches: str | int | tuple[int, int] | None = None,
        as_of_batch: int | None = None,
        format: str | None = None,
        **options: Any,
    ) -> ds.Dataset:
        """A ``pyarrow.dataset`` of exactly the live files of the chosen batches.

        ``batches``: ``"4-6"``, ``"4"``, ``4`` or ``(4, 6)`` (both ends included);
        ``as_of_batch=N``: every batch up to N, the sink as it was after batch N (less what was
        rewound or dropped since). Neither: every live file, untagged ones included. ``format`` is
        the data files' (``parquet``, ``json``, ``csv``, ``orc``), told from their names when not
        given; the partition columns come from Spark's ``key=value`` directories. ``options`` go to
        ``pyarrow.dataset.dataset`` (e.g. ``schema=``)."""
        import pyarrow.dataset as pads

        chosen = self._choose(batches, as_of_batch)
        paths = [_fs_path(e.path) for e in self.entries() if chosen(e.batch_id)]
        kind = format or _format_of(paths)
        options.setdefault("partitioning", "hive")
        options.setdefault("partition_base_dir", self._root)
        return pads.dataset(paths, format=kind, filesystem=self._fs, **options)

    # ---- reading the log --------------------------------------------------------------------

    @staticmethod
    def _choose(
        batches: str | int | tuple[int, int] | None, as_of_batch: int | None
    ) -> Callable[[int | None], bool]:
        if batches is not None and as_of_batch is not None:
            raise InvalidArgumentError("Give batches or as_of_batch, not both.")
        if as_of_batch is not None:
            return lambda b: b is not None and b <= as_of_batch
        if batches is None:
            return lambda b: True
        lo, hi = _batch_range(batches)
        return lambda b: b is not None and lo <= b <= hi

    def _reading(self, read: Callable[[_Layout], T]) -> T:
        """``read`` of the log as listed now; if a live file went meanwhile and a newer compaction
        replaced it (a running writer compacts and cleans up), read again, as Spark's
        ``allFiles()`` does; else the file is missing."""
        layout = self._layout()
        while True:
            try:
                return read(layout)
            except _Missing as m:
                newer = self._layout()
                latest = -1 if layout.latest is None else layout.latest
                if newer.latest is None or newer.latest < fmt.next_compaction_batch(
                    latest, layout.interval
                ):
                    raise MissingLogFileError(
                        f"Sink log file {m.file} is missing: the log needs it to read batch "
                        f"{m.log_id} at compact interval {m.interval}. Restore it from a backup, "
                        "or run `python -m batchlog repair` to rebuild the log from the data "
                        "files' batch-tagged names."
                    ) from None
                layout = newer

    def _layout(self) -> _Layout:
        files: dict[int, pafs.FileInfo] = {}
        indexes: set[int] = set()
        compacts: list[int] = []
        for info in self._fs.get_file_info(pafs.FileSelector(self._meta)):
            name = info.base_name
            if name.endswith(fmt.COMPACT_SUFFIX + fmt.INDEX_SUFFIX):
                parsed = fmt.log_id(name[: -len(fmt.INDEX_SUFFIX)])
                if parsed:
                    indexes.add(parsed[0])
                continue
            parsed = fmt.log_id(name)
            if parsed is None or info.type != pafs.FileType.File:
                continue
            files[parsed[0]] = info
            if parsed[1]:
                compacts.append(parsed[0])
        default = SPARK_DEFAULT_INTERVAL
        if len(compacts) < 2 and files:
            default = self._recorded_interval() or default
        latest = max(files) if files else None
        return _Layout(files, indexes, latest, fmt.interval_of(compacts, default))

    def _recorded_interval(self) -> int | None:
        """The writer's compact interval, from the sink record (``_batchlog/_batchlog-sink.json``,
        or ``batchlog-sink.json`` in the log, where older versions kept it)."""
        if self._record_interval is None:
            self._record_interval = 0
            record_dir = f"{self._root}/_batchlog"
            for p in (f"{record_dir}/_batchlog-sink.json", f"{self._meta}/batchlog-sink.json"):
                try:
                    record = json.loads(self._read(p))
                except (FileNotFoundError, ValueError):
                    continue
                if isinstance(record, dict) and isinstance(record.get("compactInterval"), int):
                    self._record_interval = max(0, record["compactInterval"])
                break
        return self._record_interval or None

    def _read(self, path: str) -> bytes:
        with self._fs.open_input_stream(path) as f:
            return bytes(f.read())

    def _log_file(self, layout: _Layout, log_id: int) -> str:
        name = f"{log_id}{fmt.COMPACT_SUFFIX}" if layout.is_compact(log_id) else str(log_id)
        return f"{self._meta}/{name}"

    def _log_bytes(self, layout: _Layout, log_id: int) -> bytes:
        file = self._log_file(layout, log_id)
        try:
            return self._read(file)
        except FileNotFoundError:
            raise _Missing(file, log_id, layout.interval) from None

    def _entries_of(self, layout: _Layout, log_id: int) -> Iterator[Entry]:
        """Log file ``log_id``'s entries, each with its batch resolved (``batchOf``): its tag, the
        batch file's id, the data file's name, or what surviving log files prove."""
        file = self._log_file(layout, log_id)
        data = self._log_bytes(layout, log_id)
        compact = layout.is_compact(log_id)
        if compact:
            self._check_runs(layout, log_id, data)
        proof: dict[str, int] | None = None
        for n, line in fmt.split_lines(data, file):
            e = fmt.decode(line, file, n)
            b = fmt.resolve_batch(e, log_id, compact)
            if b is None and compact:
                if proof is None:
                    proof = self._lineage(layout, log_id)
                b = proof.get(e.path)
            yield e if b == e.batch_id else _with_batch(e, b)

    def _lineage(self, layout: _Layout, compact_id: int) -> dict[str, int]:
        """``LineageProof``: the batch of each entry named without one that surviving log files
        prove: listed in batch file N, or in N.compact and in none of the files it merged."""
        present = sorted(i for i in layout.files if i <= compact_id)

        def plain_paths(i: int) -> Iterator[str]:
            file = self._log_file(layout, i)
            for n, line in fmt.split_lines(self._log_bytes(layout, i), file):
                path = fmt.decode(line, file, n).path
                if fmt.batch_of_name(path) is None:
                    yield path

        paths: dict[str, int] = {}
        for i in present:
            if not layout.is_compact(i):
                for p in plain_paths(i):
                    paths[p] = i
        for i in present:
            merged = fmt.merged_by(i, layout.interval)
            if layout.is_compact(i) and all(m in layout.files for m in merged):
                before = {p for m in merged for p in plain_paths(m)}
                for p in plain_paths(i):
                    if p not in before and p not in paths:
                        paths[p] = i
        return paths

    # ---- through a compact file's index -----------------------------------------------------

    def _index_file(self, layout: _Layout, compact_id: int) -> str:
        return self._log_file(layout, compact_id) + fmt.INDEX_SUFFIX

    def _proved_runs(self, layout: _Layout, compact_id: int) -> list[Run] | None:
        """The runs of compact file ``compact_id``'s index, proved; None if it has none in use."""
        if compact_id not in layout.indexes:
            return None
        info = layout.files[compact_id]
        try:
            data = self._read(self._index_file(layout, compact_id))
            return fmt.prove(data, info.base_name, info.size or 0, _ms(info))[1]
        except (FileNotFoundError, Unproved):
            return None

    def _check_runs(self, layout: _Layout, compact_id: int, data: bytes) -> None:
        """Fails with ``CORRUPT_LOG`` if a run of the compact file's proved index does not match
        its bytes: a compact file is written once, so while it keeps the name, length and time the
        index records, that is damage, never a newer version."""
        runs = self._proved_runs(layout, compact_id)
        if runs is None:
            return
        damaged = [r for r in runs if fmt.crc32c(data[r.offset : r.offset + r.length]) != r.crc]
        if damaged:
            raise fmt.damaged_compact_file(
                self._log_file(layout, compact_id),
                self._index_file(layout, compact_id),
                self._root,
                damaged,
            )

    def _lookup(self, layout: _Layout, compact_id: int, batch: int) -> list[str] | None:
        """``batch``'s paths from compact file ``compact_id`` through its index, reading the head
        and the blocks that may hold it, then its runs; None: read the compact file instead."""
        info = layout.files[compact_id]
        name, size, mtime = info.base_name, info.size or 0, _ms(info)
        try:
            with self._fs.open_input_file(self._index_file(layout, compact_id)) as idx:
                first = bytes(idx.read_at(fmt.FIRST_READ, 0))
                if fmt.index_version(first) == "v3":
                    length = fmt.head_length(first)
                    head_bytes = first if length <= len(first) else bytes(idx.read_at(length, 0))
                    head = fmt.prove_head(head_bytes, length, name, size, mtime)
                    if any(b.untagged for b in head.blocks):
                        return None  # untagged lines: their batch needs the log's lineage
                    runs = []
                    for b in head.blocks:
                        if b.may_hold(batch):
                            end = b.at + b.length
                            raw = first[b.at : end] if end <= len(first) else None
                            raw = raw if raw is not None else bytes(idx.read_at(b.length, b.at))
                            runs += fmt.prove_block(b, raw)
                else:
                    rest = idx.size() - len(first)
                    if rest > 0:
                        first += bytes(idx.read_at(rest, len(first)))
                    runs = fmt.prove(first, name, size, mtime)[1]
                    if any(r.batch_id is None for r in runs):
                        return None
        except (FileNotFoundError, Unproved):
            return None
        out: list[str] = []
        wanted = [r for r in runs if r.batch_id == batch]
        if not wanted:
            return out
        file = self._log_file(layout, compact_id)
        try:
            with self._fs.open_input_file(file) as f:
                for r in wanted:
                    raw = bytes(f.read_at(r.length, r.offset))
                    if len(raw) != r.length or fmt.crc32c(raw) != r.crc:
                        self._check_runs(layout, compact_id, self._log_bytes(layout, compact_id))
                        return None  # replaced meanwhile: read it whole
                    lines = raw.decode("utf-8", "replace").split("\n")
                    if lines[0] != "" or len(lines) - 1 != r.count:
                        return None
                    for n, line in enumerate(lines[1:]):
                        if fmt.tagged_batch(line) != batch:
                            return None
                        out.append(fmt.path_of(line) or fmt.decode(line, file, n).path)
        except FileNotFoundError:
            raise _Missing(file, compact_id, layout.interval) from None
        return out


def dataset(
    path: str,
    batches: str | int | tuple[int, int] | None = None,
    as_of_batch: int | None = None,
    format: str | None = None,
    filesystem: pafs.FileSystem | None = None,
    **options: Any,
) -> ds.Dataset:
    """``SinkLog(path, filesystem).dataset(batches, as_of_batch, format, **options)``."""
    return SinkLog(path, filesystem).dataset(batches, as_of_batch, format, **options)


def _with_batch(e: Entry, batch: int | None) -> Entry:
    return replace(e, batch_id=batch)


def _ms(info: pafs.FileInfo) -> int:
    """A file's modification time in ms, as Hadoop's file systems report it."""
    ns = info.mtime_ns
    return -1 if ns is None else ns // 1_000_000


_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


def _batch_range(batches: str | int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(batches, bool):
        raise InvalidArgumentError(f"Invalid batches = {batches!r}: give 'N' or 'N-M'.")
    if isinstance(batches, int):
        lo = hi = batches
    elif isinstance(batches, tuple):
        lo, hi = batches
    else:
        m = _RANGE.fullmatch(batches)
        if not m:
            raise InvalidArgumentError(f"Invalid batches = {batches!r}: give 'N' or 'N-M'.")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
    if lo < 0 or hi < lo:
        raise InvalidArgumentError(f"Invalid batches = {batches!r}: give 'N-M' with 0 <= N <= M.")
    return lo, hi


_FORMATS = (
    (".parquet", "parquet"),
    (".json", "json"),
    (".json.gz", "json"),
    (".csv", "csv"),
    (".csv.gz", "csv"),
    (".orc", "orc"),
)


def _format_of(paths: Iterable[str]) -> str:
    """The data files' format, told from their names (Spark ends them in the format's suffix)."""
    for p in paths:
        for suffix, kind in _FORMATS:
            if p.endswith(suffix):
                return kind
        raise InvalidArgumentError(
            f"Cannot tell the format of {p} from its name: pass format= (parquet, json, csv, orc)."
        )
    return "parquet"
