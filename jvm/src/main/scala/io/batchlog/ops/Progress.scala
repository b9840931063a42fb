package io.batchlog.ops

/**
 * Progress of a long operation, printed to stderr (the terminal of the CLI or the PySpark driver):
 * at most one line every 2 seconds, and the last one.
 */
class Progress(what: String, quiet: Boolean = false) {
  @volatile private var lastPrintMs = System.currentTimeMillis()

  def step(done: Long, total: Long): Unit = {
    val now = System.currentTimeMillis()
    if (!quiet && (done == total || now - lastPrintMs >= 2000)) synchronized {
      if (done == total || now - lastPrintMs >= 2000) {
        lastPrintMs = now
        System.err.println(f"[batchlog] $what: $done%,d/$total%,d")
      }
    }
  }

  def note(msg: String): Unit = if (!quiet) System.err.println(s"[batchlog] $msg")
}
