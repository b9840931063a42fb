package io.batchlog.api

import org.json4s.{DefaultFormats, Extraction, Formats}
import org.json4s.jackson.JsonMethods.{compact, render}

/**
 * The one place batchlog's plans and reports (the case classes of `io.batchlog.ops.Reports`) become
 * JSON, for Python and the CLI: each field under its own name, `None` as `null` (the key is always
 * there), sequences as arrays, nested reports as objects. Python's `batchlog.reports` reads it back
 * into dataclasses, in one place too.
 */
object ReportJson {

  implicit private val formats: Formats = DefaultFormats.preservingEmptyValues

  /** `report` (a case class of `io.batchlog.ops`) as compact JSON. */
  def toJson(report: AnyRef): String = compact(render(Extraction.decompose(report)))
}
