package io.batchlog.log

import java.io.{
  BufferedReader,
  BufferedWriter,
  FileNotFoundException,
  InputStream,
  InputStreamReader,
  OutputStreamWriter,
  Writer
}
import java.nio.charset.StandardCharsets.UTF_8

import org.apache.hadoop.fs.{FSDataInputStream, Path}

import io.batchlog.shim.CheckpointFileManager

import io.batchlog.BatchLogException

/**
 * Reading and writing log files (`v1` header, one entry per line) through a
 * `CheckpointFileManager`, so they work on any Hadoop file system. The one place that knows how a
 * log file is framed; [[LogFormat]] knows the lines.
 */
object LogFiles {

  /** Calls `fn(line, lineNo)` for each line after the `v1` header (line numbers from 2). */
  def readLines(in: InputStream, file: String)(fn: (String, Long) => Unit): Unit = {
    val r = new BufferedReader(new InputStreamReader(in, UTF_8), 1 << 16)
    val header = r.readLine()
    if (header != LogFormat.Header) throw BatchLogException.badHeader(file, header)
    var n = 1L
    var line = r.readLine()
    while (line != null) { n += 1; fn(line, n); line = r.readLine() }
  }

  /** The `v1` header as written, before the first entry line's `\n`. */
  val HeaderBytes: Array[Byte] = LogFormat.Header.getBytes(UTF_8)

  /**
   * Fails unless `file` starts with the `v1` header, given its first bytes (`n` of them read): what
   * a read through a compact file's index checks, since no run's CRC32C covers the header. Only
   * then is the whole first line read, for the error.
   */
  def requireHeader(first: Array[Byte], n: Int, fm: CheckpointFileManager, file: Path): Unit =
    if (
      n < HeaderBytes.length || !java.util.Arrays.equals(
        first.take(HeaderBytes.length),
        HeaderBytes
      )
    ) {
      throw BatchLogException.badHeader(file.toString, firstLine(fm, file, "its header is checked"))
    }

  /** The first line of `file` (null if it is empty); a missing file is said to be needed `why`. */
  def firstLine(fm: CheckpointFileManager, file: Path, why: => String): String = {
    val in = open(fm, file, why)
    try new BufferedReader(new InputStreamReader(in, UTF_8)).readLine()
    finally in.close()
  }

  /**
   * Receives the lines of [[readLineBytes]]: `line(bytes, from, to, lineNo, batch)` for each line
   * after the `v1` header, the line being `bytes[from, to)` (its terminator at `to`) and `batch`
   * its batch if the line was found canonical ([[LogFormat.CanonicalScan]]), else -1. The bytes
   * stay where they are until `beforeMove` is called: a handler may keep several lines and write
   * them as one stretch. (A class, not a function: nothing is boxed per line.)
   */
  abstract class LineHandler {
    def line(bytes: Array[Byte], from: Int, to: Int, lineNo: Long, batch: Long): Unit
    def beforeMove(): Unit = ()
  }

  /**
   * [[readLines]] without decoding. Lines end where `BufferedReader.readLine` ends them (`\n`, `\r`
   * or `\r\n`), so line numbers are the same. With `canonical`, each line is first scanned as a
   * canonical log line ([[LogFormat.CanonicalScan]]) in the same pass that finds its end: its bytes
   * are read once.
   */
  def readLineBytes(in: InputStream, file: String, canonical: Boolean)(h: LineHandler): Unit =
    new LineSplitter(in, file, if (canonical) new LogFormat.CanonicalScan() else null, h).run()

  /** [[readLineBytes]]'s state in fields, not in closure-captured (boxed) locals: a hot loop. */
  final private class LineSplitter(
      in: InputStream,
      file: String,
      scan: LogFormat.CanonicalScan,
      h: LineHandler
  ) {
    import LogFormat.CanonicalScan.NeedMore
    private var buf = new Array[Byte](1 << 16)
    private var start = 0 // the current line starts here
    private var end = 0 // bytes read so far
    private var eof = false
    private var lineNo = 0L // the header is line 1

    /** Reads more bytes (making room first); at the end of the stream sets `eof`. */
    private def fill(): Unit = {
      if (end == buf.length) {
        h.beforeMove()
        if (start > 0) {
          System.arraycopy(buf, start, buf, 0, end - start); end -= start; start = 0
        } else buf = java.util.Arrays.copyOf(buf, buf.length * 2)
      }
      var n = 0
      while (n == 0) n = in.read(buf, end, buf.length - end)
      if (n > 0) end += n else eof = true
    }

    private def isEnd(c: Byte): Boolean = c == '\n' || c == '\r'

    def run(): Unit = {
      var skipLf = false // the previous line ended with \r: a \n right after it ends nothing
      var searched = 0 // bytes of the current line, from `start`, that hold no line end
      while (true) {
        if (start == end && !eof) fill()
        else if (skipLf) {
          if (start < end && buf(start) == '\n') start += 1
          skipLf = false
        } else if (start == end) { // eof
          if (lineNo == 0) throw BatchLogException.badHeader(file, null)
          return
        } else {
          var to = -1
          var batch = -1L
          if (scan != null && lineNo > 0 && searched == 0) {
            val e = scan.scan(buf, start, end)
            if (e >= 0 && (if (e < end) isEnd(buf(e)) else eof)) { to = e; batch = scan.batchId }
            else if ((e == NeedMore || e == end) && !eof) searched = -1 // judge it on more bytes
          }
          if (searched < 0) { searched = 0; fill() }
          else {
            if (to < 0) {
              var i = start + searched
              while (i < end && !isEnd(buf(i))) i += 1
              if (i < end || eof) to = i
              else { searched = i - start; fill() }
            }
            if (to >= 0) {
              lineNo += 1
              if (lineNo == 1) {
                val header = new String(buf, start, to - start, UTF_8)
                if (header != LogFormat.Header) throw BatchLogException.badHeader(file, header)
              } else h.line(buf, start, to, lineNo, batch)
              searched = 0
              if (to < end) { skipLf = buf(to) == '\r'; start = to + 1 }
              else start = to
            }
          }
        }
      }
    }
  }

  def foreachLineBytes(fm: CheckpointFileManager, file: Path, why: => String, canonical: Boolean)(
      h: LineHandler
  ): Unit = {
    val in = open(fm, file, why)
    try readLineBytes(in, file.toString, canonical)(h)
    finally in.close()
  }

  /**
   * Opens `file` to read: on a local disk with Spark's default manager the file itself
   * ([[LocalPublish.open]]), else through `fm`. A missing file throws `FileNotFoundException`.
   */
  def open(fm: CheckpointFileManager, file: Path): FSDataInputStream =
    LocalPublish.open(fm, file).getOrElse(fm.open(file))

  /** Opens `file`; a missing file is a [[BatchLogException]] that says `why` it is needed. */
  def open(fm: CheckpointFileManager, file: Path, why: => String): FSDataInputStream =
    try open(fm, file)
    catch {
      case _: FileNotFoundException => throw BatchLogException.missingLogFile(file.toString, why)
    }

  def foreachLine(fm: CheckpointFileManager, file: Path, why: => String)(
      fn: (String, Long) => Unit
  ): Unit = {
    val in = open(fm, file, why)
    try readLines(in, file.toString)(fn)
    finally in.close()
  }

  /** The header and no entries yet; entries follow with [[writeLine]]. */
  def writer(out: java.io.OutputStream): Writer = {
    val w = new BufferedWriter(new OutputStreamWriter(out, UTF_8), 1 << 16)
    w.write(LogFormat.Header)
    w
  }

  def writeLine(w: Writer, line: String): Unit = { w.write('\n'); w.write(line) }

  /**
   * Writes `file` atomically (temp file + rename): readers see the old file or the whole new one,
   * never a part, and a crash leaves no partial file. With `overwrite` false an existing `file` is
   * Hadoop's `FileAlreadyExistsException` and nothing changes. The one atomic write of batchlog's
   * files (log files, compact indexes, the JSON records beside the log).
   */
  def publish(fm: CheckpointFileManager, file: Path, overwrite: Boolean)(
      fn: java.io.OutputStream => Unit
  ): Unit = {
    // On the local disk, without forking processes (see LocalPublish); on an object store, as one
    // upload (see ObjectStorePublish); elsewhere, the manager's way.
    val store =
      if (LocalPublish.applies(fm, file) || !ObjectStorePublish.applies(fm)) None
      else ObjectStorePublish.storeOf(file)
    store match {
      case Some(fs) if overwrite => ObjectStorePublish.publish(fs, file)(fn)
      case Some(fs) if ObjectStorePublish.canCreateOnce(fs, file) =>
        ObjectStorePublish.publishOnce(fs, file)(fn)
      case _ if LocalPublish.applies(fm, file) =>
        LocalPublish.publish(file, overwrite)(fn)(viaManager(fm, file, overwrite))
      case _ if !overwrite =>
        RenamePublish.target(fm, file) match {
          case Some(fs) => RenamePublish.publishOnce(fs, file)(fn)
          case None => viaManager(fm, file, overwrite)(fn)
        }
      case _ => viaManager(fm, file, overwrite)(fn)
    }
  }

  /**
   * Whether replacing `file` with `publish` (overwrite) may leave no file for an instant: Spark's
   * manager's rename with overwrite on a file system bound through `DelegateToFileSystem` that is
   * neither the local disk nor an object store publishing whole on close (ABFS) is a delete, then a
   * rename. A reader that finds no file there reads again before taking it for absent.
   */
  def replaceLeavesGap(fm: CheckpointFileManager, file: Path): Boolean =
    !LocalPublish.applies(fm, file) && ObjectStorePublish.applies(fm) &&
      ObjectStorePublish.storeOf(file).isEmpty && RenamePublish.target(fm, file).isDefined

  /** How `publish` writes a write-once file beside `file` with `fm` (what `inspect` reports). */
  def describeWriteOnce(fm: CheckpointFileManager, file: Path): String =
    if (LocalPublish.applies(fm, file)) "hard link of a temp file (local disk)"
    else if (!ObjectStorePublish.applies(fm)) {
      s"${fm.getClass.getSimpleName} (as set; temp file, then rename without overwrite)"
    } else
      ObjectStorePublish.storeOf(file) match {
        case Some(fs) => ObjectStorePublish.describe(fs, file)
        case None if RenamePublish.target(fm, file).isDefined =>
          "temp file, then FileSystem.rename without overwrite, its answer checked"
        case None => "CheckpointFileManager (temp file, then rename without overwrite)"
      }

  private def viaManager(fm: CheckpointFileManager, file: Path, overwrite: Boolean)(
      fn: java.io.OutputStream => Unit
  ): Unit = {
    val out = fm.createAtomic(file, overwriteIfPossible = overwrite)
    try {
      fn(out)
      out.close()
    } catch {
      case e: org.apache.hadoop.fs.FileAlreadyExistsException if !overwrite =>
        // The rename onto an existing file was refused, and Spark's stream keeps its temp file
        removeTempFiles(fm, file)
        throw e
      case e: Throwable => out.cancel(); throw e
    }
  }

  /**
   * Deletes the temp files of `file` that Spark's managers name `.<name>.<uuid>.tmp` (with a task
   * suffix sometimes) beside it: after a refused write-once publish, they are all doomed (the file
   * exists, and only a write that must not replace it ever writes a log file's name).
   */
  private def removeTempFiles(fm: CheckpointFileManager, file: Path): Unit = {
    val temp = ("\\." + java.util.regex.Pattern.quote(file.getName) +
      "\\.[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}(\\.TID[0-9]+)?\\.tmp").r.pattern
    fm.list(file.getParent, (p: Path) => temp.matcher(p.getName).matches())
      .foreach(st => fm.delete(st.getPath))
  }

  /** A log file (`v1` header, then what `fn` writes), published atomically ([[publish]]). */
  def writeAtomic(
      fm: CheckpointFileManager,
      file: Path,
      overwrite: Boolean
  )(fn: Writer => Unit): Unit =
    publish(fm, file, overwrite) { out =>
      val w = writer(out)
      fn(w)
      w.flush()
    }
}
