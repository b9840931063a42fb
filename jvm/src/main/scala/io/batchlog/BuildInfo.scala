package io.batchlog

import java.util.Properties

import org.apache.spark.SPARK_VERSION

/**
 * What this jar was built for, from `io/batchlog/build.properties` (written by the build from its
 * row of `project/spark-lines.tsv`), and the check that the running Spark is that line.
 *
 * Why check: a jar for another line may link and still misbehave. Spark 4.1 moved the streaming
 * internals batchlog extends, so a 4.1+ jar on Spark 4.0 loads the committer, whose
 * `setupManifestOptions` then overrides nothing, and the sink would write through Spark's own log,
 * untagged. Each line also has its own Scala binary version. The committer and `BatchLog.forPath`
 * refuse a mismatch up front, naming the jar to use instead.
 */
object BuildInfo {
  private lazy val props: Properties = {
    val p = new Properties()
    val in = getClass.getResourceAsStream("/io/batchlog/build.properties")
    if (in != null)
      try p.load(in)
      finally in.close()
    p
  }

  /** batchlog's version, e.g. `0.1.0`. */
  def version: String = props.getProperty("version", "unknown")

  /** The Spark line (`major.minor`) this jar is built for. */
  def sparkLine: String = props.getProperty("sparkLine", "unknown")

  /** The Scala binary version (`2.13`) this jar is built for. */
  def scalaBinary: String = binary(props.getProperty("scala", "unknown"))

  /** The Java release its bytecode targets (8 for Spark 3.5, which still runs on Java 8). */
  def javaRelease: Int = props.getProperty("java", "0").toInt

  /** The artifact this jar is: `batchlog-spark-<line>_<scala>`. */
  def artifact: String = s"batchlog-spark-${sparkLine}_$scalaBinary"

  private def binary(v: String): String = v.split('.').take(2).mkString(".")

  /** None if this jar fits Spark `spark` on Scala `scala`, else why not and what to use. */
  def mismatch(spark: String, scala: String): Option[String] = {
    val (line, sb) = (binary(spark), binary(scala))
    if (line == sparkLine && sb == scalaBinary) None
    else
      Some(
        s"this batchlog jar ($artifact-$version.jar) is built for Spark $sparkLine on Scala " +
          s"$scalaBinary, but runs on Spark $spark (Scala $scala). Use batchlog-spark-${line}_$sb: " +
          "from Python, batchlog.configure(...) or batchlog.jar_path() pick it for the installed " +
          s"pyspark; with spark-submit, --packages io.batchlog:batchlog-spark-${line}_$sb:$version " +
          "(README: Spark lines)."
      )
  }

  private lazy val running: Option[String] =
    mismatch(SPARK_VERSION, scala.util.Properties.versionNumberString)

  /**
   * Throws `UNSUPPORTED_SPARK_VERSION` unless this JVM runs the Spark line the jar is built for.
   */
  def requireMatchingSpark(): Unit =
    running.foreach(m => throw new BatchLogException(BatchLogException.UnsupportedSpark, m))
}
