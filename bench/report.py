"""Judges the figures of ``bench/run`` against the project's performance targets.

Reads the JSON files the benchmarks wrote (``SinkLogBench``, ``FilesBench``, ``rewind_1000.py``,
``e2e_latency.py``, ``requests.py``, ``s3_compaction.py``, ``downstream.py``; each a list of
figures: every repeat of one measure of one implementation at one size), prints one table of
every target with its figure, the spread of the repeats and MET / NOT MET, writes it all as JSON
(``--json``) and plots time and heap against entries, vanilla vs batchlog (``--plot``, a PNG).

A figure is the best of its repeats; a ratio is of two bests measured in the same run. The spread,
(max - min) / min of the repeats, says how much a figure moved while it was taken.

Usage: python bench/report.py RESULTS_DIR [--json FILE] [--plot FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

Figures = dict[tuple[str, str, int], list[float]]  # (measure, impl, entries) -> repeats

# s3_compaction.py: a compaction on moto or SeaweedFS, vanilla vs batchlog (server-side) vs a
# client-side copy
S3C = "s3 compaction "
# store_compaction.py: a compaction on Azurite or fake-gcs-server, batchlog's vs the store's own
# copy a compaction must make (its name, its floor impl)
STORES_C = (
    ("Azure", "azure compaction ", "store-block-copy"),
    ("GCS", "gcs compaction ", "store-compose"),
)

# downstream.py: a stream over the sink, Spark's file source ("vanilla") vs the batchlog source
DOWNSTREAM = "downstream "
DOWNSTREAM_READERS = (("vanilla", "Spark's file source"), ("batchlog", "batchlog source"))
DOWNSTREAM_COLUMNS = (
    ("downstream steady micro-batches", "micro-batches", "{:,.0f}"),
    ("downstream planning per micro-batch (median)", "planning median ms", "{:,.1f}"),
    ("downstream planning per micro-batch (p90)", "planning p90 ms", "{:,.1f}"),
    ("downstream catch-up micro-batch (trigger)", "catch-up ms", "{:,.0f}"),
    ("downstream driver heap growth (live, after catch-up)", "heap after catch-up MiB", "{:,.1f}"),
    ("downstream driver heap growth (live, steady)", "heap growth MiB", "{:,.1f}"),
)


# LookupBench (bench/run lookup): measures by number of batches, prefixed when loaded
LOOKUP = "lookup "

#: measures whose sizes are judged on their own, not in the table of sizes
OWN_SIZES = (DOWNSTREAM, LOOKUP, S3C, *(p for _, p, _ in STORES_C))


@dataclass(frozen=True)
class Line:
    target: str
    figure: str
    spread: str
    goal: str
    met: bool | None  # None: no figure (that part of the bench did not run)

    @property
    def verdict(self) -> str:
        return "n/a" if self.met is None else "MET" if self.met else "NOT MET"


def load(results: Path) -> tuple[Figures, dict[str, int], dict[str, str]]:
    """The figures, each JVM's max heap and each S3 bench's store, by kind."""
    figures: Figures = {}
    heaps: dict[str, int] = {}
    stores: dict[str, str] = {}
    for f in sorted(results.glob("*.json")):
        if f.name == "report.json":
            continue
        doc = json.loads(f.read_text())
        if "maxHeapMiB" in doc:
            heaps[doc["kind"]] = doc["maxHeapMiB"]
        if "server" in doc:
            stores[doc["kind"]] = doc["server"]
        prefix = LOOKUP if doc.get("kind") == "lookup" else ""
        for x in doc["figures"]:
            key = (prefix + x["measure"], x["impl"], int(x["entries"]))
            figures[key] = [float(v) for v in x["values"]]
    return figures, heaps, stores


def spread(xs: list[float]) -> str:
    return f"{(max(xs) / min(xs) - 1) * 100:.0f}%" if len(xs) > 1 and min(xs) > 0 else "-"


def size(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def judge_lookups(fig: Figures, lines: list[Line], ratio: Any, below: Any) -> None:
    """Issue 24's lookups: at the most batches, files(b) and batch_of under 50 ms and within 1.5x
    of the figure at the fewest; a downstream trigger's planning within 1.5x; a rewind dry run
    under 2 s."""
    ns = sorted({n for (m, _, n) in fig if m.startswith(LOOKUP)})
    if not ns:
        return
    lo, hi = ns[0], ns[-1]

    def get(measure: str, n: int) -> list[float] | None:
        return fig.get((LOOKUP + measure, "batchlog", n))

    for m in ("files(b) cold", "files(b) warm", "batch_of(path) cold", "batch_of(path) warm"):
        below(f"{m}, {hi:,} batches, 256 MiB driver", get(m, hi), 50, "ms")
        ratio(f"{m}, {hi:,} vs {lo:,} batches", get(m, hi), get(m, lo), 1.5)
    for m in ("trigger planning, median", "trigger planning, worst of 10"):
        ratio(f"downstream {m}, {hi:,} vs {lo:,} batches", get(m, hi), get(m, lo), 1.5)
    rewind = get("rewind dry run", hi)
    below(f"rewind dry run, {hi:,}-batch sink log", rewind and [x / 1000 for x in rewind], 2, "s")


def judge_arrow(fig: Figures, lines: list[Line], ratio: Any, below: Any) -> None:
    """Issue 44's reader without Spark (bench/arrow_reader.py): files(b) on a 1M-entry sink under
    100 ms and a 1,000-batch sink opened under 50 ms, no JVM; beside the JVM's figures."""
    for m in ("files(batch)", "batch_of(path)"):
        ns = sorted(n for (measure, impl, n) in fig if measure == m and impl == "arrow")
        for n in ns:
            xs = fig.get((m, "arrow", n))
            if m == "files(batch)" and n == 1_000_000:
                below(f"{m} without a JVM, {size(n)} entries", xs, 100, "ms")
            jvm = fig.get((m, "batchlog", n))
            ratio(f"{m}, batchlog.arrow vs the JVM, {size(n)}", xs, jvm, 1.5)
    opened = fig.get(("open", "arrow", 1000))
    if opened or any(impl == "arrow" for (_, impl, _) in fig):
        below("a 1,000-batch sink opened without a JVM", opened, 50, "ms")


def judge(fig: Figures) -> list[Line]:
    lines: list[Line] = []

    def get(measure: str, impl: str, n: int = 0) -> list[float] | None:
        return fig.get((measure, impl, n))

    def ratio(
        target: str,
        num: list[float] | None,
        den: list[float] | None,
        goal: float,
        unit: str = "x",
    ) -> None:
        if not num or not den:
            lines.append(Line(target, "no figure", "-", f"<= {goal}{unit}", None))
            return
        r = min(num) / min(den)
        lines.append(
            Line(
                target,
                f"{r:.3f}{unit} ({min(num):,.1f} / {min(den):,.1f})",
                f"{spread(num)} / {spread(den)}",
                f"<= {goal}{unit}",
                r <= goal,
            )
        )

    def only_at(n: int, at: int) -> None:
        """The last line's goal is for ``at`` entries: at fewer (``n``) it is shown, not judged."""
        if n < at and lines[-1].met is not None:
            lines[-1] = replace(lines[-1], goal=f"{lines[-1].goal} at {size(at)}", met=None)

    def below(target: str, xs: list[float] | None, goal: float, unit: str) -> None:
        if not xs:
            lines.append(Line(target, "no figure", "-", f"< {goal} {unit}", None))
            return
        lines.append(
            Line(target, f"{min(xs):,.2f} {unit}", spread(xs), f"< {goal} {unit}", min(xs) < goal)
        )

    sizes = sorted({n for (m, _, n) in fig if n > 0 and not m.startswith(OWN_SIZES)})
    for n in sizes:
        s = size(n)
        if get("last compaction", "vanilla", n):
            ratio(
                f"last compaction vs vanilla, {s}",
                get("last compaction", "batchlog", n),
                get("last compaction", "vanilla", n),
                0.10 if n >= 1_000_000 else 1.0,
            )
        ratio(
            f"last compaction vs a plain copy, {s}",
            get("last compaction", "batchlog", n),
            get("copy of the compact file", "kernel", n),
            1.25 if n >= 1_000_000 else 1.5,
        )
        if get("all 200 adds", "vanilla", n):
            ratio(
                f"all adds of a run vs vanilla, {s}",
                get("all 200 adds", "batchlog", n),
                get("all 200 adds", "vanilla", n),
                0.5,
            )
    for n in sorted({n for (m, _, n) in fig if m == "files(batch)"}):
        below(
            f"files(batch), {size(n)}, 256 MiB driver",
            get("files(batch)", "batchlog", n),
            100,
            "ms",
        )
        below(
            f"batch_of(path), {size(n)}, 256 MiB driver",
            get("batch_of(path)", "batchlog", n),
            100,
            "ms",
        )
    tails = sorted(
        {int(m.group(1)) for (k, _, _) in fig if (m := re.match(r"rewind dry run \((\d+) ", k))},
        reverse=True,
    )
    for after in tails:
        tail = f"({after} batches after the target)"
        below(
            f"rewind dry run, 1,000-batch sink {tail}",
            get(f"rewind dry run {tail}", "batchlog"),
            2,
            "s",
        )
        below(
            f"rewind without data-file deletes {tail}",
            get(f"rewind without data-file deletes {tail}", "batchlog"),
            5,
            "s",
        )
    below(
        "cascade dry run, 3 hops of 1,000 batches",
        get("cascade dry run, 3 hops (1,000 batches each)", "batchlog"),
        5,
        "s",
    )
    judge_lookups(fig, lines, ratio, below)
    judge_arrow(fig, lines, ratio, below)
    replayed = get("replay after rewind: rows exactly once", "batchlog")
    if replayed is not None:
        lines.append(
            Line(
                "replay after rewind: every row once",
                str(bool(replayed[0])),
                "-",
                "True",
                replayed[0] == 1,
            )
        )

    def extra(target: str, measure: str, goal: float) -> None:
        ours, van = get(measure, "batchlog"), get(measure, "vanilla")
        if not ours or not van:
            lines.append(Line(target, "no figure", "-", f"<= vanilla + {goal:g}", None))
            return
        d = ours[0] - van[0]
        figure = f"{d:+.1f} ({ours[0]:.1f} / {van[0]:.1f})"
        lines.append(Line(target, figure, "-", f"<= vanilla + {goal:g}", d <= goal))

    extra("S3 requests per committed batch vs vanilla", "requests: a batch (total)", 1)
    extra("S3 requests per compaction batch vs vanilla", "requests: a compaction (total)", 3)
    lookups = sorted(
        k.removeprefix("requests: ")
        for (k, impl, _) in fig
        if k.startswith("requests: ") and (k.startswith("requests: files(") or "batch_of" in k)
    )
    for op in lookups:
        count, lists = get(f"requests: {op}", "batchlog"), get(f"LISTs: {op}", "batchlog")
        if count and lists is not None:
            ok = count[0] <= 4 and lists[0] == 0
            shown = f"{count[0]:.0f} requests, {lists[0]:.0f} LIST"
            lines.append(Line(f"S3 requests of {op}", shown, "-", "<= 4, no LIST", ok))
    for n in sorted({n for (k, _, n) in fig if k.startswith(S3C)}):
        s = size(n)
        read, written = (
            get(f"{S3C}driver read MiB", "batchlog", n),
            get(f"{S3C}driver written MiB", "batchlog", n),
        )
        new_lines = get(f"{S3C}new lines + index MiB", "batchlog", n)
        if read and written and new_lines:
            moved = [r + w for r, w in zip(read, written)]
            goal = min(new_lines) + 16
            lines.append(
                Line(
                    f"S3 compaction: bytes through the driver, {s}",
                    f"{min(moved):,.2f} MiB (new lines + index {min(new_lines):,.2f} MiB)",
                    spread(moved),
                    f"<= {goal:,.2f} MiB",
                    min(moved) <= goal,
                )
            )
        wall = get(f"{S3C}wall ms", "batchlog", n)
        ratio(
            f"S3 compaction wall time vs vanilla, {s}",
            wall,
            get(f"{S3C}wall ms", "vanilla", n),
            0.05,
        )
        only_at(n, 1_000_000)
        ratio(
            f"S3 compaction wall time vs a client-side copy, {s}",
            wall,
            get(f"{S3C}wall ms", "copy", n),
            0.25,
        )
        only_at(n, 10_000_000)
    if any(k.startswith(S3C) for (k, _, _) in fig) and not any(
        k.startswith(S3C) and n >= 10_000_000 for (k, _, n) in fig
    ):
        lines.append(
            Line(
                "S3 compaction wall time vs a client-side copy, 10M",
                "not measured (moto keeps objects in memory: --server seaweedfs)",
                "-",
                "<= 0.25x",
                None,
            )
        )
    for store, pre, floor in STORES_C:
        for n in sorted({n for (k, _, n) in fig if k.startswith(pre)}):
            written = get(f"{pre}driver written MiB", "batchlog", n)
            new_lines = get(f"{pre}new lines + index MiB", "batchlog", n)
            if written and new_lines:
                goal = min(new_lines) + 16
                lines.append(
                    Line(
                        f"{store} compaction: bytes the driver wrote, {size(n)}",
                        f"{min(written):,.2f} MiB (new lines + index {min(new_lines):,.2f} MiB)",
                        spread(written),
                        f"<= {goal:,.2f} MiB",
                        min(written) <= goal,
                    )
                )
            ratio(
                f"{store} compaction wall time vs the store's {floor}, {size(n)}",
                get(f"{pre}wall ms", "batchlog", n),
                get(f"{pre}wall ms", floor, n),
                1.25,
            )
            only_at(n, 1_000_000)
    latency = "commit latency (addBatch, median of a round)"
    if get(latency, "batchlog"):
        ratio(
            "end-to-end commit latency vs vanilla",
            get(latency, "batchlog"),
            get(latency, "vanilla"),
            1.05,
        )
    for n in sorted({n for (k, _, n) in fig if k.startswith(DOWNSTREAM)}):
        for target, measure, goal in (
            ("planning per micro-batch (median)", DOWNSTREAM_COLUMNS[1][0], 0.10),
            ("driver heap growth", DOWNSTREAM_COLUMNS[5][0], 0.25),
        ):
            ratio(
                f"downstream {target}, batchlog vs file source, {size(n)}",
                get(measure, "batchlog", n),
                get(measure, "vanilla", n),
                goal,
            )
            only_at(n, 1_000_000)
    return lines


def table(
    fig: Figures, lines: list[Line], heaps: dict[str, int], stores: dict[str, str] | None = None
) -> str:
    out = []
    if heaps:
        out.append("JVM max heap: " + ", ".join(f"{k} {v} MiB" for k, v in sorted(heaps.items())))
    if stores:
        out.append("S3 store: " + ", ".join(f"{k} on {v}" for k, v in sorted(stores.items())))
    out.append("\nfigures (best of the repeats; spread = (max - min) / min):")
    out.append(f"{'measure':<58} {'impl':<9} {'entries':>8} {'best':>12} {'spread':>7}")
    for (measure, impl, n), xs in sorted(
        fig.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])
    ):
        out.append(
            f"{measure:<58} {impl:<9} {size(n) if n else '-':>8} {min(xs):>12,.2f} {spread(xs):>7}"
        )
    for n in sorted({n for (k, _, n) in fig if k.startswith(DOWNSTREAM)}):
        out.append(
            f"\ndownstream stream over a sink of {size(n)} entries (steady-state micro-batches; "
            "planning = latestOffset + getBatch + queryPlanning):"
        )
        out.append(f"{'reader':<20}" + "".join(f" {h:>23}" for _, h, _ in DOWNSTREAM_COLUMNS))
        for impl, name in DOWNSTREAM_READERS:
            cells = [fig.get((m, impl, n)) for m, _, _ in DOWNSTREAM_COLUMNS]
            if any(cells):
                out.append(
                    f"{name:<20}"
                    + "".join(
                        f" {fmt.format(min(xs)) if xs else '-':>23}"
                        for xs, (_, _, fmt) in zip(cells, DOWNSTREAM_COLUMNS)
                    )
                )
    w = max(len(x.target) for x in lines) if lines else 10
    out.append("\ntargets:")
    out.append(f"{'target':<{w}} {'figure':<34} {'spread':<11} {'goal':<10} verdict")
    for x in lines:
        out.append(f"{x.target:<{w}} {x.figure:<34} {x.spread:<11} {x.goal:<10} {x.verdict}")
    missed = [x for x in lines if x.met is False]
    out.append(
        f"\n{sum(x.met is True for x in lines)} MET, {len(missed)} NOT MET, "
        f"{sum(x.met is None for x in lines)} n/a (no figure, or not at the size of its goal)"
    )
    return "\n".join(out)


def plot(fig: Figures, file: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_, (t, h) = plt.subplots(1, 2, figsize=(11, 4.2))

    def curve(ax: object, measure: str, impl: str, label: str, style: str) -> None:
        pts = sorted((n, min(xs)) for (m, i, n), xs in fig.items() if m == measure and i == impl)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)  # type: ignore[attr-defined]

    curve(t, "last compaction", "vanilla", "compaction, vanilla", "o-")
    curve(t, "last compaction", "batchlog", "compaction, batchlog", "s-")
    curve(t, "copy of the compact file", "kernel", "plain copy of the compact file", "k--")
    curve(t, "files(batch)", "batchlog", "files(batch), batchlog (256 MiB)", "^-")
    t.set(
        xscale="log",
        yscale="log",
        xlabel="live entries",
        ylabel="ms (best of the repeats)",
        title="time",
    )
    curve(h, "last compaction (peak live heap)", "vanilla", "compaction, vanilla", "o-")
    curve(h, "last compaction (peak live heap)", "batchlog", "compaction, batchlog", "s-")
    curve(h, "list all live files (peak live heap)", "vanilla", "list all files, vanilla", "o:")
    curve(h, "list all live files (peak live heap)", "batchlog", "list all files, batchlog", "s:")
    h.set(
        xscale="log", yscale="symlog", xlabel="live entries", ylabel="MiB", title="peak live heap"
    )
    h.set_ylim(bottom=0)
    for ax in (t, h):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig_.tight_layout()
    fig_.savefig(file, dpi=110)
    print(f"plot written to {file}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    fig, heaps, stores = load(args.results)
    lines = judge(fig)
    print(table(fig, lines, heaps, stores))
    if args.json:
        doc = {
            "targets": [dict(asdict(x), verdict=x.verdict) for x in lines],
            "figures": [
                {"measure": m, "impl": i, "entries": n, "values": xs, "best": min(xs)}
                for (m, i, n), xs in sorted(fig.items())
            ],
            "maxHeapMiB": heaps,
            "stores": stores,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"report written to {args.json}")
    if args.plot:
        plot(fig, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
