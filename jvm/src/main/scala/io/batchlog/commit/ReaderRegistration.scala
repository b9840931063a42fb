package io.batchlog.commit

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.execution.datasources.DataSource
import org.apache.spark.sql.sources.DataSourceRegister

import io.batchlog.BatchLogException
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkReaderRecord, SinkReaders, SinkRecord}
import io.batchlog.shim.CheckpointFileManager

/**
 * Registers a starting query with every batchlog sink it reads ([[SinkReaders]]): through the
 * `batchlog` source, or through Spark's file source over the sink's path. Called on the query's
 * thread when it starts, before its sources exist (`HeadStartListener`).
 *
 * The source index is the one Spark gives the source (`<checkpoint>/sources/<i>`): Spark numbers
 * the streaming relations of the query's analysed plan in the order a top-down traversal meets
 * them, one index per distinct relation, which is the order of [[streamingRelations]]. A relation
 * is matched by its class's simple name (the class moved between Spark lines) and read through its
 * `dataSource` (`className`, `options`, `paths`).
 */
object ReaderRegistration extends Logging {

  /**
   * Registers the query `queryId` (checkpoint `checkpoint`, writing the file sink `ownSink` if any)
   * whose analysed plan is that of Spark's `StreamExecution` `query`; the sinks registered with.
   */
  def register(
      spark: SparkSession,
      query: AnyRef,
      queryId: String,
      checkpoint: String,
      ownSink: Option[String]
  ): Seq[Path] = {
    val plan = query.getClass.getMethod("analyzedPlan").invoke(query).asInstanceOf[LogicalPlan]
    val now = System.currentTimeMillis()
    streamingRelations(plan).zipWithIndex.flatMap { case (relation, i) =>
      sinkRead(spark, relation).flatMap { case (meta, kind) =>
        try {
          val fm = CheckpointFileManager.create(meta, spark.sessionState.newHadoopConf())
          if (SinkRecord.read(fm, meta).isEmpty) None // not a sink batchlog writes
          else {
            val reader = SinkReaderRecord(
              SinkReaders.Version,
              queryId,
              checkpoint,
              i,
              kind,
              ownSink,
              now,
              now
            )
            SinkReaders.register(fm, meta, reader)
            Some(meta.getParent)
          }
        } catch {
          case NonFatal(e) =>
            logWarning(s"batchlog could not register query $queryId as a reader of $meta", e)
            None
        }
      }
    }
  }

  /** The plan's streaming relations, distinct, in the order Spark numbers its sources. */
  def streamingRelations(plan: LogicalPlan): Seq[LogicalPlan] =
    plan.collectLeaves().filter(_.getClass.getSimpleName.startsWith("StreamingRelation")).distinct

  /** True if `className` (a relation's format, as the query named it) is the `batchlog` source. */
  private def isBatchlogSource(spark: SparkSession, className: String): Boolean =
    try {
      val cls = DataSource.lookupDataSource(className, spark.sessionState.conf)
      classOf[DataSourceRegister].isAssignableFrom(cls) &&
      cls.getConstructor().newInstance().asInstanceOf[DataSourceRegister].shortName() ==
        SinkReaders.KindBatchlog
    } catch { case NonFatal(_) => false }

  /** The log of the batchlog sink a relation reads, and how: None if it reads none. */
  private def sinkRead(spark: SparkSession, relation: LogicalPlan): Option[(Path, String)] = {
    val ds =
      try Some(relation.getClass.getMethod("dataSource").invoke(relation))
      catch { case _: NoSuchMethodException => None } // a V2 relation: not a source of ours
    ds.flatMap { d =>
      val className = d.getClass.getMethod("className").invoke(d).asInstanceOf[String]
      val options = d.getClass.getMethod("options").invoke(d).asInstanceOf[Map[String, String]]
      val paths = d.getClass.getMethod("paths").invoke(d).asInstanceOf[Seq[String]]
      val kind =
        if (isBatchlogSource(spark, className)) SinkReaders.KindBatchlog else SinkReaders.KindFile
      options.get("path").orElse(paths.headOption).flatMap { path =>
        try Some(BatchTaggedFileStreamSinkLog.metadataPathOf(spark, path) -> kind)
        catch {
          case e: BatchLogException if e.code == BatchLogException.NotASink => None
          case NonFatal(e) => // a glob, a store this session cannot reach: not a sink we know
            logDebug(s"not registering a reader of $path", e)
            None
        }
      }
    }
  }
}
