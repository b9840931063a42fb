package io.batchlog.sql

import java.util.Locale

import scala.collection.mutable

import io.batchlog.BatchLogException

/**
 * A `BATCHLOG` SQL statement: a maintenance operation on a sink, as the Python API and the CLI run
 * it, for SQL users and for sessions without a JVM gateway (Spark Connect).
 *
 * {{{
 *   BATCHLOG REWIND '/data/out' CHECKPOINT '/chk/out' TO BATCH 40 [FORCE] [DRY RUN | PLAN]
 *   BATCHLOG REWIND '/data/out' CHECKPOINT '/chk/out' TO BATCH 40 CASCADE
 *       [DOWNSTREAM '<sink>=<checkpoint>' ...] [FORCE] [DRY RUN | PLAN]
 *   BATCHLOG TAKEOVER '/data/out' CHECKPOINT '/chk/new' [FORCE] [DRY RUN | PLAN]
 *   BATCHLOG ADOPT '/data/out' [DRY RUN | PLAN]
 *   BATCHLOG REPAIR '/data/out' [FORCE] [COMPACT INTERVAL 10] [DRY RUN | PLAN]
 *   BATCHLOG VACUUM '/data/out' [OLDER THAN '1h'] [DRY RUN | PLAN]
 *   BATCHLOG VERIFY '/data/out'
 *   BATCHLOG INSPECT '/data/out' [CHECKPOINT '/chk/out']
 *   BATCHLOG HISTORY '/data/out' [WITH ROWS]
 * }}}
 *
 * `DRY RUN` reports what the operation would do and changes nothing; `PLAN` returns the plan (what
 * `Action.plan()` returns). Without either, the operation is carried out, as Spark's own commands
 * are: once, when the statement runs. Strings are quoted with `'` or `"` (a backslash escapes).
 */
final case class BatchLogStatement(
    operation: String,
    sink: String,
    checkpoint: Option[String] = None,
    toBatch: Option[Long] = None,
    force: Boolean = false,
    compactInterval: Option[Int] = None,
    olderThan: Option[String] = None,
    mode: BatchLogStatement.Mode = BatchLogStatement.Execute,
    cascade: Boolean = false,
    downstream: Seq[String] = Nil,
    withRows: Boolean = false
)

object BatchLogStatement {

  sealed trait Mode { def name: String }
  case object Execute extends Mode { val name = "execute" }
  case object DryRun extends Mode { val name = "dry run" }
  case object Plan extends Mode { val name = "plan" }

  val Keyword = "BATCHLOG"

  /** What each operation accepts besides its sink path; `needs`: what it must have. */
  private case class Grammar(clauses: Set[String], needs: Set[String], modes: Boolean = true)

  private val Operations: Map[String, Grammar] = Map(
    "REWIND" -> Grammar(
      Set("CHECKPOINT", "TO", "FORCE", "CASCADE", "DOWNSTREAM"),
      Set("CHECKPOINT", "TO")
    ),
    "TAKEOVER" -> Grammar(Set("CHECKPOINT", "FORCE"), Set("CHECKPOINT")),
    "ADOPT" -> Grammar(Set(), Set()),
    "REPAIR" -> Grammar(Set("FORCE", "COMPACT"), Set()),
    "VACUUM" -> Grammar(Set("OLDER"), Set()),
    "VERIFY" -> Grammar(Set(), Set(), modes = false),
    "INSPECT" -> Grammar(Set("CHECKPOINT"), Set(), modes = false),
    "HISTORY" -> Grammar(Set("WITH"), Set(), modes = false)
  )

  sealed private trait Token
  final private case class Word(upper: String) extends Token
  final private case class Str(value: String) extends Token
  final private case class Num(value: Long) extends Token

  /**
   * True if `sql` is a `BATCHLOG` statement (its first word, after any spaces and SQL comments, as
   * a notebook cell or a script may start with), which [[parse]] then must parse.
   */
  def isBatchLog(sql: String): Boolean = {
    val s = sql.substring(math.max(0, skipBlank(sql, 0)))
    s.length >= Keyword.length && s.regionMatches(true, 0, Keyword, 0, Keyword.length) &&
    (s.length == Keyword.length || !Character.isJavaIdentifierPart(s.charAt(Keyword.length)))
  }

  /**
   * The index of the first character at or after `from` that is neither a space nor inside an SQL
   * comment (two dashes to the end of the line, or slash-star to star-slash); -1 if a block comment
   * there is never closed. (Scaladoc cannot spell those markers: Scala nests block comments.)
   */
  private def skipBlank(s: String, from: Int): Int = {
    var i = from
    var moved = true
    while (moved && i >= 0) {
      moved = false
      while (i < s.length && s.charAt(i).isWhitespace) { i += 1; moved = true }
      if (s.startsWith("--", i)) {
        val eol = s.indexOf('\n', i)
        i = if (eol < 0) s.length else eol + 1
        moved = true
      } else if (s.startsWith("/*", i)) {
        val end = s.indexOf("*/", i + 2)
        i = if (end < 0) -1 else end + 2
        moved = true
      }
    }
    i
  }

  /** The statement `sql`, or an error naming what is wrong and the statement's form. */
  def parse(sql: String): BatchLogStatement = {
    val tokens = tokenize(sql)
    def fail(why: String): Nothing = throw BatchLogException.invalidArgument(
      "statement",
      sql.trim,
      s"$why. Write: ${Operations.keys.toSeq.sorted.mkString("BATCHLOG {", "|", "}")} " +
        "'<sink path>' [CHECKPOINT '<checkpoint>'] [TO BATCH <n>] [CASCADE] " +
        "[DOWNSTREAM '<sink>=<checkpoint>' ...] [FORCE] [COMPACT INTERVAL <n>] " +
        "[OLDER THAN '<duration>'] [WITH ROWS] [DRY RUN | PLAN]"
    )
    val it = tokens.iterator.buffered
    def next(what: String): Token = if (it.hasNext) it.next() else fail(s"$what is missing")
    def word(w: String): Unit = next(w) match {
      case Word(`w`) =>
      case other => fail(s"expected $w, found ${show(other)}")
    }
    def str(what: String): String = next(what) match {
      case Str(s) => s
      case other => fail(s"$what must be a quoted string, found ${show(other)}")
    }
    def num(what: String): Long = next(what) match {
      case Num(n) => n
      case other => fail(s"$what must be a number, found ${show(other)}")
    }
    word(Keyword)
    val op = next("the operation") match {
      case Word(w) if Operations.contains(w) => w
      case other => fail(s"unknown operation ${show(other)}")
    }
    val grammar = Operations(op)
    var st = BatchLogStatement(op.toLowerCase(Locale.ROOT), str("the sink path"))
    val seen = mutable.Set.empty[String]
    while (it.hasNext) {
      val clause = next("a clause") match {
        case Word(w) => w
        case other => fail(s"unexpected ${show(other)}")
      }
      val allowed = grammar.clauses(clause) || (grammar.modes && Set("DRY", "PLAN")(clause))
      if (!allowed) fail(s"$op takes no $clause clause")
      if (
        (!seen.add(clause) && clause != "DOWNSTREAM") || (clause == "DRY" && seen("PLAN")) ||
        (clause == "PLAN" && seen("DRY"))
      )
        fail(s"$clause is given twice, or with another mode")
      st = clause match {
        case "CHECKPOINT" => st.copy(checkpoint = Some(str("the checkpoint path")))
        case "TO" => word("BATCH"); st.copy(toBatch = Some(num("the batch")))
        case "FORCE" => st.copy(force = true)
        case "WITH" => word("ROWS"); st.copy(withRows = true)
        case "CASCADE" => st.copy(cascade = true)
        case "DOWNSTREAM" => st.copy(downstream = st.downstream :+ str("the downstream"))
        case "COMPACT" =>
          word("INTERVAL")
          val n = num("the compact interval")
          if (n < 1 || n > Int.MaxValue) fail(s"COMPACT INTERVAL must be >= 1, not $n")
          st.copy(compactInterval = Some(n.toInt))
        case "OLDER" => word("THAN"); st.copy(olderThan = Some(str("the duration")))
        case "DRY" => word("RUN"); st.copy(mode = DryRun)
        case "PLAN" => st.copy(mode = Plan)
      }
    }
    if (st.downstream.nonEmpty && !st.cascade) fail("DOWNSTREAM needs CASCADE")
    grammar.needs.diff(seen).headOption.foreach { c =>
      fail(s"$op needs ${if (c == "TO") "TO BATCH <n>" else s"$c '<path>'"}")
    }
    st
  }

  private def show(t: Token): String = t match {
    case Word(w) => w
    case Str(s) => s"'$s'"
    case Num(n) => n.toString
  }

  /**
   * Words (upper-cased), quoted strings and whole numbers; SQL comments are skipped, and a `;` ends
   * the statement (only comments may follow it).
   */
  private def tokenize(sql: String): Seq[Token] = {
    val out = mutable.ArrayBuffer.empty[Token]
    val s = sql
    def bad(why: String): Nothing =
      throw BatchLogException.invalidArgument("statement", sql.trim, why)
    def blank(from: Int): Int = {
      val j = skipBlank(s, from)
      if (j < 0) bad("a comment opened with /* is not closed")
      j
    }
    var i = blank(0)
    while (i < s.length) {
      val c = s.charAt(i)
      if (c == ';') {
        if (blank(i + 1) < s.length) bad(s"text after the ';' at ${i + 1}: one statement at a time")
        i = s.length
      } else if (c == '\'' || c == '"') {
        val b = new StringBuilder
        i += 1
        while (i < s.length && s.charAt(i) != c) {
          if (s.charAt(i) == '\\' && i + 1 < s.length) i += 1
          b += s.charAt(i); i += 1
        }
        if (i >= s.length) bad(s"a string opened with $c is not closed")
        i = blank(i + 1)
        out += Str(b.toString)
      } else if (c.isDigit) {
        val start = i
        while (i < s.length && s.charAt(i).isDigit) i += 1
        out += Num(
          try s.substring(start, i).toLong
          catch { case _: NumberFormatException => bad(s"${s.substring(start, i)} is too large") }
        )
        i = blank(i)
      } else if (Character.isJavaIdentifierStart(c)) {
        val start = i
        while (i < s.length && Character.isJavaIdentifierPart(s.charAt(i))) i += 1
        out += Word(s.substring(start, i).toUpperCase(Locale.ROOT))
        i = blank(i)
      } else bad(s"unexpected character '$c' at ${i + 1}")
    }
    out.toSeq
  }
}
