package io.batchlog

import java.io.File
import java.nio.file.Files

import org.scalatest.funsuite.AnyFunSuite

/** Temporary directories for suites, with or without a session. */
trait TempDirs extends AnyFunSuite {

  /** Runs `f` with a fresh temporary directory and deletes it recursively afterwards. */
  protected def withTempDir[A](f: File => A): A = {
    val dir = Files.createTempDirectory("batchlog").toFile.getCanonicalFile
    try f(dir)
    finally deleteRecursively(dir)
  }

  protected def deleteRecursively(f: File): Unit = {
    if (f.isDirectory) Option(f.listFiles()).foreach(_.foreach(deleteRecursively))
    if (f.exists() && !f.delete()) throw new java.io.IOException(s"Cannot delete $f")
  }
}
