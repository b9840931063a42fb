"""The on-disk format of a sink's log, read without Spark: the contract is ``docs/format.md``.

The JVM (``io.batchlog.log``) defines the format; this module is the one reader outside it, for
:mod:`batchlog.arrow`. It parses log lines (``LogFormat``), data file names (``DataFileNaming``),
Spark's log layout (``CompactibleFileStreamLog``, ``LogLayout``) and compact indexes, ``v2`` and
``v3`` (``CompactIndex``, ``IndexBlocks``), proving them as the JVM does before it trusts them. No
file system here: callers hand it bytes. The golden sinks (``tests/fixtures/golden``) and live
sinks written by the JVM test that both give the same answers (``tests/test_arrow_reader.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import google_crc32c

from batchlog.errors import CorruptLogError

HEADER = "v1"
HEADER_BYTES = HEADER.encode()
BATCH_ID_FIELD = "batchId"
COMPACT_SUFFIX = ".compact"
INDEX_SUFFIX = ".index"
#: Where the first line of a log file starts: after ``v1`` (its ``\n`` belongs to the first run).
FIRST_OFFSET = len(HEADER)

_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_TAGGED_NAME = re.compile(f"part-[0-9]+-batch-([0-9]+)-{_UUID}")
_TAG_MARKER = ',"batchId":'
_REPAIR = "python -m batchlog repair"


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli) of ``data``, as ``java.util.zip.CRC32C`` computes it."""
    return int(google_crc32c.value(data))


# ---- entries (LogFormat) -------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One live entry of the log: Spark's ``SinkFileStatus`` plus its batch (``None``: untagged)."""

    path: str
    size: int
    is_dir: bool
    modification_time: int
    block_replication: int
    block_size: int
    action: str
    batch_id: int | None


_FIELDS: dict[str, tuple[str, type]] = {
    "path": ("path", str),
    "size": ("size", int),
    "isDir": ("is_dir", bool),
    "modificationTime": ("modification_time", int),
    "blockReplication": ("block_replication", int),
    "blockSize": ("block_size", int),
    "action": ("action", str),
}
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean"}


def corrupt_line(file: str, line_no: int, detail: str) -> CorruptLogError:
    return CorruptLogError(
        f"Sink log file {file}, line {line_no}, is not a valid log entry ({detail}). Restore the "
        f"file from a backup, or run `{_REPAIR}` to rebuild the log from the data files' "
        "batch-tagged names."
    )


def bad_header(file: str, header: str | None) -> CorruptLogError:
    if header is None:
        detail = "it is empty (a truncated write)"
    elif re.fullmatch(r"v\d+", header):
        detail = f"its version header is '{header}' but only 'v1' is supported"
    else:
        detail = f"its first line '{header[:40]}' is not a version header like 'v1'"
    return CorruptLogError(
        f"Sink log file {file} cannot be read: {detail}. If a newer tool wrote it, read it with "
        f"that tool; otherwise restore it from a backup or run `{_REPAIR}`."
    )


def decode(line: str, file: str, line_no: int) -> Entry:
    """One log line (``LogFormat.decode``): fields in any order, unknown ones ignored, the seven
    Spark fields required with their JSON types, ``batchId`` optional (or ``null``)."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise corrupt_line(file, line_no, f"malformed JSON: {e}") from None
    if not isinstance(obj, dict):
        raise corrupt_line(file, line_no, "not a JSON object")
    values: dict[str, object] = {}
    for name, (attr, kind) in _FIELDS.items():
        if name not in obj:
            raise corrupt_line(file, line_no, f"required field '{name}' is missing")
        v = obj[name]
        # JSON true is no integer here, as in the JVM's parser
        if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
            raise corrupt_line(file, line_no, f"field '{name}' is not {_TYPE_NAMES[kind]}")
        values[attr] = v
    b = obj.get(BATCH_ID_FIELD)
    if b is not None and (not isinstance(b, int) or isinstance(b, bool)):
        raise corrupt_line(file, line_no, f"field '{BATCH_ID_FIELD}' is not an integer")
    return Entry(batch_id=b, **values)  # type: ignore[arg-type]


def tagged_batch(line: str) -> int | None:
    """The ``batchId`` a line ends with, as the JVM writes it (``LogFormat.taggedBatch``)."""
    if not line.endswith("}"):
        return None
    j = len(line) - 2
    while j >= 0 and line[j].isdigit():
        j -= 1
    digits = len(line) - 2 - j
    if digits == 0 or digits > 19 or not line.startswith(_TAG_MARKER, j - len(_TAG_MARKER) + 1):
        return None
    return int(line[j + 1 : -1])


_PATH_START = '{"path":"'
_PATH_END = '","size":'


def path_of(line: str) -> str | None:
    """The path of a line as the JVM writes it (``LogFormat.encode``: ``path`` first), cut from
    the line without parsing it, when the path holds no JSON escape; None otherwise (decode it).
    Used on the bytes of a run whose CRC32C matched: exactly what the JVM wrote."""
    if not line.startswith(_PATH_START):
        return None
    end = line.find(_PATH_END, len(_PATH_START))
    if end < 0:
        return None
    path = line[len(_PATH_START) : end]
    return None if "\\" in path or '"' in path else path


def batch_of_name(path: str) -> int | None:
    """The batch in a batch-tagged data file name (``DataFileNaming.batchIdOf``)."""
    m = _TAGGED_NAME.search(path[path.rfind("/") + 1 :])
    return int(m.group(1)) if m else None


def resolve_batch(e: Entry, log_id: int, in_compact: bool) -> int | None:
    """``LogFormat.resolveBatch``: the tag; else, in batch file N, N; else the data file name."""
    if e.batch_id is not None:
        return e.batch_id
    if not in_compact:
        return log_id
    return batch_of_name(e.path)


def split_lines(data: bytes, file: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of each entry line of a log file's bytes, the header checked.

    As Java's ``readLine``: a trailing ``\\n`` ends the last line, it does not start another."""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()
    header = lines[0].rstrip("\r") if data else None
    if header != HEADER:
        raise bad_header(file, header)
    for n, line in enumerate(lines[1:], start=2):
        yield n, line.rstrip("\r")


# ---- the layout (CompactibleFileStreamLog, LogLayout) --------------------------------------


def log_id(name: str) -> tuple[int, bool] | None:
    """``(id, is_compact)`` of a log file's name (``N`` or ``N.compact``); None for others."""
    base = name[: -len(COMPACT_SUFFIX)] if name.endswith(COMPACT_SUFFIX) else name
    if not base or len(base) > 18 or not base.isdigit() or not base.isascii():
        return None
    return int(base), base != name


def is_compaction_batch(batch: int, interval: int) -> bool:
    return (batch + 1) % interval == 0


def next_compaction_batch(batch: int, interval: int) -> int:
    return (batch + interval + 1) // interval * interval - 1


def valid_batches(latest: int, interval: int) -> range:
    """The log files holding every live entry at ``latest`` (``getAllValidBatches``)."""
    return range(max(0, (latest + 1) // interval * interval - 1), latest + 1)


def merged_by(compaction: int, interval: int) -> range:
    """The log files compaction ``compaction`` merged (``getValidBatchesBeforeCompactionBatch``)."""
    return range(max(0, compaction - interval), compaction)


def derive_interval(default: int, latest_compact: int) -> int:
    """Spark's ``deriveCompactInterval``: the interval a log with one compact file reads at."""
    n = latest_compact + 1
    if n <= default:
        return n
    if default < n // 2:
        return next((i for i in range(default, n // 2 + 1) if n % i == 0), n)
    return n


def interval_of(compact_ids: list[int], default: int) -> int:
    """Spark's rule (``LogLayout.derivedInterval``): the gap between the two newest compact files,
    else derived from the one there is, else ``default``."""
    ids = sorted(compact_ids, reverse=True)
    if len(ids) >= 2:
        return ids[0] - ids[1]
    if ids:
        return derive_interval(default, ids[0])
    return default


# ---- compact indexes (CompactIndex, IndexBlocks) -------------------------------------------


@dataclass(frozen=True)
class Run:
    """Consecutive lines of one batch (``None``: untagged) in a compact file: the bytes
    ``[offset, offset + length)``, each line counted with the ``\\n`` before it."""

    batch_id: int | None
    offset: int
    length: int
    count: int
    crc: int


@dataclass(frozen=True)
class Block:
    """A ``v3`` block as its head describes it; ``at`` is its offset in the index file."""

    runs: int
    untagged: int
    first_offset: int
    end_offset: int
    min_batch: int | None
    max_batch: int | None
    at: int
    length: int
    crc: int

    def may_hold(self, batch: int) -> bool:
        return self.untagged > 0 or (
            self.min_batch is not None
            and self.max_batch is not None
            and self.min_batch <= batch <= self.max_batch
        )


@dataclass(frozen=True)
class Head:
    """What a proved index says of its compact file, and (``v3``) its blocks."""

    compact_name: str
    compact_length: int
    compact_mtime: int
    dropped_entries: int
    dropped_max_batch: int
    length: int
    blocks: tuple[Block, ...]


class Unproved(Exception):
    """An index that is not used, and why (never damage: readers scan the compact file)."""


V2 = "batchlog-index v2"
V3 = "batchlog-index v3"
_FIRST_LINE_V3 = len(V3) + 12
_HEX = "[0-9a-f]{1,8}"
_CHECKSUM = re.compile(f"checksum ({_HEX})")
_COMPACT = re.compile(r"compact (\S+) (\d+) (-?\d+) dropped (\d+) (-?\d+)(?: etag (\S+))?")
_RUN = re.compile(f"(-|\\d+) (\\d+) (\\d+) (\\d+) ({_HEX})")
_BLOCK = re.compile(f"block (\\d+) (\\d+) (\\d+) (\\d+) (-|\\d+) (-|\\d+) (\\d+) ({_HEX})")
_VERSION = re.compile(r"batchlog-index v([0-9]{1,18})(?: .*)?")
#: What a lookup reads first: the head of any index up to ~1,000 blocks, or a whole small one.
FIRST_READ = 64 * 1024


def _checksummed(data: bytes, end: int) -> list[str]:
    """The lines of ``data[:end]`` whose last line is the checksum of every byte before it."""
    if end < 1 or data[end - 1] != 0x0A:
        raise Unproved("it does not end with a checksum line: it is truncated")
    last_start = data.rfind(b"\n", 0, end - 1) + 1
    m = _CHECKSUM.fullmatch(data[last_start : end - 1].decode("ascii", "replace"))
    if not m:
        raise Unproved("it does not end with a checksum line: it is truncated")
    if crc32c(data[:last_start]) != int(m.group(1), 16):
        raise Unproved("its checksum does not match")
    lines = data[:last_start].decode("utf-8", "replace").split("\n")[:-1]
    if len(lines) < 2:
        raise Unproved("it has no compact line")
    return lines


def _identity(line: str, name: str, length: int, mtime: int) -> re.Match[str]:
    m = _COMPACT.fullmatch(line)
    if not m:
        raise Unproved("its line 2 is not a compact line")
    if m.group(1) != name:
        raise Unproved(f"it describes {m.group(1)}, not {name}")
    if int(m.group(2)) != length:
        raise Unproved(f"the compact file is {length} bytes, the index says {m.group(2)}")
    if int(m.group(3)) != mtime:
        raise Unproved(
            f"the compact file's modification time is {mtime}, the index says {m.group(3)}"
        )
    return m


def _run(line: str) -> Run | None:
    m = _RUN.fullmatch(line)
    if not m:
        return None
    b = None if m.group(1) == "-" else int(m.group(1))
    return Run(b, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5), 16))


def _tile(runs: list[Run], start: int) -> int:
    end = start
    for r in runs:
        if r.count <= 0 or r.length <= 0:
            raise Unproved(f"its run at byte {r.offset} is empty")
        if r.offset > end:
            raise Unproved(f"its runs leave bytes {end}..{r.offset} uncovered")
        if r.offset < end:
            raise Unproved(f"its runs overlap at bytes {r.offset}..{end}")
        end = r.offset + r.length
    return end


def _ends_at(end: int, length: int) -> None:
    if end < length:
        raise Unproved(f"its runs leave bytes {end}..{length} uncovered")
    if end > length:
        raise Unproved(f"its runs end at byte {end}, past the end of the compact file")


def index_version(first: bytes) -> str:
    """``v2``, ``v3``, or why an index with these first bytes is not read (legacy, newer)."""
    line = first.split(b"\n", 1)[0].decode("utf-8", "replace")
    if first.startswith(V3.encode() + b" "):
        return "v3"
    if line == V2:
        return "v2"
    if line == "batchlog-index v1":
        raise Unproved("it is a legacy v1 index (without checksums)")
    m = _VERSION.fullmatch(line)
    if m and int(m.group(1)) > 3:
        raise Unproved(
            f"it is an index of a newer batchlog (batchlog-index v{m.group(1)}; this batchlog "
            "reads v2 and v3)"
        )
    raise Unproved(f"its first line is not '{V3} <length>' or '{V2}'")


def head_length(first: bytes) -> int:
    """The length of a ``v3`` index's head, from its first bytes."""
    if len(first) < _FIRST_LINE_V3:
        raise Unproved("it is truncated")
    line = first[: _FIRST_LINE_V3 - 1].decode("ascii", "replace")
    m = re.fullmatch(r"batchlog-index\sv3 (\d{10})", line)
    if not m or first[_FIRST_LINE_V3 - 1] != 0x0A or int(m.group(1)) < _FIRST_LINE_V3:
        raise Unproved(f"its first line is not '{V3} <length>'")
    return int(m.group(1))


def prove_head(data: bytes, length: int, name: str, size: int, mtime: int) -> Head:
    """The head of a ``v3`` index (its bytes ``[0, length)``), proved for compact file ``name``
    of ``size`` bytes modified at ``mtime`` (ms) (``IndexBlocks.proveHead``)."""
    if len(data) < length:
        raise Unproved("it is truncated")
    lines = _checksummed(data, length)
    c = _identity(lines[1], name, size, mtime)
    blocks, at, end = [], length, FIRST_OFFSET
    for i, line in enumerate(lines[2:]):
        m = _BLOCK.fullmatch(line)
        if not m:
            raise Unproved(f"its line {i + 3} is not a block")
        n, u, first, last, lo, hi, blen, crc = m.groups()
        b = Block(
            int(n),
            int(u),
            int(first),
            int(last),
            None if lo == "-" else int(lo),
            None if hi == "-" else int(hi),
            at,
            int(blen),
            int(crc, 16),
        )
        if b.runs <= 0 or b.untagged > b.runs or b.length <= 0 or b.end_offset <= b.first_offset:
            raise Unproved(f"its block at byte {b.first_offset} is empty")
        if b.first_offset > end:
            raise Unproved(f"its runs leave bytes {end}..{b.first_offset} uncovered")
        if b.first_offset < end:
            raise Unproved(f"its runs overlap at bytes {b.first_offset}..{end}")
        end, at = b.end_offset, at + b.length
        blocks.append(b)
    _ends_at(end, size)
    return Head(name, size, mtime, int(c.group(4)), int(c.group(5)), length, tuple(blocks))


def prove_block(b: Block, data: bytes) -> list[Run]:
    """The runs of block ``b`` from its bytes, proved (``IndexBlocks.proveBlock``)."""
    where = f"its block at byte {b.at}"
    if len(data) != b.length or crc32c(data) != b.crc:
        raise Unproved(f"{where} does not match its checksum")
    runs = []
    for line in data.decode("utf-8", "replace").split("\n")[:-1]:
        r = _run(line)
        if r is None:
            raise Unproved(f"{where} has a line that is not a run")
        if r.batch_id is not None and (
            b.min_batch is None
            or b.max_batch is None
            or not b.min_batch <= r.batch_id <= b.max_batch
        ):
            raise Unproved(f"{where} holds batch {r.batch_id} outside its range")
        runs.append(r)
    end = _tile(runs, b.first_offset)
    untagged = sum(1 for r in runs if r.batch_id is None)
    if len(runs) != b.runs or untagged != b.untagged or end != b.end_offset:
        raise Unproved(f"{where} does not hold the runs its head says")
    return runs


def prove(data: bytes, name: str, size: int, mtime: int) -> tuple[Head, list[Run]]:
    """A whole index (``v2`` or ``v3``) proved for its compact file (``CompactIndex.prove``)."""
    if not data:
        raise Unproved("it is empty")
    if index_version(data[:FIRST_READ]) == "v3":
        head = prove_head(data, head_length(data), name, size, mtime)
        end = head.blocks[-1].at + head.blocks[-1].length if head.blocks else head.length
        if len(data) < end:
            raise Unproved("it is truncated")
        if len(data) > end:
            raise Unproved(f"it is {len(data)} bytes, its head says {end}")
        runs = [r for b in head.blocks for r in prove_block(b, data[b.at : b.at + b.length])]
        return head, runs
    lines = _checksummed(data, len(data))
    c = _identity(lines[1], name, size, mtime)
    runs = []
    for i, line in enumerate(lines[2:]):
        r = _run(line)
        if r is None:
            raise Unproved(f"its line {i + 3} is not a run")
        runs.append(r)
    runs.sort(key=lambda r: r.offset)
    _ends_at(_tile(runs, FIRST_OFFSET), size)
    head = Head(name, size, mtime, int(c.group(4)), int(c.group(5)), len(data), ())
    return head, runs


def damaged_compact_file(file: str, index: str, sink: str, runs: list[Run]) -> CorruptLogError:
    """``BatchLogException.damagedCompactFile``: runs whose bytes do not match their CRC32C while
    the compact file keeps the name, length and modification time its index records."""
    named = ", ".join(
        f"batch {'-' if r.batch_id is None else r.batch_id} "
        f"(bytes {r.offset}..{r.offset + r.length})"
        for r in runs
    )
    return CorruptLogError(
        f"Sink log file {file} is damaged: the bytes of {named} do not match the CRC32C its index "
        f"{index} recorded when the file was written, yet the file keeps the name, length and "
        "modification time the index records. A compact file is written once, so this is damage "
        "(bit rot or an edit in place), not a newer version of it; it is not used. Stop the query "
        f"and run `{_REPAIR} {sink}`: it restores the entries of "
        f"{'that batch' if len(runs) == 1 else 'those batches'} from their batch files or from "
        "the data files' batch-tagged names, and keeps the damaged file in "
        "_spark_metadata.damaged-<time>."
    )
