package io.batchlog.log

import java.io.StringWriter
import java.nio.charset.StandardCharsets.UTF_8

import com.fasterxml.jackson.core.{JsonFactory, JsonParser, JsonToken}

import org.apache.spark.sql.types._

/**
 * The on-disk format of a batch-tagged sink log file, defined here and nowhere else.
 *
 * {{{
 *   v1
 *   {"path":"file:///out/p=1/part-00000-batch-7-<uuid>.c000.snappy.parquet","size":1234,
 *    "isDir":false,"modificationTime":1700000000000,"blockReplication":1,"blockSize":33554432,
 *    "action":"add","batchId":7}
 * }}}
 * (one JSON object per line; wrapped here for reading). The header is Spark's `v1` and every field
 * before `batchId` is Spark's `SinkFileStatus`, in Spark's order: Spark's own reader ignores the
 * extra field, so plain Spark reads the log unchanged. `batchId` is always the last field, which
 * lets compaction copy tagged lines as bytes without parsing them ([[isTagged]]).
 *
 * Resolving an entry's batch ([[resolveBatch]]): the `batchId` field; else, in a non-compact file
 * `N`, N itself (Spark writes exactly the files of batch N there); else the batch id in the data
 * file's name; else untagged.
 */
object LogFormat {
  val Version = 1
  val Header = "v1"
  val BatchIdField = "batchId"

  /** The field of a batch's first line holding its [[BatchCommit]]; just before `batchId`. */
  val CommitField = "commit"

  /** The entry as a Spark schema (for reading log files with Spark's JSON reader). */
  val sparkSchema: StructType = StructType(Seq(
    StructField("path", StringType),
    StructField("size", LongType),
    StructField("isDir", BooleanType),
    StructField("modificationTime", LongType),
    StructField("blockReplication", IntegerType),
    StructField("blockSize", LongType),
    StructField("action", StringType),
    StructField(BatchIdField, LongType)
  ))

  private val TagMarker = ",\"" + BatchIdField + "\":"
  private val json = new JsonFactory()

  /** One entry as one line, without the newline. */
  def encode(e: SinkLogEntry): String = {
    val w = new StringWriter(256)
    val g = json.createGenerator(w)
    g.writeStartObject()
    g.writeStringField("path", e.path)
    g.writeNumberField("size", e.size)
    g.writeBooleanField("isDir", e.isDir)
    g.writeNumberField("modificationTime", e.modificationTime)
    g.writeNumberField("blockReplication", e.blockReplication)
    g.writeNumberField("blockSize", e.blockSize)
    g.writeStringField("action", e.action)
    e.commit.foreach { c =>
      g.writeObjectFieldStart(CommitField)
      c.queryId.foreach(g.writeStringField("queryId", _))
      c.runId.foreach(g.writeStringField("runId", _))
      c.rows.foreach(g.writeNumberField("rows", _))
      c.durationMs.foreach(g.writeNumberField("durationMs", _))
      g.writeEndObject()
    }
    e.batchId.foreach(id => g.writeNumberField(BatchIdField, id))
    g.writeEndObject()
    g.close()
    w.toString
  }

  /**
   * Parses one line. Unknown fields are ignored (as Spark does); a missing required field or a
   * malformed line throws `IllegalArgumentException` with the reason (callers add file and line).
   */
  def decode(line: String): SinkLogEntry = {
    var path: String = null
    var size, modificationTime, blockSize = Long.MinValue
    var isDir: java.lang.Boolean = null
    var blockReplication = Int.MinValue
    var action: String = null
    var batchId: Option[Long] = None
    var commit: Option[BatchCommit] = None
    val p = json.createParser(line)
    try {
      if (p.nextToken() != JsonToken.START_OBJECT) fail("not a JSON object")
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        val name = p.currentName()
        val t = p.nextToken()
        name match {
          case "path" => path = text(p, t, name)
          case "size" => size = long(p, t, name)
          case "isDir" => isDir = bool(t, name)
          case "modificationTime" => modificationTime = long(p, t, name)
          case "blockReplication" => blockReplication = long(p, t, name).toInt
          case "blockSize" => blockSize = long(p, t, name)
          case "action" => action = text(p, t, name)
          case BatchIdField =>
            batchId = if (t == JsonToken.VALUE_NULL) None else Some(long(p, t, name))
          case CommitField => commit = commitOf(p, t)
          case _ => p.skipChildren()
        }
      }
      if (p.currentToken() != JsonToken.END_OBJECT) fail("the line is truncated")
      if (p.nextToken() != null) fail("unexpected text after the JSON object")
    } catch {
      case e: com.fasterxml.jackson.core.JsonProcessingException =>
        fail(s"malformed JSON: ${e.getOriginalMessage}")
    } finally p.close()
    def missing(field: String) = fail(s"required field '$field' is missing")
    if (path == null) missing("path")
    if (size == Long.MinValue) missing("size")
    if (isDir == null) missing("isDir")
    if (modificationTime == Long.MinValue) missing("modificationTime")
    if (blockReplication == Int.MinValue) missing("blockReplication")
    if (blockSize == Long.MinValue) missing("blockSize")
    if (action == null) missing("action")
    SinkLogEntry(
      path,
      size,
      isDir,
      modificationTime,
      blockReplication,
      blockSize,
      action,
      batchId,
      commit
    )
  }

  /**
   * A `commit` object ([[BatchCommit]]), read leniently: it is what the commit said about itself,
   * never what decides which files are live, so a member of another type, or an unknown one, is
   * left out rather than failing the log (the line's checksum, in a compact file, is what catches
   * damage). Anything but an object is no commit.
   */
  private def commitOf(p: JsonParser, t: JsonToken): Option[BatchCommit] =
    if (t != JsonToken.START_OBJECT) { p.skipChildren(); None }
    else {
      var c = BatchCommit(None, None, None, None)
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        val name = p.currentName()
        val v = p.nextToken()
        def str = if (v == JsonToken.VALUE_STRING) Some(p.getText) else None
        def num = if (v == JsonToken.VALUE_NUMBER_INT) Some(p.getLongValue) else None
        name match {
          case "queryId" => c = c.copy(queryId = str)
          case "runId" => c = c.copy(runId = str)
          case "rows" => c = c.copy(rows = num)
          case "durationMs" => c = c.copy(durationMs = num)
          case _ =>
        }
        p.skipChildren()
      }
      Some(c)
    }

  /**
   * The `batchId` of a line that ends with it (as [[encode]] writes it), read from the line's tail
   * without parsing the rest; None for an untagged line.
   */
  def taggedBatch(line: CharSequence): Option[Long] = {
    val end = line.length - 1
    if (end < 0 || line.charAt(end) != '}') return None
    var j = end - 1
    while (j >= 0 && Character.isDigit(line.charAt(j))) j -= 1
    val digits = end - 1 - j
    if (digits == 0 || digits > 19 || !startsWith(line, TagMarker, j - TagMarker.length + 1)) None
    else {
      var id = 0L
      var k = j + 1
      while (k < end && id >= 0) { id = id * 10 + (line.charAt(k) - '0'); k += 1 }
      if (id < 0) None else Some(id) // id < 0: overflow past Long.MaxValue
    }
  }

  def isTagged(line: String): Boolean = taggedBatch(line).isDefined

  /** `s` holds `t` at `at` (String.startsWith for any CharSequence). */
  private def startsWith(s: CharSequence, t: String, at: Int): Boolean =
    at >= 0 && at + t.length <= s.length && {
      var k = 0
      while (k < t.length && s.charAt(at + k) == t.charAt(k)) k += 1
      k == t.length
    }

  /**
   * True if `line` is a complete, valid tagged entry exactly as [[encode]] writes it: every field
   * in its order, each of its type, strings well escaped, nothing else. Such a line decodes without
   * error to the entry it says, so compaction can copy it as text instead of decoding it (a line
   * for which this is false is decoded: any other valid form, or the error naming a corrupt one).
   */
  def isCanonical(line: String): Boolean = {
    val b = asciiFolded(line)
    new CanonicalScan().scan(b, 0, b.length) == b.length
  }

  /**
   * The batch of the line `bytes[from, to)` if it is canonical ([[isCanonical]]) and all ASCII,
   * else -1: a line with a non-ASCII byte is decoded instead (its UTF-8 checked), never copied
   * unchecked.
   */
  def canonicalBatch(bytes: Array[Byte], from: Int, to: Int): Long = {
    val scan = new CanonicalScan()
    if (scan.scan(bytes, from, to) == to) scan.batchId else -1L
  }

  /**
   * `line` as bytes for [[CanonicalScan]], one per character: an ASCII character is its byte, any
   * other reads as `x`, a character that is valid inside a JSON string and nowhere else in a line,
   * so the scan of a String accepts exactly the lines it would accept character by character.
   */
  private def asciiFolded(line: String): Array[Byte] = {
    val b = new Array[Byte](line.length)
    var i = 0
    while (i < b.length) {
      val c = line.charAt(i)
      b(i) = if (c < 0x80) c.toByte else 'x'
      i += 1
    }
    b
  }

  private val PathStart = "{\"path\":\"".length

  /**
   * Checks that bytes hold a line exactly as [[encode]] writes it for a batch, on the bytes,
   * without decoding them: compaction checks every batch-file line this way, in the same pass that
   * finds where the line ends, with no character decoding and no allocation. A byte outside ASCII
   * is never canonical. After a successful [[scan]], [[batchId]] is the line's batch and
   * [[pathEnd]] the index of the quote closing its path; one instance is reused line after line.
   */
  final class CanonicalScan {
    import CanonicalScan._
    var batchId: Long = -1L
    var pathEnd: Int = -1
    private var escapes = 0
    private var pathEscapes = 0

    /** The path held no escape: its text between the quotes is the path. */
    def plainPath: Boolean = pathEnd > PathStart && pathEscapes == 0

    /**
     * Scans the line starting at `from`, reading no byte at or past `limit`: the index just past
     * its closing `}` if the bytes up to there are canonical (the caller checks what follows: the
     * end of the line), [[CanonicalScan.NotCanonical]], or [[CanonicalScan.NeedMore]] if `limit`
     * came before the line could be judged (more bytes may make it canonical).
     */
    def scan(b: Array[Byte], from: Int, limit: Int): Int = {
      escapes = 0
      var i = str(b, lit(b, from, limit, PathKey), limit)
      if (i < 0) return i
      pathEnd = i - 1
      pathEscapes = escapes
      i = int(b, lit(b, i, limit, SizeKey), limit, 18)
      i = lit(b, i, limit, IsDirKey)
      if (i >= 0) {
        val t = lit(b, i, limit, True)
        i = if (t == NotCanonical) lit(b, i, limit, False) else t
      }
      i = int(b, lit(b, i, limit, ModificationTimeKey), limit, 18)
      i = int(b, lit(b, i, limit, BlockReplicationKey), limit, 9)
      i = int(b, lit(b, i, limit, BlockSizeKey), limit, 18)
      i = str(b, lit(b, i, limit, ActionKey), limit)
      i = lit(b, i, limit, TagKey)
      if (i < 0) return i
      val digits = i
      i = digitsFrom(b, i, limit, 18) // a batch id: never negative
      if (i < 0) return i
      var id = 0L
      var k = digits
      while (k < i) { id = id * 10 + (b(k) - '0'); k += 1 }
      batchId = id
      lit(b, i, limit, Close)
    }

    /** `t` at `i` (a negative `i` is a verdict already reached, passed on). */
    private def lit(b: Array[Byte], i: Int, limit: Int, t: Array[Byte]): Int = {
      if (i < 0) return i
      var k = 0
      while (k < t.length) {
        if (i + k >= limit) return NeedMore
        if (b(i + k) != t(k)) return NotCanonical
        k += 1
      }
      i + k
    }

    /** A JSON string at `i`, escapes checked (and counted); control and non-ASCII bytes refused. */
    private def str(b: Array[Byte], i0: Int, limit: Int): Int = {
      if (i0 < 0) return i0
      if (i0 >= limit) return NeedMore
      if (b(i0) != '"') return NotCanonical
      var i = i0 + 1
      while (i < limit) {
        val c = b(i)
        if (c == '"') return i + 1
        if (c < ' ') return NotCanonical // a control character, or (negative) a non-ASCII byte
        if (c == '\\') {
          escapes += 1
          if (i + 1 >= limit) return NeedMore
          b(i + 1) match {
            case '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' => i += 2
            case 'u' =>
              if (i + 6 > limit) return NeedMore
              var k = i + 2
              while (k < i + 6) {
                if (Character.digit(b(k).toInt, 16) < 0) return NotCanonical
                k += 1
              }
              i += 6
            case _ => return NotCanonical
          }
        } else i += 1
      }
      NeedMore
    }

    /** An integer at `i`, maybe negative, of 1 to `maxDigits` digits (no overflow possible). */
    private def int(b: Array[Byte], i: Int, limit: Int, maxDigits: Int): Int =
      if (i < 0) i
      else if (i >= limit) NeedMore
      else if (b(i) == '-') digitsFrom(b, i + 1, limit, maxDigits)
      else digitsFrom(b, i, limit, maxDigits)

    /** 1 to `maxDigits` digits at `start`, no leading zero: the index after them. */
    private def digitsFrom(b: Array[Byte], start: Int, limit: Int, maxDigits: Int): Int = {
      var i = start
      while (i < limit && b(i) >= '0' && b(i) <= '9') i += 1
      val n = i - start
      if (i >= limit) NeedMore // more digits may follow
      else if (n >= 1 && n <= maxDigits && (n == 1 || b(start) != '0')) i
      else NotCanonical
    }
  }

  object CanonicalScan {

    /** [[CanonicalScan.scan]]: the bytes are not a canonical line. */
    final val NotCanonical = -1

    /** [[CanonicalScan.scan]]: the bytes ran out before the line could be judged. */
    final val NeedMore = -2
    private def bytes(s: String) = s.getBytes(UTF_8)
    private val PathKey = bytes("{\"path\":")
    private val SizeKey = bytes(",\"size\":")
    private val IsDirKey = bytes(",\"isDir\":")
    private val True = bytes("true")
    private val False = bytes("false")
    private val ModificationTimeKey = bytes(",\"modificationTime\":")
    private val BlockReplicationKey = bytes(",\"blockReplication\":")
    private val BlockSizeKey = bytes(",\"blockSize\":")
    private val ActionKey = bytes(",\"action\":")
    private val TagKey = bytes(TagMarker)
    private val Close = bytes("}")
  }

  /**
   * The `path` of a line that is canonical ([[isCanonical]]) and holds no JSON escape in its path,
   * cut from the line without decoding it; None otherwise (decode it: that also names what is wrong
   * with a damaged line, which this never passes over).
   */
  def pathOf(line: String): Option[String] = {
    val b = asciiFolded(line)
    val scan = new CanonicalScan()
    if (scan.scan(b, 0, b.length) == b.length && scan.plainPath)
      Some(line.substring(PathStart, scan.pathEnd))
    else None
  }

  /**
   * Adds `"batchId":id` to an untagged line without re-serialising it: every Spark-written line is
   * one flat JSON object ending in `}`.
   */
  def tagLine(line: String, batchId: Long): String =
    line.substring(0, line.lastIndexOf('}')) + TagMarker + batchId + "}"

  /** The batch of an entry read from log file `logBatchId` (a compact file if `inCompact`). */
  def resolveBatch(e: SinkLogEntry, logBatchId: Long, inCompact: Boolean): Option[Long] =
    e.batchId
      .orElse(if (inCompact) None else Some(logBatchId))
      .orElse(DataFileNaming.batchIdOf(e.path))

  private def fail(msg: String): Nothing = throw new IllegalArgumentException(msg)

  private def text(p: JsonParser, t: JsonToken, name: String): String =
    if (t == JsonToken.VALUE_STRING) p.getText else fail(s"field '$name' is not a string")

  private def long(p: JsonParser, t: JsonToken, name: String): Long =
    if (t == JsonToken.VALUE_NUMBER_INT) p.getLongValue
    else fail(s"field '$name' is not an integer")

  private def bool(t: JsonToken, name: String): java.lang.Boolean = t match {
    case JsonToken.VALUE_TRUE => true
    case JsonToken.VALUE_FALSE => false
    case _ => fail(s"field '$name' is not a boolean")
  }
}
