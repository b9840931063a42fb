package io.batchlog

import java.io.InputStream
import java.lang.management.ManagementFactory
import java.util.zip.Checksum

import scala.util.Try

/**
 * What the oldest platform batchlog runs on lacks: Spark 3.5 runs on Java 8 and Scala 2.12, so the
 * shared sources use neither Java 9+ APIs nor Scala 2.13-only methods; the few they need are here,
 * once, with the same results on every platform.
 */
object Compat {

  private lazy val javaCrc32c: Option[java.lang.reflect.Constructor[_]] =
    Try(Class.forName("java.util.zip.CRC32C").getConstructor()).toOption

  /**
   * A CRC32C checksum: Java 9+'s `java.util.zip.CRC32C` (an intrinsic) where it exists, else
   * Hadoop's `PureJavaCrc32C` (on every Spark class path). Same polynomial, same values: the
   * compact index written on one Java is read on another (`CompatSuite` checks both against known
   * values).
   */
  def crc32c(): Checksum =
    javaCrc32c.map(_.newInstance().asInstanceOf[Checksum]).getOrElse(pureJavaCrc32c())

  /** Hadoop's pure-Java CRC32C (the Java 8 fallback of [[crc32c]]). */
  def pureJavaCrc32c(): Checksum = new org.apache.hadoop.util.PureJavaCrc32C()

  private lazy val checksumOfBuffer: Option[java.lang.reflect.Method] =
    Try(classOf[Checksum].getMethod("update", classOf[java.nio.ByteBuffer])).toOption

  /**
   * Updates `c` with the remaining bytes of `buf`, consuming them (Java 9's
   * `Checksum.update(ByteBuffer)`, which reads a direct or mapped buffer without copying it; on
   * Java 8 the bytes are copied to the heap in chunks).
   */
  def updateChecksum(c: Checksum, buf: java.nio.ByteBuffer): Unit = checksumOfBuffer match {
    case Some(m) => m.invoke(c, buf)
    case None =>
      val chunk = new Array[Byte](math.min(buf.remaining, 1 << 16))
      while (buf.hasRemaining) {
        val n = math.min(chunk.length, buf.remaining)
        buf.get(chunk, 0, n)
        c.update(chunk, 0, n)
      }
  }

  /** All the bytes of `in` (Java 9's `InputStream.readAllBytes`); does not close it. */
  def readAllBytes(in: InputStream): Array[Byte] = {
    val out = new java.io.ByteArrayOutputStream()
    val buf = new Array[Byte](64 * 1024)
    var n = in.read(buf)
    while (n >= 0) {
      out.write(buf, 0, n)
      n = in.read(buf)
    }
    out.toByteArray
  }

  /** This JVM's process id (Java 9's `ProcessHandle.current().pid()`); -1 if unknown. */
  lazy val pid: Long =
    Try(ManagementFactory.getRuntimeMXBean.getName.takeWhile(_ != '@').toLong).getOrElse(-1L)

  /** `it.firstOption`: the first element, if any, consuming one (2.13's `Iterator.nextOption`). */
  implicit final class IteratorCompat[A](private val it: Iterator[A]) extends AnyVal {
    def firstOption: Option[A] = if (it.hasNext) Some(it.next()) else None
  }
}
