package io.batchlog

import java.io.File
import java.nio.file.{Files, LinkOption}

import org.scalatest.funsuite.AnyFunSuite

/** Temporary directories for suites, with or without a session. */
trait TempDirs extends AnyFunSuite {

  /** Runs `f` with a fresh temporary directory and deletes it recursively afterwards. */
  protected def withTempDir[A](f: File => A): A = {
    val dir = Files.createTempDirectory("batchlog").toFile.getCanonicalFile
    try f(dir)
    finally deleteRecursively(dir)
  }

  /** Deletes `f` and all below it; a symbolic link is deleted itself, never followed. */
  protected def deleteRecursively(f: File): Unit = {
    if (Files.isDirectory(f.toPath, LinkOption.NOFOLLOW_LINKS)) {
      Option(f.listFiles()).foreach(_.foreach(deleteRecursively))
    }
    Files.deleteIfExists(f.toPath)
  }
}
