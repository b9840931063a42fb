package io.batchlog.sql

import java.lang.reflect.{InvocationHandler, InvocationTargetException, Method, Proxy}
import java.util.{Collections, WeakHashMap}

import org.apache.spark.sql.{SparkSession, SparkSessionExtensions, SparkSessionExtensionsProvider}
import org.apache.spark.sql.catalyst.parser.ParserInterface
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

import io.batchlog.commit.HeadStartListener

/**
 * batchlog's session extension: the `BATCHLOG` statements ([[BatchLogStatement]]) and the table
 * functions ([[TableFunctions]]), with which every operation of the Python API works over a session
 * without a JVM gateway, such as Spark Connect; and, for a session that defines a streaming query,
 * the [[HeadStartListener]], which stops a query that is not its sink's writer before Spark's sink
 * skips its batches.
 *
 * Every session whose driver has batchlog's jar on its class path gets it: the jar names this class
 * in `META-INF/services/org.apache.spark.sql.SparkSessionExtensionsProvider`, which Spark reads as
 * a session starts. So the bare set-up (the jar on `--jars` or `spark.jars`, and the commit
 * protocol) has every guarantee, with no `spark.sql.extensions`. Named there as well
 * (`batchlog.configure` does, for older set-ups), it is applied once: Spark would apply it twice.
 */
class BatchLogExtensions extends SparkSessionExtensionsProvider {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    if (!BatchLogExtensions.firstApplication(extensions)) return
    extensions.injectParser((_, delegate) => BatchLogExtensions.parser(delegate))
    TableFunctions.all(() => SparkSession.active).foreach(extensions.injectTableFunction)
    // A session that defines a streaming query gets the check of a query against its sink's owner
    // at its start (analysis runs when the stream is defined, before it can be started).
    extensions.injectCheckRule(session =>
      plan => if (BatchLogExtensions.definesStream(plan)) HeadStartListener.register(session)
    )
    // A micro-batch that reads a batchlog sink through Spark's file source stops before it reads
    // a replayed batch of it.
    extensions.injectOptimizerRule(FileReaderCheck)
  }
}

object BatchLogExtensions {

  private val applied =
    Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap[
      SparkSessionExtensions,
      java.lang.Boolean
    ]()))

  /** True the first time it is asked for `extensions` (one session's), false after. */
  private def firstApplication(extensions: SparkSessionExtensions): Boolean =
    applied.add(extensions)

  /** Spark's key for session extensions (a static conf: set it before the session starts). */
  val Key: String = org.apache.spark.sql.internal.StaticSQLConf.SPARK_SESSION_EXTENSIONS.key

  /** The value for [[Key]]: this class's name (Python's `batchlog.EXTENSIONS_CLASS`, tested). */
  val ClassName: String = classOf[BatchLogExtensions].getName

  /**
   * True for the plan of a stream being defined: a streaming plan with a source not yet started
   * (`StreamingRelation`, `StreamingRelationV2`; a running query's micro-batch plans have other
   * leaves, and are analysed in a clone of the session, which must not get a listener: its streams
   * manager would be created for it). Matched by name: the V1 class moved between lines.
   */
  def definesStream(plan: LogicalPlan): Boolean =
    plan.isStreaming && plan.find(_.getClass.getSimpleName.startsWith("StreamingRelation")).isDefined

  /**
   * Spark's parser, answering `BATCHLOG ...` statements itself. It is a proxy of the
   * `ParserInterface` trait rather than a class implementing it: the trait's methods differ from
   * one Spark line to the next (4.0 added some, 4.3 more), and a proxy serves every line from one
   * source. Only the plan-parsing methods look at the text; everything else goes to Spark's parser.
   */
  def parser(delegate: ParserInterface): ParserInterface =
    Proxy.newProxyInstance(
      classOf[ParserInterface].getClassLoader,
      Array[Class[_]](classOf[ParserInterface]),
      new InvocationHandler {
        override def invoke(proxy: AnyRef, m: Method, args: Array[AnyRef]): AnyRef =
          m.getName match {
            case "parsePlan" | "parsePlanWithParameters"
                if args != null && args.nonEmpty &&
                  args(0).isInstanceOf[String] &&
                  BatchLogStatement.isBatchLog(args(0).asInstanceOf[String]) =>
              BatchLogCommand(
                SqlErrors.tagged(BatchLogStatement.parse(args(0).asInstanceOf[String]))
              )
            case _ =>
              try m.invoke(delegate, args: _*)
              catch { case e: InvocationTargetException => throw e.getCause }
          }
      }
    ).asInstanceOf[ParserInterface]
}
