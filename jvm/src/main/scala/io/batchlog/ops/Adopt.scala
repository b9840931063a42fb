package io.batchlog.ops

import org.apache.spark.sql.SparkSession

import io.batchlog.BatchLogException
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, LineageProof, LogFiles, LogFormat}

/**
 * Adopts a sink written (wholly or partly) by plain Spark: rewrites each compact file so that every
 * entry whose batch can be proven carries `batchId`, and leaves the rest untagged.
 *
 * Proof of an entry's batch: its data file name is batch-tagged, or the surviving log files prove
 * it ([[LineageProof]]). Each compact file is replaced atomically with the same entries in the same
 * order, so plain Spark reads the same files and a re-run after a crash only finishes the job.
 */
object Adopt {

  def run(spark: SparkSession, sinkPath: String, dryRun: Boolean, quiet: Boolean): AdoptReport = {
    val (log, compacts, proof) = BatchLogException.unchanged {
      val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sinkPath)
      val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
      val ids = log.listLogFiles().map(f => log.pathToBatchId(f.getPath)).toSeq
      (log, ids.filter(log.isCompactFile), LineageProof.of(log, Long.MaxValue))
    }
    val fm = log.checkpointFileManager
    val meta = log.metadataPath

    def tagged(line: String): String =
      if (LogFormat.isTagged(line)) line
      else {
        val e = LogFormat.decode(line)
        val b = LogFormat.resolveBatch(e, -1, inCompact = true).orElse(proof.batchOf(e.path))
        if (b.isEmpty) line else LogFormat.encode(e.copy(batchId = b))
      }

    val progress = new Progress("adopt: compact files", quiet)
    var newlyTagged, stillUntagged, rewritten = 0L
    compacts.zipWithIndex.foreach { case (id, i) =>
      var changed, untaggedHere = 0L
      log.foreachLineIn(id) { (line, _) =>
        if (!LogFormat.isTagged(line)) {
          if (LogFormat.isTagged(tagged(line))) changed += 1 else untaggedHere += 1
        }
      }
      newlyTagged += changed
      stillUntagged += untaggedHere
      if (changed > 0 && !dryRun) {
        try {
          LogFiles.writeAtomic(fm, log.logFilePath(id), overwrite = true) { w =>
            log.foreachLineIn(id)((line, _) => LogFiles.writeLine(w, tagged(line)))
          }
          log.writeIndex(id)
        } catch {
          case e: BatchLogException =>
            throw e.withOutcome(
              if (rewritten == 0) BatchLogException.NothingChanged
              else
                s"$rewritten compact files were tagged before it (each is replaced whole, with " +
                  "the same entries); re-running adopt finishes the job."
            )
        }
        rewritten += 1
      }
      progress.step(i + 1, compacts.length)
    }
    AdoptReport(
      meta.getParent.toString,
      dryRun,
      compacts.length,
      rewritten,
      newlyTagged,
      stillUntagged,
      Horizon.ofSink(log)
    )
  }
}
