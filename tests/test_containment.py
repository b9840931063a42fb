"""Containment: maintenance acts only inside the sink's output directory and its query's
checkpoint, never through a symbolic link, and never on a file not named as a data file.

Real streaming queries write real sinks; the log is then edited (or the output given links, a
checkpoint, a user's file) as the issue describes, and verify, rewind, vacuum and repair run on
it. Every file outside the output and the checkpoint is checksummed before and after: nothing
there may change. Rows are read back by plain Spark.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from reliability_support import (
    SINK_CONFS,
    TAGGED,
    batchlog,
    check_log,
    local_path,
    read_ids,
    run_cli,
    run_stream,
    snapshot,
    spark_session,
    write_input,
)
from support import cli_here, halt_after_rewind_step_confs

spark = spark_session  # the module's session fixture
ROWS = 4  # rows per input file (one file per batch)


def outside_sums(root: Path, *ours: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` that is not below one of ``ours`` (links not
    followed: a link's target, if it is below ``root``, is summed where it really lies)."""
    sums = {}
    for d, _dirs, files in os.walk(root):
        if any(Path(d) == o or o in Path(d).parents for o in ours):
            continue
        for f in files:
            p = Path(d) / f
            if not p.is_symlink():
                sums[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return sums


def ids_of(files: range) -> list[int]:
    return sorted(k * 1000 + i for k in files for i in range(ROWS))


def _sink(spark: SparkSession, tmp: Path, chk: Path | None = None) -> tuple[Path, Path, Path]:
    """Batches 0..3 (log 2.compact, 3), partitioned by ``part`` (p0, p1, p2)."""
    inp, out = tmp / "in", tmp / "out"
    chk = chk or tmp / "chk"
    write_input(inp, 0, 4, ROWS)
    run_stream(spark, inp, out, chk)
    assert check_log(out, 3)["latest"] == 3
    return inp, out, chk


def _renamed(src: Path, dst_dir: Path, batch: int, age_s: float = 0) -> Path:
    """A copy of data file ``src`` in ``dst_dir``, named as a file of ``batch``."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / TAGGED.sub(f"part-00000-batch-{batch}-{uuid.uuid4()}", src.name, count=1)
    shutil.copyfile(src, dst)
    t = time.time() - age_s
    os.utime(dst, (t, t))
    return dst


def _relog_first_entry(out: Path, path: str, size: int) -> dict:
    """Makes the first entry of log file ``3`` name ``path``; returns the entry it replaced."""
    log = out / "_spark_metadata" / "3"
    lines = log.read_text().split("\n")
    entry = json.loads(lines[1])
    lines[1] = json.dumps({**entry, "path": path, "size": size}, separators=(",", ":"))
    log.write_text("\n".join(lines))
    log.with_name(".3.crc").unlink(missing_ok=True)
    return entry


def _foreign_entry(kind: str, tmp: Path, out: Path) -> tuple[str, str]:
    """Logs one of batch 3's entries as a foreign file of ``kind``; returns (path, reason)."""
    src = local_path(json.loads((out / "_spark_metadata" / "3").read_text().split("\n")[1])["path"])
    outside = tmp / "outside"
    if kind == "absolute":
        f = _renamed(src, outside, 3)
        logged, why = f.as_uri(), "outside the output directory"
    elif kind == "dotdot":
        f = _renamed(src, outside, 3)
        logged, why = f"file://{out}/../outside/{f.name}", "outside the output directory"
    elif kind == "scheme":
        f = _renamed(src, outside, 3)
        logged, why = f"hdfs://127.0.0.1:1{out}/part=p0/{f.name}", "on another file system"
    elif kind == "dir_link":
        f = _renamed(src, outside / "linked", 3)
        (out / "part=p9").symlink_to(outside / "linked", target_is_directory=True)
        logged, why = (
            f"file://{out}/part=p9/{f.name}",
            f"through the symbolic link file:{out}/part=p9",
        )
    elif kind == "file_link":
        f = _renamed(src, outside, 3)
        link = out / "part=p0" / f.name
        link.symlink_to(f)
        logged, why = link.as_uri(), "a symbolic link"
    else:
        f = _renamed(src, out / "_batchlog", 3)
        logged, why = f.as_uri(), "a directory Spark never reads data from"
    _relog_first_entry(out, logged, f.stat().st_size)
    return logged, why


@pytest.mark.parametrize(
    "kind", ["absolute", "dotdot", "scheme", "dir_link", "file_link", "hidden_dir"]
)
def test_foreign_entry_through_verify_rewind_vacuum_repair(
    spark: SparkSession, tmp_path: Path, kind: str
):
    inp, out, chk = _sink(spark, tmp_path)
    logged, why = _foreign_entry(kind, tmp_path, out)
    before = outside_sums(tmp_path, out, chk)

    v = batchlog.verify(spark, str(out))
    assert (v.healthy, v.foreign_count, v.missing_count, v.size_mismatch_count) == (
        False,
        1,
        0,
        0,
    )
    assert v.foreign[0].path == logged and v.foreign[0].batch_id == 3
    assert why in v.foreign[0].reason, v.foreign[0].reason
    cli = cli_here(spark, "verify", str(out))
    assert cli.returncode == 1 and "logged outside the output" in cli.stdout, cli.stdout

    snap = snapshot(out), snapshot(chk)
    with pytest.raises(batchlog.ForeignPathError) as e:
        batchlog.rewind(spark, str(out), str(chk), 2)
    msg = str(e.value)
    assert f"The log of the sink file:{out} names 1 file(s) that are not inside its output" in msg
    assert why in msg and f"`python -m batchlog repair file:{out}`" in msg, msg
    assert msg.endswith("Nothing was changed."), msg
    with pytest.raises(batchlog.ForeignPathError, match="Vacuum acts only inside"):
        batchlog.vacuum(spark, str(out), older_than="0s", dry_run=False)
    assert (snapshot(out), snapshot(chk)) == snap
    assert outside_sums(tmp_path, out, chk) == before

    # repair rebuilds the log from the data files inside the output: the foreign entry is gone,
    # the file it displaced is logged again, every row is read once
    r = batchlog.repair(spark, str(out))
    assert r.written is True and r.log_healthy is False
    assert any("not inside the output directory" in p for p in r.log_problems), r.log_problems
    assert batchlog.verify(spark, str(out)).healthy is True
    assert read_ids(spark, out) == ids_of(range(4))
    assert outside_sums(tmp_path, out, chk) == before

    # now a rewind runs, deleting inside only
    rw = batchlog.rewind(spark, str(out), str(chk), 2)
    assert rw.result is not None and rw.result.to_batch == 2
    assert read_ids(spark, out) == ids_of(range(2))
    assert outside_sums(tmp_path, out, chk) == before
    run_stream(spark, inp, out, chk)
    assert read_ids(spark, out) == ids_of(range(4))
    assert outside_sums(tmp_path, out, chk) == before


def test_links_in_the_output_are_never_followed_nor_deleted(spark: SparkSession, tmp_path: Path):
    inp, out, chk = _sink(spark, tmp_path)
    outside = tmp_path / "outside"
    src = local_path(check_log(out, 3)["live"][0]["path"])
    # a directory link whose target holds files named as old orphans of batches 1 and 3
    behind = [_renamed(src, outside / "dir", b, age_s=7200) for b in (1, 3)]
    dir_link = out / "part=p1" / "more"
    dir_link.symlink_to(outside / "dir", target_is_directory=True)
    # a file link named as an old orphan of batch 2
    target = _renamed(src, outside, 2, age_s=7200)
    file_link = out / "part=p0" / target.name
    file_link.symlink_to(target)
    before = outside_sums(tmp_path, out, chk)
    links = sorted([f"file:{dir_link}", f"file:{file_link}"])

    v = batchlog.verify(spark, str(out))
    assert (v.healthy, v.orphan_count, v.foreign_count) == (True, 0, 0)
    assert sorted(v.links) == links

    r = batchlog.vacuum(spark, str(out), older_than="1h", dry_run=False)
    assert (r.orphan_files, r.deleted_files) == (0, 0)
    assert sorted(r.skipped_links) == links
    assert outside_sums(tmp_path, out, chk) == before

    rp = batchlog.repair(spark, str(out), force=True)
    assert rp.written is True and rp.untagged_count == 0
    assert rp.data_files == len(check_log(out, 3)["live"])
    assert read_ids(spark, out) == ids_of(range(4))

    rw = batchlog.rewind(spark, str(out), str(chk), 1)
    assert rw.result is not None and rw.result.to_batch == 1
    assert dir_link.is_symlink() and file_link.is_symlink()  # the links stay, and their targets
    assert outside_sums(tmp_path, out, chk) == before
    assert all(b.exists() for b in behind)
    assert read_ids(spark, out) == ids_of(range(1))
    run_stream(spark, inp, out, chk)
    assert read_ids(spark, out) == ids_of(range(4))
    assert outside_sums(tmp_path, out, chk) == before


def test_checkpoint_and_user_file_inside_the_output(spark: SparkSession, tmp_path: Path):
    out = tmp_path / "out"
    chk = out / "checkpoint"  # a layout users pick
    inp, out, chk = _sink(spark, tmp_path, chk)
    readme = out / "README.txt"
    readme.write_text("my notes\n")
    old = time.time() - 7200
    os.utime(readme, (old, old))
    before = outside_sums(tmp_path, out)

    v = batchlog.verify(spark, str(out))
    assert (v.healthy, v.orphan_count, v.foreign_count) == (True, 0, 0)
    assert v.checkpoints_in_output == [f"file:{chk}"]
    visible = [
        p
        for p in chk.rglob("*")
        if p.is_file() and not any(s.startswith((".", "_")) for s in p.relative_to(out).parts)
    ]
    assert v.other_file_count == len(visible) + 1  # the checkpoint's files and README.txt

    snap = snapshot(out)
    with pytest.raises(batchlog.CheckpointInOutputError) as e:
        batchlog.vacuum(spark, str(out), older_than="0s", dry_run=False)
    assert str(e.value) == (
        f"The output directory file:{out} holds a streaming query checkpoint: file:{chk} (a "
        "'metadata' file and an 'offsets' directory). Vacuum deletes files in the output that the "
        "log does not list, and a checkpoint is not the sink's to clean, so it stops. Move the "
        "checkpoint out of the output directory (stop its query, move the directory, restart the "
        "query with the new checkpointLocation), then run it again. Nothing was changed."
    )
    assert snapshot(out) == snap

    rp = batchlog.repair(spark, str(out), force=True)
    assert rp.written is True and rp.untagged_count == 0
    assert rp.data_files == len(check_log(out, 3)["live"])
    assert readme.read_text() == "my notes\n"

    # rewind cuts the checkpoint inside the output and deletes only data files
    batchlog.rewind(spark, str(out), str(chk), 2)
    assert read_ids(spark, out) == ids_of(range(2))
    assert readme.read_text() == "my notes\n"
    run_stream(spark, inp, out, chk)
    assert read_ids(spark, out) == ids_of(range(4))
    assert outside_sums(tmp_path, out) == before


def test_vacuum_deletes_only_data_files(spark: SparkSession, tmp_path: Path):
    inp, out, chk = _sink(spark, tmp_path)
    src = local_path(check_log(out, 3)["live"][0]["path"])
    orphan = _renamed(src, src.parent, 1, age_s=7200)
    old = time.time() - 7200
    keep = [out / "README.txt", out / "part=p0" / "notes.json", out / "part=p1" / "part-x.bak"]
    for f in keep:
        f.write_text("mine\n")
        os.utime(f, (old, old))
    v = batchlog.verify(spark, str(out))
    assert [o.path for o in v.orphans] == [f"file:{orphan}"]
    assert v.other_file_count == 3 and v.checkpoints_in_output == []

    r = batchlog.vacuum(spark, str(out), older_than="1h", dry_run=False)
    assert (r.deleted_files, r.other_file_count) == (1, 3)
    assert not orphan.exists()
    assert all(f.read_text() == "mine\n" for f in keep)
    assert read_ids(spark, out) == ids_of(range(4))


def test_takeover_refuses_an_unfinished_rewind(spark: SparkSession, tmp_path: Path, testkit_jar):
    inp, out, chk = _sink(spark, tmp_path)
    # another query's checkpoint, to take the sink over with
    write_input(tmp_path / "in_b", 0, 1, ROWS)
    run_stream(spark, tmp_path / "in_b", tmp_path / "out_b", tmp_path / "chk_b")
    chk_b = tmp_path / "chk_b"

    confs = [f"--conf={k}={v}" for k, v in SINK_CONFS.items()]
    args = ["rewind", str(out), "--checkpoint", str(chk), "--to-batch", "2"]
    crashed = run_cli(*halt_after_rewind_step_confs("data-files"), *confs, *args)
    assert crashed.returncode != 0
    assert "rewind step 'data-files' done" in crashed.stderr
    record = (out / "_batchlog" / "_batchlog-sink.json").read_text()

    with pytest.raises(batchlog.RewindInProgressError) as e:
        batchlog.takeover(spark, str(out), str(chk_b))
    assert str(e.value) == (
        f"The sink file:{out} is being rewound to batch 2 (checkpoint file:{chk}) and the rewind "
        "did not finish. Nothing is written to it until it does: re-run `python -m batchlog "
        f"rewind file:{out} --checkpoint file:{chk} --to-batch 2` to finish it, then run the "
        "takeover again. Nothing was changed."
    )
    assert (out / "_batchlog" / "_batchlog-sink.json").read_text() == record

    resumed = run_cli(*confs, *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    t = batchlog.takeover(spark, str(out), str(chk_b))
    assert t.done is True and t.from_batch == 2
    assert read_ids(spark, out) == ids_of(range(2))
