"""The generated documentation page ``docs/configuration.md``, from the ``SQLConf`` entries.

Every key batchlog reads is defined once, in ``io.batchlog.BatchLogConf``: Spark's keys by their
``SQLConf`` entries, batchlog's registered as ``SQLConf`` entries with their docs and defaults.
This module renders the page from those entries, read through py4j from a session with the
batchlog jar, so the keys, defaults and descriptions on the page cannot drift from the code; the
notes below say what each key means *with batchlog* (the README's text, kept by hand, one place).
Every ``spark.batchlog.*`` entry the jar registers gets a row, noted or not.

Regenerate the page (``tests/test_docs_configuration.py`` fails, naming this command, when the
checked-in page differs from what it renders)::

    .venv/bin/python tests/docs_support.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "configuration.md"
REGENERATE = ".venv/bin/python tests/docs_support.py"

#: Spark's keys batchlog reads or needs, in the page's order, with what each means with batchlog.
SPARK_KEYS: list[tuple[str, str]] = [
    (
        "spark.sql.streaming.commitProtocolClass",
        "set to `io.batchlog.BatchTaggedCommitProtocol`",
    ),
    (
        "spark.sql.extensions",
        "not needed: Spark loads batchlog's extension from the jar (`META-INF/services`)",
    ),
    (
        "spark.sql.streaming.fileSink.log.compactInterval",
        "a `N.compact` file every this many batches",
    ),
    (
        "spark.sql.streaming.fileSink.log.cleanupDelay",
        "log files below the retained compaction are deleted once this old",
    ),
    ("spark.sql.streaming.fileSink.log.deletion", "delete expired log files at all"),
    ("spark.sql.streaming.minBatchesToRetain", "batches whose log files are kept"),
]

#: What batchlog's own keys mean, beyond the entry's description (a key missing here still gets a
#: row, with the entry's description alone).
BATCHLOG_NOTES: dict[str, str] = {
    "spark.batchlog.retention.batches": "at each compaction, drop the entries of batches older "
    "than the last N batches (whole runs, no parsing); kept entries keep their `batchId`",
    "spark.batchlog.retention.age": "drop (and hide from readers) entries whose file is older "
    "than this duration, e.g. `30d`",
    "spark.batchlog.delete.parallelism": "threads deleting files in a rewind",
    "spark.batchlog.compaction.serverSide": "on S3A (Hadoop 3.4+), a compaction's kept bytes are "
    "copied by the store, conditional on the ETag the previous index recorded; on GCS the "
    "previous compact file and the new lines are composed by the store; `inspect` shows the path "
    "a sink takes",
    "spark.batchlog.compaction.serverSideMinBytes": "a smaller previous compact file is "
    "compacted through the driver",
    "spark.batchlog.writer.leaseTimeout": "the writer refreshes its lease every quarter of this "
    "and stops committing once its last successful refresh is older than three quarters; "
    "another process calls the lease dead once it has watched it unchanged for all of it",
    "spark.batchlog.writer.fenceWait": "how long rewind, takeover, repair, vacuum and a starting "
    "writer watch a lease they find before giving up (`WRITER_ACTIVE` says how long is left; a "
    "re-run in the same session counts the time already watched); `lease`: the lease's own "
    "timeout, the CLI's `--wait` default",
}

#: Keys batchlog reads that are not ``SQLConf`` entries (an observer class; a sink option).
OTHER_KEYS: list[tuple[str, str, str]] = [
    (
        "`spark.batchlog.rewind.stepListener`",
        "none",
        "a class implementing `io.batchlog.ops.RewindStepListener` (constructor taking the "
        "`SparkSession`, or none), told each rewind step once done; an observer",
    ),
    (
        "sink option `retention`",
        "none",
        "entries older than this are dropped at compaction (as in Spark)",
    ),
]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or "—"


def _default(entry: object) -> str:
    value = str(entry.defaultValueString())  # type: ignore[attr-defined]
    return "none" if value in ("<undefined>", "None", "") else f"`{value}`"


def render(spark: SparkSession) -> str:
    """The page, from the ``SQLConf`` entries of ``spark``'s JVM (which must have the jar)."""
    jvm = spark._jvm
    assert jvm is not None
    jvm.io.batchlog.BatchLogConf.RetentionBatchesKey()  # registers batchlog's entries
    sqlconf = getattr(getattr(jvm.org.apache.spark.sql.internal, "SQLConf$"), "MODULE$")
    entries = {str(e.key()): e for e in sqlconf.getConfigEntries().toArray()}
    missing = [k for k, _ in SPARK_KEYS if k not in entries]
    assert not missing, f"no SQLConf entry for {missing}"
    ours = sorted(k for k in entries if k.startswith("spark.batchlog."))
    lines = [
        "# Configuration",
        "",
        "<!-- Generated from the SQLConf entries by `" + REGENERATE + "`: do not edit by hand;",
        "     tests/test_docs_configuration.py fails when this page is stale. -->",
        "",
        "Every key batchlog reads is defined once, in `io.batchlog.BatchLogConf`: Spark's keys by",
        "their `SQLConf` entries, batchlog's registered as `SQLConf` entries with their",
        "descriptions and defaults (so `SET -v` lists them). This page is generated from those",
        "entries: the defaults and descriptions below are the ones the code has.",
        "",
        "## Spark's settings",
        "",
        "batchlog honours Spark's own sink-log settings exactly as Spark's `FileStreamSinkLog`",
        "does:",
        "",
        "| key | default | with batchlog | Spark's description |",
        "|---|---|---|---|",
    ]
    for key, note in SPARK_KEYS:
        e = entries[key]
        lines.append(f"| `{key}` | {_default(e)} | {_cell(note)} | {_cell(str(e.doc()))} |")
    lines += [
        "",
        "## batchlog's keys",
        "",
        "| key | default | meaning | description (`SET -v`) |",
        "|---|---|---|---|",
    ]
    for key in ours:
        e = entries[key]
        note = BATCHLOG_NOTES.get(key, "")
        lines.append(f"| `{key}` | {_default(e)} | {_cell(note)} | {_cell(str(e.doc()))} |")
    lines += [
        "",
        "## Other keys and options",
        "",
        "| key | default | meaning |",
        "|---|---|---|",
    ]
    for key, default, note in OTHER_KEYS:
        lines.append(f"| {key} | {default} | {_cell(note)} |")
    lines += [
        "",
        "What retention drops is logged and recorded in the compact file's index (`dropped",
        "<entries> <max batch>`). Untagged entries are never dropped by batch count.",
        "",
        "Values are checked where they are read: a bad one fails with `INVALID_ARGUMENT`, naming",
        "the key.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from support import get_spark

    spark = get_spark()
    try:
        PAGE.write_text(render(spark))
    finally:
        spark.stop()
    print(f"wrote {PAGE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
