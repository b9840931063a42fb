package io.batchlog.log

import java.io.{ByteArrayOutputStream, IOException}
import java.net.{HttpURLConnection, URL, URLEncoder}
import java.nio.charset.StandardCharsets.UTF_8
import java.time.{Instant, ZoneOffset}
import java.time.format.DateTimeFormatter
import java.time.temporal.ChronoUnit
import java.util.{Base64, UUID}
import java.util.concurrent.{Callable, Executors, ThreadFactory}
import javax.crypto.Mac
import javax.crypto.spec.SecretKeySpec

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileAlreadyExistsException, FileStatus, FileSystem, Path}

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

import io.batchlog.shim.CheckpointFileManager

/**
 * Server-side compaction on Azure Blob Storage (`abfs://`, `abfss://`): the new compact file is a
 * block blob committed from blocks the store copies out of the previous compact file (Put Block
 * From URL, at most [[MaxBlockBytes]] each) and one block of new lines (Put Block), so only those
 * lines and the index pass through the driver ([[AppendUpload]]).
 *
 * Hadoop's ABFS driver sends none of these requests, so batchlog sends them itself, over HTTP, to
 * the Blob endpoint the driver uses (its Blob client's base URL), authorized by service SAS tokens
 * it signs with the account key the driver has (`fs.azure.account.key...`): one that may write the
 * new blob, one that may read the previous file. Only for an account whose driver authenticates
 * with that key (`SharedKey`); with OAuth, a SAS provider or a Hadoop without the Blob client
 * (before 3.5), compaction goes through the driver.
 *
 * Proof of the source: the previous file's status is checked against its proved index, as for
 * [[GcsCompose]], and every block copied from it carries `x-ms-source-if-match` with its ETag then:
 * a file replaced in between fails the copy (412), and the compaction runs on the client side.
 *
 * Publish once: the block list is committed with `If-None-Match: *`, so the store refuses it (409
 * or 412) if the compact file exists: Hadoop's `FileAlreadyExistsException`, settled by reading the
 * file back ([[PublishOutcome]]). A commit whose answer was lost is sent again, and that retry is
 * refused because the commit it retried was applied. Proved once per container by committing a
 * probe blob twice (the second must be refused) before any compact file relies on it.
 *
 * Blocks left uncommitted (a compaction killed, or refused) are not objects: no listing shows them,
 * and the store discards them when the blob is committed or after a week.
 */
private[batchlog] object AzureBlocks extends Logging {

  /** The most a Put Block From URL copies (its source range), in every API version. */
  val MaxBlockBytes: Long = 100L << 20

  /** The previous compact file is copied in blocks of this size (the last one shorter). */
  @volatile private[batchlog] var blockBytes: Long = MaxBlockBytes

  /** The REST API version of every request and SAS (the first with this SAS format). */
  private val ApiVersion = "2020-12-06"

  /** Blocks copied at once, at most. */
  @volatile private[batchlog] var copyThreads: Int = 8

  private object CopyThreads extends ThreadFactory {
    def newThread(r: Runnable): Thread = {
      val t = new Thread(r, "batchlog-block-copy")
      t.setDaemon(true)
      t
    }
  }

  /** What `inspect` says of compaction on such a store. */
  val Description: String =
    "server-side block copy (the previous compact file's ranges copied by the store, Put Block " +
      "From URL If-Match its ETag, and one block of new lines, committed with If-None-Match: *; " +
      "only new lines and the index through the driver)"

  private val AbfsClasses = Set(
    "org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem",
    "org.apache.hadoop.fs.azurebfs.SecureAzureBlobFileSystem"
  )

  /** The store-side block copy for compact file `file`, or why there is none. */
  def target(fm: CheckpointFileManager, file: Path): Either[String, AppendTarget] = {
    val scheme = Option(file.toUri.getScheme).getOrElse("")
    if (!ObjectStorePublish.applies(fm)) Left(s"the log is written by ${fm.getClass.getSimpleName}")
    else if (scheme != "abfs" && scheme != "abfss") Left("not Azure Blob storage")
    else
      SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession) match {
        case None => Left("no Spark session")
        case Some(spark) =>
          val fs =
            try file.getFileSystem(spark.sessionState.newHadoopConf())
            catch { case NonFatal(e) => return Left(s"no file system for $file: $e") }
          if (!AbfsClasses(fs.getClass.getName)) Left(s"${fs.getClass.getSimpleName} is not ABFS")
          else
            Blob.of(fs).flatMap { blob =>
              if (!canCommitOnce(fs, blob, file)) {
                Left("the store has no proved conditional commit (If-None-Match: *)")
              } else Right(new Target(fs, blob, fs.makeQualified(file)))
            }
      }
  }

  /** A compact file written by a block list. */
  final class Target private[AzureBlocks] (fs: FileSystem, blob: Blob, file: Path)
      extends AppendTarget(file) {
    protected def upload(prev: FileStatus): AppendUpload = new Upload(fs, blob, file, prev)
  }

  /** The previous compact file's ranges and a block of the new lines, committed. */
  final class Upload private[AzureBlocks] (fs: FileSystem, blob: Blob, file: Path, prev: FileStatus)
      extends AppendUpload(fs, file, prev) {
    protected def verb: String = "commit the block list of"

    protected def join(now: FileStatus, tail: ByteArrayOutputStream): Unit = {
      val dest = blob.nameOf(fs, file)
      val source = blob.nameOf(fs, prev.getPath)
      val etag = ObjectStoreCopy.etagOf(now)
      val run = UUID.randomUUID().toString
      def id(i: Int) = Base64.getEncoder.encodeToString(f"$run-$i%06d".getBytes(UTF_8))
      val ranges = (0L until prev.getLen by blockBytes).map { o =>
        (o, math.min(blockBytes, prev.getLen - o))
      }
      val pool =
        Executors.newFixedThreadPool(math.max(1, math.min(copyThreads, ranges.size)), CopyThreads)
      try {
        val copies = ranges.zipWithIndex.map { case ((o, l), i) =>
          pool.submit(new Callable[Unit] {
            def call(): Unit = blob.putBlockFromUrl(dest, id(i), source, o, l, etag)
          })
        }
        copies.foreach { f =>
          try f.get()
          catch {
            case e: java.util.concurrent.ExecutionException =>
              throw failed(s"the store did not copy a range of ${prev.getPath}", e.getCause)
          }
        }
      } finally pool.shutdownNow()
      ObjectStoreCopy.Stats.partsCopied.addAndGet(ranges.size.toLong)
      val ids = ranges.indices.map(id) ++ (if (tail.size > 0) Seq(id(ranges.size)) else Nil)
      if (tail.size > 0) {
        try blob.putBlock(dest, ids.last, tail.toByteArray)
        catch { case NonFatal(e) => throw failed("the store did not take the new lines", e) }
        ObjectStoreCopy.Stats.partsUploaded.incrementAndGet()
      }
      blob.commit(dest, ids) match {
        case Blob.Committed =>
        case Blob.Exists =>
          throw new FileAlreadyExistsException(
            s"$file exists: the store refused the block list (If-None-Match: *)"
          )
        case Blob.Failed(why, cause) => throw failed(why, cause)
      }
    }
  }

  /**
   * Whether the store refuses a second commit of one blob with `If-None-Match: *`: proved once per
   * container (its URL) by committing a probe blob beside `file` twice (the second must be
   * refused), kept as [[ObjectStorePublish.proved]] keeps every such proof.
   */
  private def canCommitOnce(fs: FileSystem, blob: Blob, file: Path): Boolean =
    ObjectStorePublish.proved(s"block list ${blob.base}") {
      val probe = new Path(file.getParent, s".batchlog-conditional-probe-${UUID.randomUUID()}")
      val name = blob.nameOf(fs, probe)
      val id = Base64.getEncoder.encodeToString("probe".getBytes(UTF_8))
      def once(): Blob.Outcome = {
        blob.putBlock(name, id, Array[Byte]('p')); blob.commit(name, Seq(id))
      }
      try {
        (once(), once()) match {
          case (Blob.Committed, second) =>
            val refused = second == Blob.Exists
            if (!refused) {
              logWarning(
                s"The store of $file accepted a second block list of one blob with " +
                  "If-None-Match: *: it ignores the condition. Compaction goes through the driver."
              )
            }
            Some(refused)
          case (first, _) =>
            logWarning(s"Could not probe conditional commits on the store of $file: $first")
            None
        }
      } catch {
        case NonFatal(e) =>
          logWarning(s"Could not probe conditional commits on the store of $file: $e")
          None
      } finally {
        try fs.delete(probe, false)
        catch { case NonFatal(_) => }
      }
    }.contains(true)

  /**
   * The Blob endpoint of one container, as ABFS reaches it (`base`: its Blob client's base URL,
   * `https://<account>.blob.core.windows.net/<container>` on Azure), and the account key that signs
   * the SAS tokens of its requests.
   */
  final class Blob private (val base: String, account: String, key: Array[Byte]) {
    val container: String = base.substring(base.lastIndexOf('/') + 1)

    /** The blob name of `p` in its container. */
    def nameOf(fs: FileSystem, p: Path): String =
      fs.makeQualified(p).toUri.getPath.stripPrefix("/")

    private def urlOf(name: String): String =
      base + "/" + name.split("/", -1).map(s => URLEncoder.encode(s, "UTF-8").replace("+", "%20"))
        .mkString("/")

    private def enc(s: String) = URLEncoder.encode(s, "UTF-8")

    /**
     * A service SAS for blob `name` with permissions `perms`, valid for two hours from now (no
     * start time: a store whose clock runs ahead of this one's still takes it). Signed as the REST
     * API's "Create a service SAS" says for version 2020-12-06: an HMAC-SHA256 with the account
     * key.
     */
    private[log] def sas(name: String, perms: String): String = {
      val expiry = DateTimeFormatter
        .ofPattern("yyyy-MM-dd'T'HH:mm:ss'Z'")
        .withZone(ZoneOffset.UTC)
        .format(Instant.now().plus(2, ChronoUnit.HOURS))
      val toSign = Seq(
        perms, // sp
        "", // st
        expiry, // se
        s"/blob/$account/$container/$name",
        "", // si
        "", // sip
        "", // spr
        ApiVersion, // sv
        "b", // sr
        "", // snapshot time
        "", // ses
        "",
        "",
        "",
        "",
        "" // rscc, rscd, rsce, rscl, rsct
      ).mkString("\n")
      val mac = Mac.getInstance("HmacSHA256")
      mac.init(new SecretKeySpec(key, "HmacSHA256"))
      val sig = Base64.getEncoder.encodeToString(mac.doFinal(toSign.getBytes(UTF_8)))
      s"sv=$ApiVersion&sr=b&sp=$perms&se=${enc(expiry)}&sig=${enc(sig)}"
    }

    /** Put Block From URL: bytes `[offset, offset + length)` of blob `source` as block `id`. */
    def putBlockFromUrl(
        dest: String,
        id: String,
        source: String,
        offset: Long,
        length: Long,
        etag: Option[String]
    ): Unit = {
      val headers = Seq(
        "x-ms-copy-source" -> s"${urlOf(source)}?${sas(source, "r")}",
        "x-ms-source-range" -> s"bytes=$offset-${offset + length - 1}"
      ) ++ etag.map("x-ms-source-if-match" -> _)
      val (status, body) = retried(s"?comp=block&blockid=${enc(id)}", dest, headers, Array.empty)
      if (status != 201) throw new IOException(s"Put Block From URL of $source: $status $body")
    }

    /** Put Block: `bytes` as block `id` of blob `dest`. */
    def putBlock(dest: String, id: String, bytes: Array[Byte]): Unit = {
      val (status, body) = retried(s"?comp=block&blockid=${enc(id)}", dest, Nil, bytes)
      if (status != 201) throw new IOException(s"Put Block of $dest: $status $body")
    }

    /**
     * Put Block List with `If-None-Match: *`: blob `dest` made of blocks `ids`, if it does not
     * exist. A request without an answer is sent again: the store refuses that retry if the first
     * was applied, and the caller reads the file back.
     */
    def commit(dest: String, ids: Seq[String]): Blob.Outcome = {
      val xml = ids.map(i => s"<Latest>$i</Latest>").mkString(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>",
        "",
        "</BlockList>"
      )
      val headers = Seq("If-None-Match" -> "*", "Content-Type" -> "application/xml")
      try retried("?comp=blocklist", dest, headers, xml.getBytes(UTF_8)) match {
          case (201, _) => Blob.Committed
          case (409 | 412, _) => Blob.Exists
          case (status, body) =>
            Blob.Failed(s"the store refused the block list: $status $body", null)
        }
      catch { case NonFatal(e) => Blob.Failed("the block list got no answer", e) }
    }

    /** A PUT to blob `name`, sent again (at most 3 times) on no answer or a 500/503. */
    private def retried(
        query: String,
        name: String,
        headers: Seq[(String, String)],
        body: Array[Byte]
    ): (Int, String) = {
      var attempt = 1
      while (true) {
        val answer =
          try Right(put(s"${urlOf(name)}$query&${sas(name, "w")}", headers, body))
          catch { case e: IOException => Left(e) }
        answer match {
          case Right((status, _)) if (status == 500 || status == 503) && attempt < 3 =>
          case Right(done) => return done
          case Left(e) if attempt >= 3 => throw e
          case Left(_) =>
        }
        Thread.sleep(200L * attempt)
        attempt += 1
      }
      throw new IllegalStateException("unreachable")
    }

    private def put(
        url: String,
        headers: Seq[(String, String)],
        body: Array[Byte]
    ): (Int, String) = {
      val conn = new URL(url).openConnection().asInstanceOf[HttpURLConnection]
      try {
        conn.setRequestMethod("PUT")
        conn.setConnectTimeout(30000)
        conn.setReadTimeout(120000)
        conn.setRequestProperty("x-ms-version", ApiVersion)
        headers.foreach { case (k, v) => conn.setRequestProperty(k, v) }
        conn.setDoOutput(true)
        conn.setFixedLengthStreamingMode(body.length)
        val out = conn.getOutputStream
        try out.write(body)
        finally out.close()
        val status = conn.getResponseCode
        val in = if (status >= 400) conn.getErrorStream else conn.getInputStream
        val text =
          if (in == null) ""
          else
            try new String(org.apache.commons.io.IOUtils.toByteArray(in), UTF_8).take(500)
            finally in.close()
        (status, text)
      } finally conn.disconnect()
    }
  }

  object Blob {
    sealed trait Outcome
    case object Committed extends Outcome
    case object Exists extends Outcome
    final case class Failed(why: String, cause: Throwable) extends Outcome

    /**
     * The Blob endpoint ABFS `fs` uses, with its account key, by reflection (this jar does not
     * depend on hadoop-azure): its store's Blob client (Hadoop 3.5+) and configuration.
     */
    def of(fs: FileSystem): Either[String, Blob] =
      try {
        val store = fs.getClass.getMethod("getAbfsStore").invoke(fs)
        val conf = store.getClass.getMethod("getAbfsConfiguration").invoke(store)
        val account = conf.getClass.getMethod("getAccountName").invoke(conf).toString
        val auth = conf.getClass.getMethod("getAuthType", classOf[String]).invoke(conf, account)
        if (String.valueOf(auth) != "SharedKey") {
          Left(s"ABFS authenticates by $auth here; batchlog signs store-side copies with a key")
        } else {
          val key = Base64.getDecoder.decode(
            conf.getClass.getMethod("getStorageAccountKey").invoke(conf).toString
          )
          val types = Class.forName(
            "org.apache.hadoop.fs.azurebfs.constants.AbfsServiceType",
            true,
            store.getClass.getClassLoader
          )
          val blobType = types.getMethod("valueOf", classOf[String]).invoke(null, "BLOB")
          val client = store.getClass.getMethod("getClient", types).invoke(store, blobType)
          if (client == null) Left("ABFS has no Blob endpoint client here")
          else {
            var cls: Class[_] = client.getClass
            while (
              cls != null && cls.getName != "org.apache.hadoop.fs.azurebfs.services.AbfsClient"
            ) {
              cls = cls.getSuperclass
            }
            val m = cls.getDeclaredMethod("getBaseUrl")
            m.setAccessible(true)
            val base = m.invoke(client).toString.stripSuffix("/")
            Right(new Blob(base, account.takeWhile(_ != '.'), key))
          }
        }
      } catch {
        case _: NoSuchMethodException | _: ClassNotFoundException | _: NullPointerException =>
          Left("this Hadoop's ABFS has no Blob endpoint client (Hadoop 3.5+)")
        case NonFatal(e) =>
          Left(s"ABFS's Blob endpoint is out of reach (${e.getClass.getSimpleName})")
        case e: LinkageError =>
          Left(s"ABFS's Blob endpoint is out of reach (${e.getClass.getName})")
      }
  }
}
