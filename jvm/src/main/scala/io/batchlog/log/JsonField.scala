package io.batchlog.log

import com.fasterxml.jackson.core.{JsonFactory, JsonToken}

/** Reads one top-level integer field of a one-line JSON object, without binding the rest. */
object JsonField {
  private val json = new JsonFactory()

  def long(line: String, field: String): Option[Long] = {
    val p = json.createParser(line)
    try {
      if (p.nextToken() != JsonToken.START_OBJECT) return None
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        val name = p.currentName()
        val t = p.nextToken()
        if (name == field && t == JsonToken.VALUE_NUMBER_INT) return Some(p.getLongValue)
        p.skipChildren()
      }
      None
    } finally p.close()
  }
}
