package io.batchlog.log

/**
 * One hop of a cascade, as its intent records it: the query with checkpoint `checkpoint` (writing
 * the file sink `sink`, if any) rewound to `toBatch`, because its source `sourceIndex` (of `kind`)
 * read batch `upstreamFrom` or later of the sink `upstream` (None for the sink the cascade starts
 * from, depth 0). `registered`: found among the upstream's readers, not named by hand.
 */
final case class CascadeHopTarget(
    depth: Int,
    upstream: Option[String],
    upstreamFrom: Long,
    sourceIndex: Int,
    kind: String,
    registered: Boolean,
    sink: Option[String],
    checkpoint: String,
    toBatch: Long
)

/**
 * The one record of a pipeline rewind ([[io.batchlog.ops.Cascade]]), written in the `_batchlog/` of
 * the sink it starts from before anything else, removed before the hops' own rewind intents. It
 * fixes the hops: a re-run of the same cascade after a crash finishes exactly these, whatever the
 * readers' registrations say by then.
 */
final case class CascadeIntent(
    toBatch: Long,
    sink: String,
    checkpoint: String,
    hops: Seq[CascadeHopTarget],
    startedAtMs: Long
)

object CascadeIntent extends JsonRecordFile[CascadeIntent]("batchlog-cascade.json")
