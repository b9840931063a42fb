package io.batchlog

import org.scalatest.funsuite.AnyFunSuite

import io.batchlog.checkpoint.StrayBatches

/**
 * Which planned batches a fenced zombie left: ids above a gap in `offsets/` that reaches the sink's
 * latest batch; a hole below the sink's latest is not a zombie's (sparse logs, which a rewind
 * refuses). The heal itself runs end to end in `test_integrity_writers.py`.
 */
class StrayBatchesSuite extends AnyFunSuite {

  test("offsets planned in order have no gap and no strays") {
    assert(!StrayBatches.hasGap(Nil) && !StrayBatches.hasGap(Seq(3L, 4L, 5L)))
    assert(StrayBatches.plannedLatest(Nil, -1L) == -1L)
    assert(StrayBatches.plannedLatest(Seq(3L, 4L, 5L), 4L) == 5L)
  }

  test("a batch planned above a gap that reaches the sink's latest is a zombie's") {
    // a rewind to 2 kept offsets 0..2 (the sink at 1); the zombie planned its batch 4
    assert(StrayBatches.hasGap(Seq(0L, 1L, 2L, 4L)))
    assert(StrayBatches.plannedLatest(Seq(0L, 1L, 2L, 4L), 1L) == 2L)
    assert(StrayBatches.plannedLatest(Seq(0L, 1L, 2L, 4L, 5L), 2L) == 2L)
  }

  test("a hole below the sink's latest is not a zombie's: the last id stands") {
    assert(StrayBatches.plannedLatest(Seq(0L, 1L, 2L, 3L, 5L, 6L, 7L), 7L) == 7L)
  }
}
