// batchlog build. Spark 4.3.0 is not published to Maven Central; its jars ship inside
// pyspark==4.3.0 on PyPI, which dev/setup installs into .venv. We compile and test against
// exactly those jars (the Spark the Python tests run), as a provided dependency: they are on
// the compile and test class paths and never packaged. Override with SPARK_JARS_DIR.

ThisBuild / organization := "io.batchlog"
ThisBuild / version := "0.1.0"
// Must equal the scala-library pyspark 4.3.0 ships (jars/scala-library-2.13.18.jar).
ThisBuild / scalaVersion := "2.13.18"

lazy val sparkJarsDir = settingKey[File]("Directory holding Spark 4.3.0's jars (pyspark/jars)")

/** Spark's own JVM flags for Java 17 (org.apache.spark.launcher.JavaModuleOptions). */
lazy val sparkJavaOptions = Seq(
  "-XX:+IgnoreUnrecognizedVMOptions",
  "--add-modules=jdk.incubator.vector",
  "--add-opens=java.base/java.lang=ALL-UNNAMED",
  "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
  "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
  "--add-opens=java.base/java.io=ALL-UNNAMED",
  "--add-opens=java.base/java.net=ALL-UNNAMED",
  "--add-opens=java.base/java.nio=ALL-UNNAMED",
  "--add-opens=java.base/java.util=ALL-UNNAMED",
  "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
  "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
  "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
  "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
  "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
  "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
  "-Djdk.reflect.useDirectMethodHandle=false",
  "-Dio.netty.tryReflectionSetAccessible=true"
)

lazy val copyJarToPython = taskKey[File]("Copies the built jar into python/batchlog/jars/")
lazy val copyTestkitJar =
  taskKey[File]("Copies the test kit's jar to tests/jars/batchlog-testkit.jar (pytest uses it)")

lazy val scalaOptions =
  Seq("-deprecation", "-feature", "-unchecked", "-release:17", "-Wunused:imports")

/** Forked ScalaTest runs with a local Spark, as the Python tests do. */
lazy val sparkTestSettings = Seq(
  libraryDependencies += "org.scalatest" %% "scalatest" % "3.2.19" % Test,
  Test / fork := true,
  Test / parallelExecution := false,
  Test / javaOptions ++= sparkJavaOptions ++ Seq("-Xmx3g", "-Dspark.ui.enabled=false"),
  Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oD")
)

/**
 * The Spark internal layout the build targets: `4.1` (Spark 4.1, 4.2, 4.3: streaming internals in
 * `runtime`/`sinks`/`checkpointing`). Its shim, `jvm/src/main/spark-<layout>/`, names those
 * internals once (package `io.batchlog.shim`); the rest of the code compiles against any layout.
 */
lazy val sparkLayout = settingKey[String]("Spark's internal layout: the shim directory to compile")

lazy val batchlog = (project in file("jvm"))
  .settings(
    name := "batchlog",
    sparkLayout := sys.env.getOrElse("BATCHLOG_SPARK_LAYOUT", "4.1"),
    Compile / unmanagedSourceDirectories +=
      baseDirectory.value / "src" / "main" / s"spark-${sparkLayout.value}",
    Test / unmanagedSourceDirectories +=
      baseDirectory.value / "src" / "test" / s"spark-${sparkLayout.value}",
    sparkJarsDir := {
      sys.env.get("SPARK_JARS_DIR").map(file).getOrElse {
        val found = ((baseDirectory
          .value / ".." / ".venv" / "lib") * "python3*" / "site-packages" / "pyspark" / "jars").get
        found.headOption.getOrElse(
          sys.error(
            "Spark 4.3.0 jars not found: run dev/setup (installs pyspark==4.3.0 into .venv) or set SPARK_JARS_DIR"
          )
        )
      }
    },
    Compile / unmanagedJars ++= (sparkJarsDir.value * "*.jar").classpath,
    scalacOptions ++= scalaOptions,
    javacOptions ++= Seq("--release", "17"),
    sparkTestSettings,
    run / fork := true,
    run / javaOptions ++= sparkJavaOptions,
    // The Python package ships the jar; `batchlog.jar_path()` finds it there.
    copyJarToPython := {
      val jar = (Compile / packageBin).value
      val dest = baseDirectory.value / ".." / "python" / "batchlog" / "jars" / "batchlog.jar"
      IO.copyFile(jar, dest)
      dest
    }
  )

/**
 * Test-only code that must never ship in the product jar: the fault-injecting CheckpointFileManager
 * and the rewind step listener that halts the JVM. Its own tests include FaultInjectionSuite and
 * the check that the product jar holds none of it. pytest puts its jar (`copyTestkitJar`) on the
 * class path of the sessions that inject faults. Not published.
 */
lazy val testkit = (project in file("jvm/testkit"))
  .dependsOn(batchlog % "compile->compile;test->test") // tests share batchlog's test base
  .settings(
    name := "batchlog-testkit",
    Compile / unmanagedSourceDirectories +=
      baseDirectory.value / "src" / "main" / s"spark-${(batchlog / sparkLayout).value}",
    publish / skip := true,
    Compile / unmanagedJars ++= (batchlog / Compile / unmanagedJars).value,
    scalacOptions ++= scalaOptions,
    javacOptions ++= Seq("--release", "17"),
    sparkTestSettings,
    // ProductJarSuite inspects the product jar as users get it.
    Test / javaOptions += s"-Dbatchlog.productJar=${(batchlog / Compile / packageBin).value}",
    copyTestkitJar := {
      val jar = (Compile / packageBin).value
      val dest = (ThisBuild / baseDirectory).value / "tests" / "jars" / "batchlog-testkit.jar"
      IO.copyFile(jar, dest)
      dest
    }
  )

/** Side-by-side benchmarks of Spark's sink log and batchlog's (bench/run). Not packaged. */
lazy val bench = (project in file("bench"))
  .dependsOn(batchlog)
  .settings(
    name := "batchlog-bench",
    publish / skip := true,
    Compile / unmanagedJars ++= (batchlog / Compile / unmanagedJars).value,
    scalacOptions ++= Seq("-deprecation", "-feature", "-release:17")
  )

lazy val root = (project in file("."))
  .aggregate(batchlog, testkit, bench)
  .settings(publish / skip := true)
