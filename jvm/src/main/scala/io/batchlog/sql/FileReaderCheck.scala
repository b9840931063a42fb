package io.batchlog.sql

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}

import io.batchlog.commit.FileReaderGuard

/**
 * An optimizer rule of batchlog's session extension: the files each streaming file relation of a
 * micro-batch reads (Spark's file source gives its batch as one) go through [[FileReaderGuard]],
 * which stops a query about to read a replayed batch of a batchlog sink. The plan is returned as it
 * is.
 */
final case class FileReaderCheck(session: SparkSession) extends Rule[LogicalPlan] {
  override def apply(plan: LogicalPlan): LogicalPlan = {
    if (plan.isStreaming) {
      plan.foreach {
        case l: LogicalRelation if l.isStreaming =>
          l.relation match {
            case h: HadoopFsRelation => FileReaderGuard.check(session, h.location.rootPaths)
            case _ =>
          }
        case _ =>
      }
    }
    plan
  }
}
