package io.batchlog.log

/**
 * The record `repair` writes into the sink's `_batchlog/` before it changes the log, and removes as
 * its last step (`batchlog-repair.json`). `repair` changes `_spark_metadata` file by file (the
 * directory stays in place, see [[io.batchlog.ops.RepairSwap]]); a repair cut short leaves a log
 * that may look sound but lack its newest batches. While this record exists the next `repair` calls
 * the log unhealthy and rebuilds it from the data files, which finishes the job.
 *
 * @param movedAside
 *   the directory the old log files were copied to before any was changed
 */
final case class RepairIntent(startedAtMs: Long, movedAside: String)

object RepairIntent extends JsonRecordFile[RepairIntent]("batchlog-repair.json")
