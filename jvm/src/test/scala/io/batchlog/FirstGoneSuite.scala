package io.batchlog

import scala.collection.mutable

import org.scalatest.funsuite.AnyFunSuite

import io.batchlog.commit.FileReaderGuard

/**
 * `FileReaderGuard.firstGone`: which upstream batch a rewind went back to, told by the files a
 * reader read (one of each batch, gone from the rewind's target on), with few existence checks.
 */
class FirstGoneSuite extends AnyFunSuite {

  private def firstGone(n: Int, from: Int): (Option[Int], Int) = {
    val asked = mutable.Set.empty[Int]
    val found = FileReaderGuard.firstGone(n, k => { asked += k; k >= from })
    (found, asked.size)
  }

  test("the first batch gone, whatever the depth of the rewind") {
    for (n <- Seq(1, 2, 3, 10, 1000); from <- 0 until n) {
      assert(firstGone(n, from)._1.contains(from), s"n=$n from=$from")
    }
  }

  test("none when the newest batch read is still there") {
    assert(firstGone(10, 10)._1.isEmpty)
    assert(firstGone(0, 0)._1.isEmpty)
  }

  test("a shallow rewind of a long history costs a few checks, a deep one a logarithm") {
    assert(firstGone(100000, 99998)._2 <= 4)
    assert(firstGone(100000, 3)._2 <= 2 * 17 + 2)
  }

  test("batches gone below the ones still there (retention) do not count") {
    val gone = (k: Int) => k < 5 || k >= 90
    assert(FileReaderGuard.firstGone(100, gone).contains(90))
  }
}
