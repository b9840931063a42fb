import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * A single-node HDFS for batchlog's tests, in its own JVM: a MiniDFSCluster (one NameNode, one
 * DataNode) on loopback, its NameNode on the given free port, its data under the given directory.
 * Run with Java's source launcher on Spark's Hadoop client jars plus hadoop-client-minicluster:
 *
 *   java -cp '<pyspark>/jars/*:hadoop-client-minicluster-X.jar' MiniHdfs.java PORT DIR READY_FILE
 *
 * Writes the file system's URI to READY_FILE once the cluster is up (the test waits for it), then
 * runs until it is killed; the test that started it stops it by PID.
 */
public class MiniHdfs {
  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    File base = new File(args[1]);
    Path ready = Paths.get(args[2]);
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getAbsolutePath());
    conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
    conf.set("dfs.namenode.http-address", "127.0.0.1:0");
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.set("dfs.permissions.enabled", "false");
    conf.setLong("dfs.namenode.fs-limits.min-block-size", 1024);
    MiniDFSCluster cluster =
        new MiniDFSCluster.Builder(conf).nameNodePort(port).numDataNodes(1).format(true).build();
    cluster.waitActive();
    String uri = "hdfs://127.0.0.1:" + cluster.getNameNodePort();
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
    Path tmp = Paths.get(args[2] + ".tmp");
    Files.write(tmp, uri.getBytes("UTF-8"));
    Files.move(tmp, ready);
    System.out.println("MiniHdfs ready: " + uri);
    Thread.currentThread().join();
  }
}
