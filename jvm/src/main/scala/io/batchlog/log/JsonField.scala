package io.batchlog.log

import com.fasterxml.jackson.core.{JsonFactory, JsonToken}

/** Reads one top-level field of a one-line JSON object, without binding the rest. */
object JsonField {
  private val json = new JsonFactory()

  def long(line: String, field: String): Option[Long] =
    find(line, field, JsonToken.VALUE_NUMBER_INT)(_.getLongValue)

  def string(line: String, field: String): Option[String] =
    find(line, field, JsonToken.VALUE_STRING)(_.getText)

  private def find[T](line: String, field: String, token: JsonToken)(
      value: com.fasterxml.jackson.core.JsonParser => T
  ): Option[T] = {
    val p = json.createParser(line)
    try {
      if (p.nextToken() != JsonToken.START_OBJECT) return None
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        val name = p.currentName()
        val t = p.nextToken()
        if (name == field && t == token) return Some(value(p))
        p.skipChildren()
      }
      None
    } finally p.close()
  }
}
