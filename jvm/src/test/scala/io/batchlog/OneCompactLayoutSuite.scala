package io.batchlog

import java.io.File

import org.apache.hadoop.fs.Path

import io.batchlog.log.{LogFormat, LogLayout}

/**
 * The layout `repair` writes when nothing tells the query's compact interval: one file, `L.compact`
 * of the newest batch L, holding every entry. Proved against Spark's own code at every configured
 * interval from 1 to L+2: Spark's log and batchlog's derive an interval that divides L+1, read
 * exactly the entries, and continue through two compactions, each reading the other's log.
 */
class OneCompactLayoutSuite extends SparkSessionTestBase {
  import BatchLogConf._
  import TestLogs._

  private def oneCompact(dir: File, latest: Long): Set[(String, Long)] = {
    val entries = (0L to latest).flatMap(b => entriesOf(b, 2))
    writeLogFile(dir, s"$latest.compact", entries.map(LogFormat.encode))
    entries.map(statusKey).toSet
  }

  for (latest <- Seq(7L, 11L); configured <- 1 to latest.toInt + 2) {
    test(s"$latest.compact alone reads and continues at configured interval $configured") {
      withTempDir { root =>
        val dir = metaDir(root)
        dir.mkdirs()
        var all = oneCompact(dir, latest)
        assert(LogLayout.misfitAnyInterval(localFm(dir), new Path(dir.toURI)) === None)
        withSQLConf(CompactIntervalKey -> configured.toString) {
          val log = ours(dir)
          val d = log.interval
          assert((latest + 1) % d === 0, s"derived $d")
          assert(vanilla(dir).allFiles().map(statusKey).toSet === all)
          assert(log.allFiles().map(statusKey).toSet === all)
          // two more compactions, alternately by batchlog's log and Spark's
          val until = latest + 2 * d
          for (b <- latest + 1 to until) {
            val es = entriesOf(b, 2)
            if (b % 2 == 0) assert(log.add(b, es))
            else assert(vanilla(dir).add(b, es.map(_.toSinkFileStatus)))
            all ++= es.map(statusKey)
          }
          val names = logFileNames(dir)
          assert(names.contains(s"${latest + d}.compact") && names.contains(s"$until.compact"))
          assert(ours(dir).interval === d && vanilla(dir).allFiles().map(statusKey).toSet === all)
          assert(ours(dir).allFiles().map(statusKey).toSet === all)
        }
      }
    }
  }

  test("a log ending in a batch file with one compact file or none does not read at every one") {
    withTempDir { root =>
      val dir = metaDir(root)
      withSQLConf(CompactIntervalKey -> "10") {
        val log = ours(dir)
        (0L to 7L).foreach(b => assert(log.add(b, entriesOf(b, 1))))
      }
      val why = LogLayout.misfitAnyInterval(localFm(dir), new Path(dir.toURI))
      assert(why.exists(_.contains("ends in batch file 7 with 0 compact file(s)")), why)
    }
  }
}
