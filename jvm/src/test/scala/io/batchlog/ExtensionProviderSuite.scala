package io.batchlog

import java.io.File

import org.apache.spark.sql.streaming.StreamingQueryException

import io.batchlog.testshim.intStream

/**
 * The bare set-up: the jar on the class path and the commit protocol, no `spark.sql.extensions`.
 * Spark finds batchlog's extension through `META-INF/services` and applies it once, with or without
 * `spark.sql.extensions` naming it too: the `BATCHLOG` statements answer, and a second query with a
 * head start is stopped as it starts instead of being skipped without an error.
 */
class ExtensionProviderSuite extends SparkSessionTestBase {
  import BatchLogConf._

  override protected def sparkConf: Map[String, String] =
    Map(CommitProtocolKey -> CommitProtocolClass)

  test("without spark.sql.extensions the session has batchlog's SQL and start check") {
    assert(spark.conf.getOption(sql.BatchLogExtensions.Key).isEmpty)
    val root = createTempDir()
    val out = new File(root, "out")
    def start(chk: String, batches: Seq[Seq[Int]]): Unit = {
      val input = intStream(spark, 2)
      val q = input.toDF().writeStream.format("parquet")
        .option("checkpointLocation", new File(root, chk).toString).start(out.toString)
      try batches.foreach { b => input.addData(b: _*); q.processAllAvailable() }
      finally q.stop()
    }
    start("chk-b", Seq(Seq(1), Seq(2), Seq(3)))
    val e = intercept[StreamingQueryException](start("chk-a", Seq(Seq(100), Seq(101))))
    assert(e.getMessage.contains("the sink is written by another query"), e.getMessage)
    val rows = spark.read.parquet(out.toString).collect().map(_.getInt(0)).toSeq.sorted
    assert(rows == Seq(1, 2, 3))
    val latest = spark.sql(s"BATCHLOG INSPECT '${out}'").collect()
    assert(latest.nonEmpty)
  }

  test("named in spark.sql.extensions as well, it is applied once") {
    val ext = new org.apache.spark.sql.SparkSessionExtensions
    val provider = new sql.BatchLogExtensions
    provider(ext)
    provider(ext) // spark.sql.extensions, then the service loader: the second does nothing
    val builders = classOf[org.apache.spark.sql.SparkSessionExtensions]
      .getDeclaredField("parserBuilders")
    builders.setAccessible(true)
    assert(builders.get(ext).asInstanceOf[scala.collection.Seq[_]].length == 1)
  }

  test("the jar names the extension for Spark's service loader") {
    val loaded = java.util.ServiceLoader
      .load(classOf[org.apache.spark.sql.SparkSessionExtensionsProvider])
      .iterator()
    var names = List.empty[String]
    while (loaded.hasNext) names ::= loaded.next().getClass.getName
    assert(names.contains(sql.BatchLogExtensions.ClassName), names)
  }
}
