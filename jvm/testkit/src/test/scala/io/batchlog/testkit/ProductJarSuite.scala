package io.batchlog.testkit

import java.io.File
import java.util.jar.JarFile

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

/**
 * The product jar (the one users get, `batchlog_2.13-<version>.jar`) holds none of the test kit.
 */
class ProductJarSuite extends AnyFunSuite {

  private val jar: File = Option(System.getProperty("batchlog.productJar")).map(new File(_))
    .getOrElse(fail("-Dbatchlog.productJar is unset: run this suite through sbt (testkit / test)"))

  test("the product jar has no test kit classes") {
    assert(jar.isFile, s"product jar not built: $jar")
    val jf = new JarFile(jar)
    val entries =
      try jf.entries().asScala.map(_.getName).toList
      finally jf.close()
    assert(entries.exists(_.startsWith("io/batchlog/ops/Rewind")), s"not the product jar: $jar")
    val testCode = entries.filter { e =>
      e.startsWith("io/batchlog/testkit/") || e.startsWith("io/batchlog/faults/") ||
      e.contains("FaultInjecting") || e.contains("HaltAfterRewindStep")
    }
    assert(testCode.isEmpty, testCode.mkString(s"test code in $jar:\n", "\n", ""))
  }
}
