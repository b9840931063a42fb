package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import io.batchlog.checkpoint.{QueryCheckpoint, StateFiles, StateMaintenance}
import io.batchlog.log.Clock

/**
 * Which state store files a rewind deletes ([[StateFiles]]): by name (pure), then over a real
 * `state/` tree with the providers' layouts. And how long a rewind waits for the state store
 * maintenance a stopped query still owes ([[StateMaintenance]]), by the store's clock.
 */
class StateFilesSuite extends SparkSessionTestBase {

  private val U = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

  /** (path below `state/`, rewind target, deleted). */
  private val names: Seq[(String, Long, Boolean)] = Seq(
    // HDFS-backed provider: versions above the target go, the target's own stays
    ("0/0/6.delta", 5L, true),
    ("0/0/5.delta", 5L, false),
    ("0/0/4.delta", 5L, false),
    ("0/3/6.snapshot", 5L, true),
    ("0/3/5.snapshot", 5L, false),
    ("0/0/12.delta", 5L, true), // numbers, not strings: 12 > 5
    ("0/0/100.snapshot", 99L, true),
    // RocksDB, checkpoint format v1
    ("1/0/6.zip", 5L, true),
    ("1/0/5.zip", 5L, false),
    ("1/0/6.changelog", 5L, true),
    ("1/0/5.changelog", 5L, false),
    // RocksDB, checkpoint format v2: a unique id per version, and a checksum file
    (s"1/0/6_$U.zip", 5L, true),
    (s"1/0/5_$U.zip", 5L, false),
    (s"1/0/6_$U.changelog", 5L, true),
    (s"1/0/5_$U.changelog", 5L, false),
    (s"1/0/6_$U.zip.crc", 5L, true),
    (s"1/0/6_$U.changelog.crc", 5L, true),
    (s"1/0/5_$U.zip.crc", 5L, false),
    (s"1/0/6_${U.toUpperCase}.zip", 5L, true),
    // version 0: kept by any target; deleted above target 0 (a rewind to 0 drops all of state/)
    ("0/0/0.delta", 0L, false),
    ("0/0/1.delta", 0L, true),
    ("1/0/0.zip", 1L, false),
    // RocksDB's shared files and whatever is not a version: kept
    ("1/0/SSTs/000123-4b5a.sst", 0L, false),
    ("1/0/SSTs/7.zip", 5L, false),
    ("0/0/6", 5L, false),
    ("0/0/6.delta.tmp", 5L, false),
    ("0/0/.6.delta.crc", 5L, false), // Hadoop's checksum sidecar goes with its file
    ("0/0/temp-6.delta", 5L, false),
    ("0/0/6.DELTA", 5L, false),
    ("0/0/6_not-hex!.zip", 5L, false),
    ("0/0/6.zip/x", 5L, false), // a directory named like a version
    ("6.delta", 5L, false), // directly under state/
    ("0/6.delta", 5L, false), // directly under an operator
    // operator metadata: v1 written once and kept; v2 and schema files of batches >= target go
    ("0/_metadata/metadata", 5L, false),
    ("0/_metadata/v2/5", 5L, true),
    ("0/_metadata/v2/6", 5L, true),
    ("0/_metadata/v2/4", 5L, false),
    ("0/_metadata/6.delta", 5L, false),
    (s"0/_stateSchema/default/5_$U", 5L, true),
    (s"0/_stateSchema/default/4_$U", 5L, false),
    ("0/_stateSchema/default/5", 5L, true),
    ("0/_stateSchema/6.delta", 5L, false)
  )

  names.foreach { case (rel, toBatch, deleted) =>
    test(s"state/$rel ${if (deleted) "is" else "is not"} deleted by a rewind to $toBatch") {
      assert(StateFiles.mustDelete(rel.split('/').toSeq, toBatch) === deleted)
    }
  }

  /** A checkpoint with `metadata`, `offsets/` and the given files under `state/`. */
  private def checkpoint(root: File, stateFiles: Seq[String]): QueryCheckpoint = {
    Files.write(new File(root, "metadata").toPath, s"""{"id":"$U"}""".getBytes(UTF_8))
    new File(root, "offsets").mkdirs()
    stateFiles.foreach { rel =>
      val f = new File(root, s"state/$rel")
      f.getParentFile.mkdirs()
      Files.write(f.toPath, rel.getBytes(UTF_8))
    }
    new QueryCheckpoint(spark, root.toString)
  }

  test("toDelete walks state/ and selects exactly the files the names say") {
    withTempDir { root =>
      val cp = checkpoint(root, names.filter(_._2 == 5L).map(_._1))
      val selected = StateFiles.toDelete(cp, 5L, Some(StateFiles.KnownProviders.head))
        .map(_.getPath.toUri.getPath.stripPrefix(s"${root.getPath}/state/")).toSet
      // `.6.delta.crc` is hidden by Hadoop's local file system, which deletes it with 6.delta
      assert(selected === names.filter(n => n._2 == 5L && n._3).map(_._1).toSet)
    }
  }

  test("toDelete: no state/ is nothing to delete; an unknown provider is refused") {
    withTempDir { root =>
      val cp = checkpoint(root, Nil)
      assert(StateFiles.toDelete(cp, 1L, Some("com.example.Custom")) === Nil)
      checkpoint(root, Seq("0/0/2.delta"))
      assert(StateFiles.toDelete(cp, 1L, None).map(_.getPath.getName) === Seq("2.delta"))
      StateFiles.KnownProviders.foreach { p =>
        assert(StateFiles.toDelete(cp, 1L, Some(p)).map(_.getPath.getName) === Seq("2.delta"))
      }
      val e = intercept[BatchLogException](StateFiles.toDelete(cp, 1L, Some("com.example.Custom")))
      assert(e.code === BatchLogException.UnsupportedCheckpoint)
      assert(
        e.getMessage.startsWith(s"Cannot roll back ${cp.stateDir}: its state store " +
          "provider com.example.Custom is unknown to batchlog."),
        e.getMessage
      )
    }
  }

  // ---- StateMaintenance: the store's clock is the local file system's modification times, moved
  // back by the manual clock's sleeps (time passing for the store) --------------------------------

  private val IntervalMs = 3000L

  /** Waits as a rewind would, with the files' times moved back by each sleep; the waits asked. */
  private def awaitSettled(cp: QueryCheckpoint, onSleep: Long => Unit = _ => ()): Seq[Long] = {
    val waits = Seq.newBuilder[Long]
    val clock = new ManualClock()
    clock.wallOffsetMs = -10 * 60 * 1000L // the host's wall clock, minutes off: never read
    clock.onSleep = { ms =>
      age(cp, ms); onSleep(ms)
    }
    spark.conf.set(StateMaintenance.IntervalKey, s"${IntervalMs}ms")
    try Clock.using(clock)(StateMaintenance.awaitSettled(spark, cp)(waits += _))
    finally spark.conf.unset(StateMaintenance.IntervalKey)
    waits.result()
  }

  private def age(cp: QueryCheckpoint, ms: Long): Unit =
    io.batchlog.log.FileTree.foreachFile(cp.fs, cp.stateDir) { f =>
      cp.fs.setTimes(f.getPath, f.getModificationTime - ms, -1)
    }

  test("a rewind waits for the maintenance interval plus a margin after the newest state file") {
    withTempDir { root =>
      val cp = checkpoint(root, Seq("0/0/1.zip", "0/0/2.changelog"))
      val waits = awaitSettled(cp)
      assert(waits.length === 1)
      // written just now: the whole interval and margin, less the time the test took
      val full = IntervalMs + StateMaintenance.MarginMs
      assert(waits.head <= full && waits.head > full - 2000, waits)
      assert(!new File(root, StateMaintenance.ProbeName).exists(), "the probe file is deleted")
    }
  }

  test("state files older than the interval and margin: no wait; no state/: no wait") {
    withTempDir { root =>
      assert(awaitSettled(checkpoint(root, Nil)) === Nil)
      val cp = checkpoint(root, Seq("0/0/1.zip"))
      age(cp, IntervalMs + StateMaintenance.MarginMs + 1000)
      assert(awaitSettled(cp) === Nil)
    }
  }

  test("a snapshot the maintenance writes during the wait starts the wait again") {
    withTempDir { root =>
      val cp = checkpoint(root, Seq("0/0/10.changelog"))
      var uploaded = false
      val waits = awaitSettled(
        cp,
        _ =>
          if (!uploaded) { // the old run's snapshot of version 10 lands, written now
            uploaded = true
            checkpoint(root, Seq("0/0/10.zip"))
          }
      )
      assert(waits.length === 2, waits)
      assert(waits(1) > IntervalMs, waits)
    }
  }
}
