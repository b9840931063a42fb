package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, StandardCopyOption}

import org.apache.hadoop.fs.{FileStatus, Path}

import io.batchlog.log.{CompactIndex, IndexBlocks, IndexCheck, IndexRun, LogFiles}

/**
 * The `v3` index (a head and blocks of runs, [[IndexBlocks]]): its proofs, read by parts; lookups
 * exact at many batches reading only the block that holds the batch; `v2` indexes still read.
 */
class CompactIndexV3Suite extends CompactIndexTestBase {

  private val Name = "8.compact"
  private def status(length: Long, mtime: Long = 7L) =
    new FileStatus(length, false, 1, 1L, mtime, new Path(s"/out/_spark_metadata/$Name"))

  /** `n` one-line runs of batches 0..n-1, 10 bytes each, after the compact file's header. */
  private def index(n: Int): CompactIndex = CompactIndex(
    Name,
    CompactIndex.FirstOffset + 10L * n,
    7L,
    Vector.tabulate(n)(i =>
      IndexRun(Some(i.toLong), CompactIndex.FirstOffset + 10L * i, 10L, 1L, i)
    ),
    3L,
    -1L
  )

  /** The bytes in a file of the local file system, read back by ranged reads. */
  private def withFile[A](bytes: Array[Byte])(f: org.apache.hadoop.fs.FSDataInputStream => A): A =
    withTempDir { dir =>
      val file = new File(dir, "x.index")
      Files.write(file.toPath, bytes)
      val p = new Path(file.toURI)
      val in = p.getFileSystem(spark.sessionState.newHadoopConf()).open(p)
      try f(in)
      finally in.close()
    }

  private def head(bytes: Array[Byte], st: FileStatus): IndexBlocks.Head = withFile(bytes) { in =>
    IndexBlocks.readHead(in, st.getPath.getName, st).fold(w => fail(w), _.getOrElse(fail("not v3")))
  }

  test("v3 round-trip: blocks of 512 runs in offset order, untagged runs, an empty index") {
    val big = index(1300)
    val bytes = big.toBytes
    assert(new String(bytes, 0, 29, UTF_8).matches("batchlog-index v3 \\d{10}\n"))
    assert(CompactIndex.prove(bytes, Name, status(big.compactLength)) === Right(big))
    val h = head(bytes, status(big.compactLength))
    assert(h.blocks.map(b => (b.runs, b.minBatch, b.maxBatch)) ===
      Vector((512, 0L, 511L), (512, 512L, 1023L), (276, 1024L, 1299L)))
    assert(h.droppedEntries === 3L && h.end === bytes.length)
    val mixed = CompactIndex(
      Name,
      100L,
      -5L,
      Vector(
        IndexRun(Some(Long.MaxValue), 40L, 60L, 3L, 0xffffffffL),
        IndexRun(None, 2L, 30L, 1L, 0L),
        IndexRun(Some(7L), 32L, 8L, 1L, 1L)
      ),
      12L,
      Long.MaxValue
    )
    assert(CompactIndex.prove(mixed.toBytes, Name, status(100L, -5L)) ===
      Right(mixed.copy(runs = mixed.runs.sortBy(_.offset))))
    val empty = CompactIndex(Name, 2L, 0L, Vector.empty, 0L, -1L)
    assert(CompactIndex.prove(empty.toBytes, Name, status(2L, 0L)) === Right(empty))
  }

  test("v3 proofs: a damaged block is refused on its own, the others still prove") {
    val good = index(1300)
    val bytes = good.toBytes
    val st = status(good.compactLength)
    val h = head(bytes, st)
    val second = h.blocks(1)
    val damaged = bytes.updated(second.at.toInt + 5, '9'.toByte)
    assert(CompactIndex.prove(damaged, Name, st) ===
      Left(s"its block at byte ${second.at} does not match its checksum"))
    withFile(damaged) { in =>
      assert(IndexBlocks.readHead(in, Name, st).map(_.map(_.blocks)) === Right(Some(h.blocks)))
      assert(IndexBlocks.readBlock(in, second) ===
        Left(s"its block at byte ${second.at} does not match its checksum"))
      assert(IndexBlocks.readBlock(in, h.blocks(2)) === Right(good.runs.drop(1024)))
    }
    // the head: a flipped byte, truncation, another identity
    val inHead = bytes.updated(new String(bytes, UTF_8).indexOf("block ") + 6, '7'.toByte)
    assert(CompactIndex.prove(inHead, Name, st) === Left("its checksum does not match"))
    assert(CompactIndex.prove(bytes.take(40), Name, st) === Left("it is truncated"))
    assert(CompactIndex.prove(bytes.dropRight(1), Name, st) === Left("it is truncated"))
    assert(CompactIndex.prove(bytes :+ '\n'.toByte, Name, st) ===
      Left(s"it is ${bytes.length + 1} bytes, its head says ${bytes.length}"))
    assert(CompactIndex.prove(bytes, Name, status(good.compactLength + 1)) === Left(
      s"the compact file is ${good.compactLength + 1} bytes, the index says ${good.compactLength}"
    ))
    assert(CompactIndex.prove(bytes, Name, status(good.compactLength, 8L)) ===
      Left("the compact file's modification time is 8, the index says 7"))
  }

  test("v3 proofs: runs that do not tile, or a batch outside its block's range, re-sealed") {
    val good = index(1300)
    val st = status(good.compactLength)
    val moved = good.runs.updated(600, good.runs(600).copy(offset = good.runs(600).offset + 1))
    assert(CompactIndex.prove(good.copy(runs = moved).toBytes, Name, st) === Left(
      s"its runs leave bytes ${good.runs(600).offset}..${good.runs(600).offset + 1} uncovered"
    ))
    // a block's line for batch 600 changed to batch 5, the block's CRC and the head re-sealed
    val bytes = good.toBytes
    val h = head(bytes, st)
    val text = new String(bytes, UTF_8)
    val b = h.blocks(1)
    val block = text.substring(b.at.toInt, (b.at + b.length).toInt)
    val changed = block.replaceFirst("(?m)^600 ", "005 ").getBytes(UTF_8)
    val crc = f"${CompactIndex.crcOf(changed, changed.length)}%x"
    val headText = text.substring(0, h.blocks.head.at.toInt)
    val oldLine = headText.linesIterator.filter(_.startsWith("block ")).toSeq(1)
    val newLine = oldLine.split(' ').updated(8, crc).mkString(" ")
    val newHead = headText.replace(oldLine, newLine)
    val body = newHead.substring(0, newHead.lastIndexOf("checksum "))
    val resealedHead =
      body + f"checksum ${CompactIndex.crcOf(body.getBytes(UTF_8), body.length)}%08x" + "\n"
    assert(resealedHead.length === headText.length)
    val resealed = (resealedHead + text.substring(headText.length, b.at.toInt) +
      new String(changed, UTF_8) + text.substring((b.at + b.length).toInt)).getBytes(UTF_8)
    assert(CompactIndex.prove(resealed, Name, st) ===
      Left(s"its block at byte ${b.at} holds batch 5 outside its range"))
  }

  /**
   * An interval-50 log of `batches` batches (1-3 entries each) and its latest compact id. Built
   * once per size and suite, then copied (modification times kept: an index proves its compact file
   * by them) into each test's own directory, with a log instance of its own, as a restarted query
   * would have: the tests damage and rewrite it.
   */
  private def withBigLog(batches: Int)(f: (
      File,
      io.batchlog.log.BatchTaggedFileStreamSinkLog,
      Long
  ) => Unit): Unit = withSQLConf(
    BatchLogConf.CompactIntervalKey -> "50",
    BatchLogConf.CleanupDelayKey -> "0" // only the latest compact file is left
  ) {
    val built = bigLogs.getOrElseUpdate(
      batches, {
        val dir = createTempDir()
        buildSink(dir, batches, perBatch)
        dir
      }
    )
    withTempDir { root =>
      val walk = Files.walk(built.toPath) // a directory stream: closed once copied
      try walk.forEach { from =>
          val to = root.toPath.resolve(built.toPath.relativize(from))
          if (!Files.isDirectory(from)) Files.copy(from, to, StandardCopyOption.COPY_ATTRIBUTES)
          else Files.createDirectories(to)
        }
      finally walk.close()
      val log = ours(new File(root, "_spark_metadata"))
      f(root, log, ((batches / 50) * 50 - 1).toLong)
    }
  }
  private val bigLogs = scala.collection.mutable.Map.empty[Int, File]

  private def expected(b: Long): Seq[String] = entries(b, perBatch(b)).map(_.path).toSeq

  test("at 1,600 batches: exact files and batch_of of every batch, reading only its block") {
    withBigLog(1620) { (root, log, c) =>
      assert(c === 1599L)
      val onDisk = Files.readAllBytes(indexFile(root, c).toPath)
      assert(IndexBlocks.isV3(onDisk))
      val api = BatchLog.forPath(spark, root.toString)
      (0L until 1620L).foreach { b =>
        assert(api.files(b).toSeq === expected(b), s"batch $b")
      }
      Seq(0L, 511L, 512L, 1023L, 1599L, 1619L).foreach { b =>
        assert(api.batchOf(expected(b).last) === b)
      }
      // the long way (what a new log instance does when no compact file covers b but the latest)
      val fresh = new io.batchlog.log.BatchTaggedFileStreamSinkLog(spark, log.metadataPath.toString)
      val within = fresh.indexWithin(c, 700L, 700L)
      assert(within.runs.map(_.batchId.get) === (512L until 1024L))
      assert(fresh.cachedIndexIds.isEmpty, "the whole index was loaded")
      val got = scala.collection.mutable.ArrayBuffer.empty[String]
      fresh.foreachLivePathWithin(700L, 700L)(_.contains(700L))(got += _)
      assert(got === expected(700L))
      assert(fresh.droppedMaxBatchOf(c) === -1L && !fresh.mayHaveUntagged(c))
      assert(fresh.indexOf(c).runs.map(_.batchId.get) === (0L to c))
      assert(fresh.checkIndex(c).contains(IndexCheck.Sound))
    }
  }

  test("a damaged block: lookups stay exact through a rebuild, verify names it, rewritten as v3") {
    withBigLog(1620) { (root, log, c) =>
      val bytes = Files.readAllBytes(indexFile(root, c).toPath)
      val st = statusOf(log, c)
      val h = head(bytes, st)
      val second = h.blocks(1)
      overwrite(root, s"$c.compact.index", bytes.updated(second.at.toInt + 3, 'x'.toByte))
      val why = s"its block at byte ${second.at} does not match its checksum"
      val api = BatchLog.forPath(spark, root.toString)
      Seq(3L, 600L, 1100L, 1599L).foreach(b => assert(api.files(b).toSeq === expected(b)))
      val fresh = new io.batchlog.log.BatchTaggedFileStreamSinkLog(spark, log.metadataPath.toString)
      val got = scala.collection.mutable.ArrayBuffer.empty[String]
      fresh.foreachLivePathWithin(600L, 600L)(_.contains(600L))(got += _)
      assert(got === expected(600L))
      assert(fresh.indexProblem(c).contains(why))
      assert(api.verify().indexProblems.map(p => (p.compactId, p.problem)) === Seq((c, why)))
      fresh.writeIndex(c) // what `repair` does to an index that does not prove
      val repaired = Files.readAllBytes(indexFile(root, c).toPath)
      assert(IndexBlocks.isV3(repaired) && repaired.sameElements(bytes))
      assert(BatchLog.forPath(spark, root.toString).verify().indexProblems.isEmpty)
    }
  }

  test("a v2 index is still read, proved and verified; the next compaction writes v3") {
    withBigLog(1620) { (root, log, c) =>
      val index = proved(log, c)
      LogFiles.publish(
        log.checkpointFileManager,
        CompactIndex.pathOf(log.logFilePath(c)),
        overwrite = true
      )(_.write(index.toBytesV2))
      val st = statusOf(log, c)
      val v2 = Files.readAllBytes(indexFile(root, c).toPath)
      assert(new String(v2, UTF_8).startsWith(CompactIndex.HeaderV2 + "\n"))
      assert(CompactIndex.prove(v2, s"$c.compact", st) === Right(index))
      val fresh = new io.batchlog.log.BatchTaggedFileStreamSinkLog(spark, log.metadataPath.toString)
      assert(fresh.checkIndex(c).contains(IndexCheck.Sound))
      assert(fresh.indexWithin(c, 700L, 700L) === index)
      val api = BatchLog.forPath(spark, root.toString)
      Seq(0L, 700L, 1599L, 1619L).foreach(b => assert(api.files(b).toSeq === expected(b)))
      withSQLConf(BatchLogConf.CompactIntervalKey -> "50") {
        (1620 until 1650).foreach(b => assert(log.add(b.toLong, entries(b.toLong, perBatch(b)))))
      }
      assert(IndexBlocks.isV3(Files.readAllBytes(indexFile(root, 1649L).toPath)))
      assert(proved(log, 1649L).runs.map(_.batchId.get) === (0L to 1649L))
      (1590L until 1650L).foreach(b => assert(api.files(b).toSeq === expected(b)))
    }
  }

  test("retention: compaction drops old batches and writes v3 with its watermark") {
    withSQLConf(
      BatchLogConf.CompactIntervalKey -> "50",
      BatchLogConf.RetentionBatchesKey -> "120"
    ) {
      withTempDir { root =>
        val log = buildSink(root, 1100, perBatch)
        val index = proved(log, 1099L)
        assert(IndexBlocks.isV3(Files.readAllBytes(indexFile(root, 1099L).toPath)))
        val kept = index.runs.map(_.batchId.get)
        assert(kept.head > 900L && kept.last === 1099L && kept === (kept.head to 1099L))
        assert(index.droppedMaxBatch === kept.head - 1)
        val fresh =
          new io.batchlog.log.BatchTaggedFileStreamSinkLog(spark, log.metadataPath.toString)
        assert(fresh.droppedMaxBatchOf(1099L) === kept.head - 1)
        val api = BatchLog.forPath(spark, root.toString)
        assert(api.files(kept.head - 1).isEmpty)
        (kept.head to 1099L).foreach(b => assert(api.files(b).toSeq === expected(b)))
      }
    }
  }
}
