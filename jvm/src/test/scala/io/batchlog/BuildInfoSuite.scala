package io.batchlog

import org.apache.spark.SPARK_VERSION
import org.scalatest.funsuite.AnyFunSuite

/** The jar knows the Spark line it is built for, and refuses another one, naming the right jar. */
class BuildInfoSuite extends AnyFunSuite {

  test("the build recorded this test run's Spark line and Scala version") {
    assert(BuildInfo.sparkLine === SPARK_VERSION.split('.').take(2).mkString("."))
    assert(BuildInfo.scalaBinary === scala.util.Properties.versionNumberString.split('.').take(2)
      .mkString("."))
    assert(BuildInfo.artifact === s"batchlog-spark-${BuildInfo.sparkLine}_${BuildInfo.scalaBinary}")
    assert(BuildInfo.version.matches("""\d+\.\d+\.\d+.*"""))
    BuildInfo.requireMatchingSpark() // the running Spark is the built one
  }

  test("the classes are bytecode for the line's Java release (Java 8 for Spark 3.5)") {
    val expected = Map(8 -> 52, 11 -> 55, 17 -> 61)(BuildInfo.javaRelease)
    Seq(BuildInfo.getClass, classOf[BatchTaggedCommitProtocol], classOf[log.CompactIndex])
      .foreach { c =>
        val in = c.getResourceAsStream("/" + c.getName.replace('.', '/') + ".class")
        val bytes =
          try Compat.readAllBytes(in)
          finally in.close()
        val major = ((bytes(6) & 0xff) << 8) | (bytes(7) & 0xff)
        assert(major === expected, c.getName)
      }
    if (BuildInfo.sparkLine == "3.5") assert(BuildInfo.javaRelease === 8)
  }

  test("another patch release of the line fits; another line or Scala does not") {
    val scala = s"${BuildInfo.scalaBinary}.99"
    assert(BuildInfo.mismatch(s"${BuildInfo.sparkLine}.99", scala) === None)
    val other = if (BuildInfo.sparkLine == "4.0") "4.1.4" else "4.0.5"
    val m = BuildInfo.mismatch(other, scala).getOrElse(fail("another line must not fit"))
    assert(m.contains(s"${BuildInfo.artifact}-${BuildInfo.version}.jar"))
    assert(m.contains(s"Spark $other"))
    val fix = s"batchlog-spark-${other.take(3)}_${BuildInfo.scalaBinary}"
    assert(m.contains(s"--packages io.batchlog:$fix:${BuildInfo.version}"))
    assert(BuildInfo.mismatch(s"${BuildInfo.sparkLine}.0", "2.11.12").isDefined)
  }
}
