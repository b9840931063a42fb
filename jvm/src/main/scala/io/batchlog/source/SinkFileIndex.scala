package io.batchlog.source

import scala.collection.mutable

import org.apache.hadoop.fs.{FileStatus, Path}

import org.apache.spark.paths.SparkPath
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{
  AttributeReference,
  BoundReference,
  Expression,
  GenericInternalRow,
  InterpretedPredicate
}
import org.apache.spark.sql.execution.datasources.{
  PartitionDirectory,
  PartitioningAwareFileIndex,
  PartitionSpec
}
import org.apache.spark.sql.types.{LongType, StructField, StructType}

import io.batchlog.log.SinkLogEntry

/**
 * The files of chosen batches of a sink, as the file index Spark's file scans plan with (the V2
 * `FileScan` of `format("batchlog")` and the V1 `HadoopFsRelation` of `USING batchlog`): the scan
 * `spark.read.parquet(sink)` plans (column pruning, filter pushdown, partition pruning, vectorized
 * readers), over the files the log lists for those batches only.
 *
 * The file statuses come from the log entries (path, size, modification time), as Spark's
 * `MetadataLogFileIndex` makes them: no data file is listed or probed. Partition columns are
 * inferred from the paths by Spark's own `PartitioningAwareFileIndex` as for the plain path (or
 * typed by the user's schema). With `withBatchId` the writing batch is one more partition column,
 * `batchId`: each (partition directory, batch) is a partition, so a filter on `batchId` prunes
 * files before any is opened.
 *
 * @param root
 *   the sink's output directory (the base path of partition discovery)
 * @param entries
 *   the live entries of the chosen batches (`batchId` None: untagged, only for a read of all)
 */
final class SinkFileIndex(
    spark: SparkSession,
    root: Path,
    entries: Seq[SinkLogEntry],
    options: Map[String, String],
    userSchema: Option[StructType],
    withBatchId: Boolean
) extends PartitioningAwareFileIndex(spark, options + ("basePath" -> root.toString), userSchema) {

  private val statuses: Seq[(FileStatus, Option[Long])] = entries.filterNot(_.isDir).map { e =>
    new FileStatus(
      e.size,
      false,
      e.blockReplication,
      e.blockSize,
      e.modificationTime,
      SparkPath.fromUrlString(e.path).toPath
    ) -> e.batchId
  }

  override protected val leafFiles: mutable.LinkedHashMap[Path, FileStatus] =
    new mutable.LinkedHashMap[Path, FileStatus] ++= statuses.map { case (f, _) => f.getPath -> f }

  override protected val leafDirToChildrenFiles: Map[Path, Array[FileStatus]] =
    statuses.map(_._1).groupBy(_.getPath.getParent).map { case (d, fs) => d -> fs.toArray }

  private lazy val batchOf: Map[Path, Option[Long]] =
    statuses.map { case (s, b) => s.getPath -> b }.toMap

  /** The partitions of the output's directories (without `batchId`): Spark's inference. */
  private lazy val spec: PartitionSpec = inferPartitioning()

  override def partitionSpec(): PartitionSpec = spec

  override def rootPaths: Seq[Path] = Seq(root)

  override def refresh(): Unit = ()

  override def partitionSchema: StructType =
    if (!withBatchId) spec.partitionColumns
    else
      spec.partitionColumns.add(StructField(SourceOptions.BatchIdColumn, LongType, nullable = true))

  override def listFiles(
      partitionFilters: Seq[Expression],
      dataFilters: Seq[Expression]
  ): Seq[PartitionDirectory] =
    if (!withBatchId) super.listFiles(partitionFilters, dataFilters)
    else {
      val keep = predicate(partitionFilters)
      val n = spec.partitionColumns.length
      super.listFiles(Nil, dataFilters).flatMap { dir =>
        dir.files.map(_.fileStatus).groupBy(f => batchOf.getOrElse(f.getPath, None)).toSeq
          .sortBy(_._1.getOrElse(-1L)).map { case (batch, files) =>
            val values = new GenericInternalRow(n + 1)
            (0 until n).foreach(i =>
              values.update(i, dir.values.get(i, spec.partitionColumns(i).dataType))
            )
            values.update(n, batch.map(Long.box).orNull)
            (values: InternalRow, files)
          }
      }.filter { case (values, _) => keep(values) }
        .map { case (values, files) => PartitionDirectory(values, files.toArray) }
    }

  /** The partition filters, bound to [[partitionSchema]] by name. */
  private def predicate(filters: Seq[Expression]): InternalRow => Boolean =
    filters.reduceOption(org.apache.spark.sql.catalyst.expressions.And(_, _)) match {
      case None => _ => true
      case Some(f) =>
        val schema = partitionSchema
        val resolver = spark.sessionState.conf.resolver
        val bound = f.transform { case a: AttributeReference =>
          val i = schema.fields.indexWhere(s => resolver(s.name, a.name))
          BoundReference(i, schema(i).dataType, nullable = true)
        }
        val p = InterpretedPredicate(bound)
        p.initialize(0)
        p.eval
    }
}
