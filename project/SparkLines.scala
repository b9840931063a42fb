import java.io.File
import scala.io.Source

/**
 * One row of `project/spark-lines.tsv`: a Spark line batchlog builds a jar for. The table is the
 * one place these facts live; the build, `dev/` scripts and the wheel all read it.
 *
 * @param line
 *   Spark line, `major.minor`
 * @param spark
 *   the Spark release compiled and tested against
 * @param scala
 *   full Scala version of that release's scala-library
 * @param layout
 *   shim directory `jvm/src/main/spark-<layout>`
 * @param java
 *   bytecode release (`-release`)
 * @param jars
 *   `pyspark` (Spark's jars from that pyspark wheel) or `maven` (spark-sql from Maven Central,
 *   provided scope)
 * @param primary
 *   the line the full test suite runs on
 */
final case class SparkLine(
    line: String,
    spark: String,
    scala: String,
    layout: String,
    java: Int,
    jars: String,
    primary: Boolean
) {
  def scalaBinary: String = scala.split('.').take(2).mkString(".")

  /** `4.3_2.13`: the artifact suffix after `batchlog-spark-`, and the selector's name. */
  def id: String = s"${line}_$scalaBinary"

  def artifact: String = s"batchlog-spark-$id"
}

object SparkLines {
  def read(table: File): Seq[SparkLine] = {
    val src = Source.fromFile(table, "UTF-8")
    try
      src.getLines().map(_.trim).filter(l => l.nonEmpty && !l.startsWith("#")).toList.map { l =>
        l.split("\t") match {
          case Array(line, spark, scala, layout, java, jars, primary) =>
            require(Set("pyspark", "maven")(jars), s"$table: jars must be pyspark or maven: $l")
            SparkLine(line, spark, scala, layout, java.toInt, jars, primary == "yes")
          case _ => sys.error(s"$table: expected 7 tab-separated columns: $l")
        }
      }
    finally src.close()
  }

  /**
   * The row selected by `BATCHLOG_SPARK_LINE` (`4.0`, or `3.5_2.13` where a line has two Scala
   * versions; a bare `3.5` means its first row), else the primary line.
   */
  def selected(table: File, selector: Option[String]): SparkLine = {
    val all = read(table)
    selector.filter(_.nonEmpty) match {
      case None => all.find(_.primary).getOrElse(sys.error(s"$table: no primary line"))
      case Some(s) =>
        all
          .find(l => l.id == s || l.line == s)
          .getOrElse(
            sys.error(
              s"BATCHLOG_SPARK_LINE=$s is not in $table; known: ${all.map(_.id).mkString(", ")}"
            )
          )
    }
  }
}
