package io.batchlog.checkpoint

import org.apache.hadoop.fs.{FileStatus, Path}

import io.batchlog.BatchLogException
import io.batchlog.log.FileTree

/**
 * Which state store files a rewind to batch N removes. Batch N loads state version N and writes
 * N+1, so exact replay of N keeps versions <= N and deletes every version above: a stale
 * `V.snapshot` or `V.changelog` left behind is preferred on a later load and silently corrupts
 * state.
 *
 * Layout under `state/<operator>/`:
 *   - `<partition>/V.delta`, `V.snapshot` (HDFS-backed), `V.zip`, `V.changelog` (RocksDB, format
 *     v1), `V_<uuid>.zip` / `.changelog` (RocksDB, format v2): versioned, delete V > N;
 *   - `<partition>/SSTs/` (RocksDB shared files, referenced from the zips): kept, RocksDB's own
 *     maintenance drops unreferenced ones;
 *   - `_metadata/metadata` (operator metadata v1): written once, kept; `_metadata/v2/<batch>` and
 *     `_stateSchema/<cf>/<batch>_<uuid>` (TransformWithState): delete batch >= N.
 */
object StateFiles {

  val KnownProviders: Set[String] = Set(
    "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
  )

  val ProviderConfKey = "spark.sql.streaming.stateStore.providerClass"

  // RocksDB format v2 also keeps a `V_<uuid>.zip.crc` / `.changelog.crc` checksum file.
  private val Versioned =
    "([0-9]+)(?:_[0-9a-fA-F-]+)?\\.(?:delta|snapshot|zip|changelog)(?:\\.crc)?".r
  private val BatchNamed = "([0-9]+)(?:_[0-9a-fA-F-]+)?".r

  /** Files under `state/` that a rewind to `toBatch` must delete. */
  def toDelete(
      cp: QueryCheckpoint,
      toBatch: Long,
      provider: Option[String]
  ): Seq[FileStatus] = {
    if (!cp.fs.exists(cp.stateDir)) return Nil
    provider.filterNot(KnownProviders).foreach { p =>
      throw BatchLogException.unsupportedCheckpoint(
        cp.stateDir.toString,
        s"its state store provider $p is unknown to batchlog"
      )
    }
    val out = Seq.newBuilder[FileStatus]
    FileTree.foreachFile(cp.fs, cp.stateDir) { f =>
      if (mustDelete(relative(cp.stateDir, f.getPath), toBatch)) out += f
    }
    out.result()
  }

  /** `rel` is a path below `state/`, split into names. */
  def mustDelete(rel: Seq[String], toBatch: Long): Boolean = rel match {
    case Seq(_, part, Versioned(v)) if part != "_metadata" && part != "_stateSchema" =>
      v.toLong > toBatch
    case Seq(_, "_metadata", "v2", BatchNamed(b)) => b.toLong >= toBatch
    case Seq(_, "_stateSchema", _, BatchNamed(b)) => b.toLong >= toBatch
    case _ => false
  }

  private def relative(base: Path, p: Path): Seq[String] = {
    val names = List.newBuilder[String]
    var cur = p
    while (cur != null && cur.depth() > base.depth()) { names += cur.getName; cur = cur.getParent }
    names.result().reverse
  }
}
