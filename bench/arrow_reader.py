"""The reader without Spark (``batchlog.arrow``) on the logs the JVM benchmarks left, beside the
JVM's figures for the same calls on the same logs.

    bench/run arrow    after `log`, `files` and `lookup` (bench/run all runs it between them)

- ``files(batch)`` and ``batch_of(path)`` on the logs ``bench/run log`` left (``n<N>/batchlog``:
  100k, 1M, 10M entries), each call on a new ``SinkLog`` (nothing cached between calls; the
  listing of the log included) for the first, middle and last batch: the slowest batch's best of
  ``--repeat``, as ``FilesBench`` measures the JVM (``files.json``);
- on the sinks ``bench/run lookup`` left (``b<N>/sink``: 1,000 to 100,000 batches): a sink opened
  (``SinkLog(path)`` and its latest batch: the check that it is a sink, one listing of the log),
  and ``files(b)`` cold, beside ``lookup.json``'s ``files(b) cold``.

The targets (issue 44): ``files(b)`` on a 1M-entry sink under 100 ms, a 1,000-batch sink opened
under 50 ms, with no JVM. This process imports no pyspark.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from batchlog import arrow


def best(call: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        times.append((time.perf_counter() - t) * 1000)
    return times


def jvm_figure(out: Path, kind: str, measure: str, entries: int) -> float | None:
    f = out / f"{kind}.json"
    if not f.is_file():
        return None
    for x in json.loads(f.read_text())["figures"]:
        if x["measure"] == measure and x["impl"] == "batchlog" and int(x["entries"]) == entries:
            return float(min(x["values"]))
    return None


def line(entries: int, what: str, times: list[float], jvm: float | None) -> None:
    beside = "" if jvm is None else f"   JVM {jvm:9.2f} ms   ratio {min(times) / jvm:6.3f}x"
    print(f"  {entries:>12,}  {what:<22} best {min(times):9.2f} ms{beside}")


def files_call(sink: str, b: int, expect: int) -> None:
    assert len(arrow.SinkLog(sink).files(b)) == expect


def batch_of_call(sink: str, path: str, b: int) -> None:
    assert arrow.SinkLog(sink).batch_of(path) == b


def opened(sink: str) -> None:
    arrow.SinkLog(sink).latest_batch()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--logs", type=Path, default=Path("bench/out/logs"))
    p.add_argument("--lookup", type=Path, default=Path("bench/out/lookup"))
    p.add_argument("--out", type=Path, default=Path("bench/out"), help="the JVM's figures")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    figures: list[dict[str, Any]] = []

    def record(entries: int, measure: str, values: list[float]) -> None:
        figures.append(
            {"entries": entries, "measure": measure, "impl": "arrow", "unit": "ms"}
            | {"values": values}
        )

    loaded = "pyspark" in sys.modules
    print(f"batchlog.arrow, no JVM (pyspark loaded: {loaded}); best of {args.repeat}")
    for d in sorted(args.logs.glob("n*/batchlog"), key=lambda d: int(d.parent.name[1:])):
        sink = str(d)
        latest = arrow.SinkLog(sink).latest_batch()
        assert latest is not None
        per_batch = len(arrow.SinkLog(sink).files(latest))
        entries = (latest + 1) * per_batch
        wanted = [0, latest // 2, latest]
        calls = {
            "files(batch)": [partial(files_call, sink, b, per_batch) for b in wanted],
            "batch_of(path)": [
                partial(batch_of_call, sink, arrow.SinkLog(sink).files(b)[-1], b) for b in wanted
            ],
        }
        for measure, per_b in calls.items():
            slowest = max((best(c, args.repeat) for c in per_b), key=min)
            line(entries, measure, slowest, jvm_figure(args.out, "files", measure, entries))
            record(entries, measure, slowest)
    for d in sorted(args.lookup.glob("b*/sink"), key=lambda d: int(d.parent.name[1:])):
        sink = str(d)
        n = int(d.parent.name[1:])
        times = best(partial(opened, sink), args.repeat)
        line(n, "open (batches)", times, None)
        record(n, "open", times)
        latest = arrow.SinkLog(sink).latest_batch()
        assert latest is not None
        per_batch = len(arrow.SinkLog(sink).files(latest))
        ends = (partial(files_call, sink, b, per_batch) for b in (0, latest))
        cold = max((best(c, args.repeat) for c in ends), key=min)
        jvm = jvm_figure(args.out, "lookup", "files(b) cold", n)
        line(n, "files(b) cold (batches)", cold, jvm)
        record(n, "lookup files(b) cold", cold)
    if args.json:
        doc = {"kind": "arrow", "figures": figures}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
