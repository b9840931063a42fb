"""What the test apps stream: JSON-lines input files, one a micro-batch, written by a query to a
parquet sink partitioned by country (through batchlog's committer when the session has it).
Imported by the apps beside it (a script's own directory is first on ``sys.path``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

SCHEMA = "id LONG, country STRING"


def drop_inputs(inbox: Path, batches: int, rows: int) -> None:
    """``batches`` files of ``rows`` rows (ids ``b * 10 + i``, countries NL and FR in turn), their
    modification times in batch order: one file a micro-batch with ``maxFilesPerTrigger`` 1."""
    inbox.mkdir(parents=True)
    base = int(time.time()) - 3600
    for b in range(batches):
        f = inbox / f"events-{b}.json"
        lines = [{"id": b * 10 + i, "country": "NL" if i % 2 else "FR"} for i in range(rows)]
        f.write_text("".join(json.dumps(r) + "\n" for r in lines))
        os.utime(f, (base + b, base + b))


def start_partitioned_sink(spark: Any, inbox: Path, out: str, chk: str) -> Any:
    """The ``availableNow`` query from ``inbox`` (a file a batch) into the parquet sink ``out``,
    partitioned by ``country``; started."""
    return (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox))
        .writeStream.format("parquet")
        .partitionBy("country")
        .option("checkpointLocation", chk)
        .trigger(availableNow=True)
        .start(out)
    )
