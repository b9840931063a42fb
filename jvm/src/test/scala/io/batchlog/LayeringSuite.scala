package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

/**
 * The layers of `io.batchlog` point one way: a file may use its own layer and those below it, never
 * one above. From the bottom:
 *
 * 0. foundation: `BatchLogConf`, `BatchLogException` (every key and every error, defined once),
 * `Compat` (what Java 8 and Scala 2.12 lack);
 *   1. the log format and what reads it: `log/` (entries, log files, compact index, lineage proof,
 *      truncation, layout, data file naming, the JSON records beside the log), `checkpoint/`
 *      (reading a query checkpoint); 2. the commit path: `commit/` (the writer guard),
 *      `BatchTaggedCommitProtocol`; 3. operations: `ops/` (reading by batch, rewind, takeover,
 *      adopt, read, verify, repair, vacuum, and their reports); 4. entry points: `BatchLog` (the
 *      public API) and `api/` (actions, the JSON serializer).
 *
 * Test code (fault injection, halting the JVM) lives in the test kit (`jvm/testkit`), never here.
 *
 * Read from the sources: an `import io.batchlog...` or a qualified `io.batchlog.x.Y` in code (not
 * in comments) names the layer it uses.
 */
class LayeringSuite extends AnyFunSuite {

  /** The main sources (tests run forked in `jvm/`; from the repository root too). */
  private val root = Seq("src/main/scala/io/batchlog", "jvm/src/main/scala/io/batchlog")
    .map(new File(_)).find(_.isDirectory).getOrElse(fail("io/batchlog main sources not found"))

  private def layerOf(rel: String): Int = rel match {
    case "BatchLogConf.scala" | "BatchLogException.scala" | "Compat.scala" |
        "BuildInfo.scala" => 0
    case r if r.startsWith("log/") || r.startsWith("checkpoint/") => 1
    case r if r.startsWith("commit/") || r == "BatchTaggedCommitProtocol.scala" => 2
    case r if r.startsWith("ops/") => 3
    case r if r.startsWith("api/") || r == "BatchLog.scala" => 4
    case r if r.startsWith("source/") || r.startsWith("sql/") => 4
    case other => fail(s"$other has no layer: add it to LayeringSuite and the README's layout")
  }

  /** The layer a reference `io.batchlog.<rest>` points at. */
  private def layerOfRef(rest: String): Int = rest.split('.').head match {
    case "BatchLogConf" | "BatchLogException" | "Compat" | "BuildInfo" | "shim" => 0
    case "log" | "checkpoint" => 1
    case "commit" | "BatchTaggedCommitProtocol" => 2
    case "ops" => 3
    case "api" | "BatchLog" | "source" | "sql" => 4
    case brace if brace.startsWith("{") =>
      brace.stripPrefix("{").split("[,}]").map(_.trim).filter(_.nonEmpty).map(layerOfRef).max
    case other => fail(s"io.batchlog.$other has no layer")
  }

  private val Ref = """\bio\.batchlog\.([A-Za-z{][\w.{}, ]*)""".r

  test("nothing below imports from above") {
    val files = Files.walk(root.toPath).iterator().asScala.filter(_.toString.endsWith(".scala"))
      .toSeq
    assert(files.nonEmpty, s"no sources under ${root.getAbsolutePath}")
    val violations = files.flatMap { f =>
      val rel = root.toPath.relativize(f).toString.replace(File.separatorChar, '/')
      val own = layerOf(rel)
      Files.readAllLines(f, UTF_8).asScala.zipWithIndex.flatMap { case (line, i) =>
        val code = line.trim
        if (code.startsWith("*") || code.startsWith("/*") || code.startsWith("//")) Nil
        else Ref.findAllMatchIn(code.takeWhile(_ != '/')).map(_.group(1)).filter { ref =>
          layerOfRef(ref) > own
        }.map(ref => s"$rel:${i + 1} (layer $own) uses io.batchlog.$ref").toSeq
      }
    }
    assert(violations.isEmpty, violations.mkString("\n", "\n", ""))
  }

  test("the product holds no test code: no faults package, no halting, no test keys") {
    assert(!new File(root, "faults").exists(), "io.batchlog.faults belongs in jvm/testkit")
    assert(!new File(root, "testkit").exists(), "io.batchlog.testkit belongs in jvm/testkit")
    val TestOnly = """(?i)\bhalt|spark\.batchlog\.test\.|io\.batchlog\.(testkit|faults)\b""".r
    val hits = Files.walk(root.toPath).iterator().asScala.filter(_.toString.endsWith(".scala"))
      .flatMap { f =>
        Files.readAllLines(f, UTF_8).asScala.zipWithIndex.collect {
          case (line, i) if TestOnly.findFirstIn(line).isDefined =>
            s"${root.toPath.relativize(f)}:${i + 1}: ${line.trim}"
        }
      }.toSeq
    assert(hits.isEmpty, hits.mkString("test code in the product:\n", "\n", ""))
  }

  test("Spark's moving streaming internals are named only in the shim") {
    // They moved packages between Spark 4.0 and 4.1; `jvm/src/main/spark-<layout>/` names them.
    val Moving =
      """org\.apache\.spark\.sql\.execution\.streaming\.(runtime|sinks|checkpointing)""".r
    val uses = Files.walk(root.toPath).iterator().asScala.filter(_.toString.endsWith(".scala"))
      .flatMap { f =>
        Files.readAllLines(f, UTF_8).asScala.zipWithIndex.collect {
          case (line, i) if Moving.findFirstIn(line).isDefined => s"$f:${i + 1}: ${line.trim}"
        }
      }.toSeq
    assert(uses.isEmpty, uses.mkString("import them from io.batchlog.shim:\n", "\n", ""))
  }
}
