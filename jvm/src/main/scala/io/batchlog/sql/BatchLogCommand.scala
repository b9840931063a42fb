package io.batchlog.sql

import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeReference}
import org.apache.spark.sql.execution.command.LeafRunnableCommand
import org.apache.spark.sql.types.{BooleanType, StringType}

import io.batchlog.{BatchLog, BatchLogException}
import io.batchlog.api.ReportJson

/**
 * Runs a [[BatchLogStatement]] through the public API ([[BatchLog]] and its actions), as Spark runs
 * its own commands: once, when the statement is executed (not when it is explained), returning one
 * row: the operation, the sink, whether it changed nothing (`dry_run`: a dry run, a plan, or a
 * read-only operation) and the report, the same JSON document the Python API and the CLI read.
 */
final case class BatchLogCommand(statement: BatchLogStatement) extends LeafRunnableCommand {

  override val output: Seq[Attribute] = Seq(
    AttributeReference("operation", StringType, nullable = false)(),
    AttributeReference("sink", StringType, nullable = false)(),
    AttributeReference("dry_run", BooleanType, nullable = false)(),
    AttributeReference("report", StringType, nullable = false)()
  )

  override def run(spark: SparkSession): Seq[Row] = SqlErrors.tagged {
    import BatchLogStatement._
    val st = statement
    val sink = BatchLog.forPath(spark, st.sink)
    def chk = st.checkpoint.get
    val dry = st.mode == DryRun
    // `summary()` is the plan; `execute()` carries it out, or only reports it in a dry run.
    def act(a: io.batchlog.api.SinkAction[_, _, _]): AnyRef =
      if (st.mode == Plan) a.summary()
      else { a.dryRun(dry); a.quiet(true); a.execute().asInstanceOf[AnyRef] }
    val report: AnyRef = st.operation match {
      case "rewind" if st.cascade =>
        act(
          st.downstream.foldLeft(sink.cascade(chk, st.toBatch.get))(_.downstream(_)).force(st.force)
        )
      case "rewind" => act(sink.rewind(chk, st.toBatch.get).force(st.force))
      case "takeover" => act(sink.takeover(chk).force(st.force))
      case "adopt" => act(sink.adopt())
      case "repair" =>
        val a = sink.repair().force(st.force)
        act(st.compactInterval.fold(a)(a.compactInterval))
      case "vacuum" => act(st.olderThan.fold(sink.vacuum())(sink.vacuum().olderThan))
      case "verify" => sink.verify()
      case "inspect" => st.checkpoint.fold(sink.inspect())(sink.inspect)
      case "history" => sink.history(st.withRows)
    }
    val changesNothing = st.mode != Execute || Set("verify", "inspect", "history")(st.operation)
    Seq(Row(st.operation, st.sink, changesNothing, ReportJson.toJson(report)))
  }

  override def simpleString(maxFields: Int): String = s"BatchLogCommand $statement"
}

/**
 * batchlog's errors as they leave a SQL statement or table function. A client without a JVM gateway
 * (Spark Connect) sees only the message, so it starts with the error's code, `[BATCHLOG.<CODE>]`,
 * as Spark's own errors start with theirs; the Python facade maps it back to its exception class.
 */
object SqlErrors {
  def tagged[T](body: => T): T =
    try body
    catch {
      case e: BatchLogException if !e.problem.startsWith("[BATCHLOG.") =>
        throw new BatchLogException(e.code, s"[BATCHLOG.${e.code}] ${e.problem}", e, e.outcome)
    }
}
