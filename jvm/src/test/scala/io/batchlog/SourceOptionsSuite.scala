package io.batchlog

import org.scalatest.funsuite.AnyFunSuite

import io.batchlog.sql.BatchLogStatement
import io.batchlog.sql.BatchLogStatement.{DryRun, Execute, Plan}
import io.batchlog.source.{BatchRange, SourceOptions}

/** The pure parts of the read side and SQL: batch ranges, format names, `BATCHLOG` statements. */
class SourceOptionsSuite extends AnyFunSuite {

  test("batch ranges: 41-45, 41, 41-, -45; a reversed or malformed one names the form") {
    assert(BatchRange.parse("batches", "41-45") == BatchRange(Some(41), Some(45)))
    assert(BatchRange.parse("batches", " 41 ") == BatchRange(Some(41), Some(41)))
    assert(BatchRange.parse("batches", "41-") == BatchRange(Some(41), None))
    assert(BatchRange.parse("batches", "-45") == BatchRange(None, Some(45)))
    assert(BatchRange(Some(3), Some(5)).toString == "3-5")
    for (bad <- Seq("", "-", "a", "1-2-3", "4 5", "-1-2")) {
      val e = intercept[BatchLogException](BatchRange.parse("batches", bad))
      assert(e.code == BatchLogException.InvalidArgument)
      assert(e.getMessage.contains("write a batch range as 41-45"), e.getMessage)
    }
    val e = intercept[BatchLogException](BatchRange.parse("batches", "9-3"))
    assert(e.getMessage.contains("its first batch 9 is after its last 3"))
  }

  test("the format of a sink's data file, from its name") {
    val f = SourceOptions.formatOf _
    assert(f("part-00000-batch-3-0a.c000.snappy.parquet").contains("parquet"))
    assert(f("part-00000-0a-c000.zstd.orc").contains("orc"))
    assert(f("part-00000-0a.c000.json").contains("json"))
    assert(f("part-00000-0a.c000.json.gz").contains("json"))
    assert(f("part-00000-0a.c000.csv.bz2").contains("csv"))
    assert(f("part-00000-0a.c000.txt").contains("text"))
    assert(f("part-00000-0a.c000.avro").isEmpty)
  }

  test("BATCHLOG statements: every operation and clause, keywords in any case") {
    val p = BatchLogStatement.parse _
    assert(
      p("BATCHLOG REWIND '/o' CHECKPOINT \"/c\" TO BATCH 40 FORCE DRY RUN") ==
        BatchLogStatement("rewind", "/o", Some("/c"), Some(40L), force = true, mode = DryRun)
    )
    assert(p("batchlog takeover '/o' checkpoint '/c' plan;").mode == Plan)
    assert(p("BATCHLOG ADOPT '/o'") == BatchLogStatement("adopt", "/o", mode = Execute))
    assert(p("BATCHLOG REPAIR '/o' COMPACT INTERVAL 7").compactInterval.contains(7))
    assert(p("BATCHLOG VACUUM '/o' OLDER THAN '2h'").olderThan.contains("2h"))
    assert(p("  BATCHLOG VERIFY 'it\\'s'").sink == "it's")
    assert(p("BATCHLOG INSPECT '/o' CHECKPOINT '/c'").checkpoint.contains("/c"))
    assert(BatchLogStatement.isBatchLog("\n batchlog verify 'x'"))
    assert(!BatchLogStatement.isBatchLog("SELECT 1 AS batchlog"))
    assert(!BatchLogStatement.isBatchLog("batchlogs"))
  }

  test("SQL comments around and inside a BATCHLOG statement are skipped, as Spark's parser does") {
    val p = BatchLogStatement.parse _
    val verify = BatchLogStatement("verify", "/o")
    for (
      sql <- Seq(
        "-- check the sink\nBATCHLOG VERIFY '/o'",
        "/* nightly */ BATCHLOG VERIFY '/o';",
        "\n  -- one\n  /* two\n lines */\n  BATCHLOG /* inline */ VERIFY -- to the end\n '/o'  ; -- done",
        "BATCHLOG VERIFY '/o'--no newline after me",
        "BATCHLOG VERIFY '/o';\n/* trailing */\n"
      )
    ) {
      assert(BatchLogStatement.isBatchLog(sql), sql)
      assert(p(sql) == verify, sql)
    }
    // a comment's markers inside a quoted path are the path's
    assert(p("BATCHLOG VERIFY '/o/--x/*y*/'").sink == "/o/--x/*y*/")
    assert(!BatchLogStatement.isBatchLog("-- BATCHLOG VERIFY '/o'\nSELECT 1"))
    assert(!BatchLogStatement.isBatchLog("/* BATCHLOG */ SELECT 1"))
    for (
      (sql, why) <- Seq(
        "BATCHLOG VERIFY '/o' /* never closed" -> "a comment opened with /* is not closed",
        "BATCHLOG VERIFY '/o'; BATCHLOG VERIFY '/p'" -> "one statement at a time"
      )
    ) {
      val e = intercept[BatchLogException](p(sql))
      assert(e.getMessage.contains(why), s"$sql: ${e.getMessage}")
    }
  }

  test("a bad BATCHLOG statement names what is wrong and the statement's form") {
    for (
      (sql, why) <- Seq(
        "BATCHLOG" -> "the operation is missing",
        "BATCHLOG REWIND '/o' CHECKPOINT '/c'" -> "REWIND needs TO BATCH <n>",
        "BATCHLOG REWIND '/o' TO BATCH x" -> "the batch must be a number, found X",
        "BATCHLOG VERIFY '/o' FORCE" -> "VERIFY takes no FORCE clause",
        "BATCHLOG VERIFY /o" -> "unexpected character '/'",
        "BATCHLOG ADOPT '/o' DRY RUN DRY RUN" -> "DRY is given twice",
        "BATCHLOG ADOPT '/o' 7" -> "unexpected 7",
        "BATCHLOG ADOPT '/o' TO BATCH 99999999999999999999" -> "is too large",
        "BATCHLOG HISTORY '/o' WITH" -> "ROWS is missing",
        "BATCHLOG INSPECT '/o' WITH ROWS" -> "INSPECT takes no WITH clause"
      )
    ) {
      val e = intercept[BatchLogException](BatchLogStatement.parse(sql))
      assert(e.code == BatchLogException.InvalidArgument)
      assert(e.getMessage.contains(why), s"$sql: ${e.getMessage}")
    }
    val e = intercept[BatchLogException](BatchLogStatement.parse("BATCHLOG VERIFY"))
    assert(
      e.getMessage.contains(
        "Write: BATCHLOG {ADOPT|HISTORY|INSPECT|REPAIR|REWIND|TAKEOVER|VACUUM|VERIFY}"
      )
    )
  }
}
