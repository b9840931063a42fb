package io.batchlog

import java.io.ByteArrayInputStream
import java.nio.charset.StandardCharsets.UTF_8

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import io.batchlog.Compat._

/**
 * `Compat` gives the same results on every platform: the compact index written under Java 17 (the
 * JDK's CRC32C) must read back under Java 8 (Hadoop's pure-Java CRC32C), and the other way round.
 */
class CompatSuite extends AnyFunSuite {

  private def crc(c: java.util.zip.Checksum, bytes: Array[Byte], off: Int, len: Int): Long = {
    c.update(bytes, off, len)
    c.getValue
  }

  test("CRC32C: the standard check value, from both implementations") {
    val check = "123456789".getBytes(UTF_8)
    assert(crc(Compat.crc32c(), check, 0, check.length) === 0xe3069283L)
    assert(crc(Compat.pureJavaCrc32c(), check, 0, check.length) === 0xe3069283L)
  }

  test("CRC32C: the JDK's and Hadoop's agree on random runs, at any offset and length") {
    val rnd = new Random(11)
    (1 to 200).foreach { _ =>
      val bytes = new Array[Byte](rnd.nextInt(70000) + 1)
      rnd.nextBytes(bytes)
      val off = rnd.nextInt(bytes.length)
      val len = rnd.nextInt(bytes.length - off + 1)
      assert(
        crc(Compat.crc32c(), bytes, off, len) === crc(Compat.pureJavaCrc32c(), bytes, off, len)
      )
    }
  }

  test("updateChecksum of a heap or direct buffer equals the array update, and consumes it") {
    val rnd = new Random(5)
    (1 to 50).foreach { _ =>
      val bytes = new Array[Byte](rnd.nextInt(200000) + 1)
      rnd.nextBytes(bytes)
      val direct = java.nio.ByteBuffer.allocateDirect(bytes.length)
      direct.put(bytes).flip()
      for (c <- Seq(Compat.crc32c(), Compat.pureJavaCrc32c())) {
        val expected = crc(c, bytes, 0, bytes.length)
        for (buf <- Seq(java.nio.ByteBuffer.wrap(bytes), direct.duplicate())) {
          c.reset()
          Compat.updateChecksum(c, buf)
          assert(c.getValue === expected)
          assert(!buf.hasRemaining)
        }
      }
    }
  }

  test("readAllBytes reads past one buffer and leaves the stream open") {
    val bytes = Array.tabulate[Byte](200000)(i => (i % 251).toByte)
    val in = new ByteArrayInputStream(bytes)
    assert(Compat.readAllBytes(in).sameElements(bytes))
    assert(in.read() === -1)
  }

  test("firstOption takes one element, lazily") {
    var pulled = 0
    val it = Iterator.from(1).map { i => pulled += 1; i }
    assert(it.firstOption === Some(1))
    assert(pulled === 1)
    assert(Iterator[Int]().firstOption === None)
  }

  test("pid is this process's (Linux: /proc/self names it)") {
    val self = new java.io.File("/proc/self")
    assume(self.exists, "no /proc")
    assert(Compat.pid === self.getCanonicalFile.getName.toLong)
  }
}
