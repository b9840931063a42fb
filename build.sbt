// batchlog build: one jar per Spark line of project/spark-lines.tsv, from one source tree.
// BATCHLOG_SPARK_LINE selects the row (`4.0`, `3.5_2.13`; default: the primary line, 4.3). Spark is
// a provided dependency: on the compile and test class paths, never packaged. Lines whose Spark is
// not on Maven Central (4.3.0, 4.2.1, ...) compile and test against the jars their pyspark wheel
// ships (the Spark the Python tests run): `.venv` for the primary line, `.lines/<spark>/venv` for
// the others (dev/line installs it); SPARK_JARS_DIR overrides. `maven` rows use spark-sql from
// Maven Central (pyspark 3.5 ships only its Scala 2.12 build).

lazy val line: SparkLine =
  SparkLines.selected(file("project/spark-lines.tsv"), sys.env.get("BATCHLOG_SPARK_LINE"))

ThisBuild / organization := "io.batchlog"
// The version is said once, in python/pyproject.toml: the wheel and the jars carry the same one.
ThisBuild / version := {
  val toml = IO.read((ThisBuild / baseDirectory).value / "python" / "pyproject.toml")
  "(?m)^version = \"([^\"]+)\"".r.findFirstMatchIn(toml).map(_.group(1))
    .getOrElse(sys.error("python/pyproject.toml names no version"))
}
ThisBuild / versionScheme := Some("early-semver")

// What a registry (Maven Central) requires of every POM. The project's home is said once, in
// python/pyproject.toml's [project.urls]: the wheel and the POMs point at the same place.
lazy val projectHome: String = {
  val toml = IO.read(file("python/pyproject.toml"))
  "(?m)^Homepage = \"([^\"]+)\"".r.findFirstMatchIn(toml).map(_.group(1))
    .getOrElse(sys.error("python/pyproject.toml names no Homepage"))
}
ThisBuild / homepage := Some(url(projectHome))
ThisBuild / licenses := Seq("Apache-2.0" -> url("https://www.apache.org/licenses/LICENSE-2.0.txt"))
ThisBuild / scmInfo := Some(ScmInfo(url(projectHome), s"scm:git:$projectHome.git"))
ThisBuild / developers := List(
  Developer("batchlog", "The batchlog authors", "", url(projectHome))
)
// Must equal the scala-library the line's Spark ships.
ThisBuild / scalaVersion := line.scala

lazy val sparkJarsDir =
  settingKey[Option[File]](
    "Directory holding the line's Spark jars (pyspark/jars), for pyspark rows"
  )

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

lazy val packageLine =
  taskKey[File](
    "Copies the line's jar to dist/jars/batchlog-spark-<line>_<scala>.jar (dev/package)"
  )

/**
 * Compiler flags: bytecode for the line's Java release; the unused-import lint each Scala names.
 */
lazy val scalaOptions =
  Seq("-deprecation", "-feature", "-unchecked", "-release", line.java.toString) ++
    (if (line.scalaBinary == "2.12") Seq("-Ywarn-unused:imports") else Seq("-Wunused:imports"))

/**
 * Spark on the class path: the pyspark wheel's jars, or spark-sql from Maven Central. Provided
 * either way, and so is scala-library: the published POM names no dependency Spark already has, so
 * `spark-submit --packages` adds only our jar.
 */
lazy val sparkDependency = Seq(
  autoScalaLibrary := false,
  libraryDependencies += "org.scala-lang" % "scala-library" % scalaVersion.value % Provided,
  libraryDependencies ++= (if (line.jars == "maven")
                             Seq("org.apache.spark" %% "spark-sql" % line.spark % Provided)
                           else Nil),
  javacOptions ++= Seq("--release", line.java.toString),
  scalacOptions ++= scalaOptions,
  // Each line compiles into its own folder: switching lines never recompiles another's classes.
  target := baseDirectory.value / "target" / line.id
)

/**
 * The flags of every JVM the tests start (ScalaTest's fork here; pytest's Spark JVMs, the smokes
 * and Spark's own suites read the same file): the client compiler only and the serial collector.
 * Test JVMs live seconds to minutes on two cores, where C2's compiling and G1's concurrent threads
 * cost more CPU than they save: ScalaTest on 4.3 took 113 s of CPU with the JVM's defaults and 89 s
 * with these, in the same 77 s. Neither flag changes what Spark or batchlog does.
 */
lazy val testJvmOptions = IO.read(file("project/test-jvm-options")).trim.split("\\s+").toSeq

/** Forked ScalaTest runs with a local Spark, as the Python tests do. */
lazy val sparkTestSettings = Seq(
  libraryDependencies += "org.scalatest" %% "scalatest" % "3.2.19" % Test,
  Test / fork := true,
  Test / parallelExecution := false,
  Test / javaOptions ++= sparkJavaOptions ++ testJvmOptions ++
    Seq("-Xmx3g", "-Dspark.ui.enabled=false"),
  Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oD")
)

/**
 * The Spark internal layout the line has: `4.1` (Spark 4.1+: streaming internals in
 * `runtime`/`sinks`/`checkpointing`) or `3.5` (3.5, 4.0: the flat `streaming` package). Its shim,
 * `jvm/src/main/spark-<layout>/`, names those internals once (package `io.batchlog.shim`); the rest
 * of the code compiles against every layout.
 */
lazy val sparkLayout = settingKey[String]("Spark's internal layout: the shim directory to compile")

lazy val batchlog = (project in file("jvm"))
  .settings(
    name := s"batchlog-spark-${line.line}",
    moduleName := name.value, // keep the dot: batchlog-spark-4.3_2.13, not 4-3
    description := s"batchlog for Spark ${line.line}: a batch-tagged metadata log and commit " +
      "protocol for Structured Streaming's file sink (inspect, rewind, verify, repair by batch)",
    sparkLayout := line.layout,
    Compile / unmanagedSourceDirectories +=
      baseDirectory.value / "src" / "main" / s"spark-${sparkLayout.value}",
    Test / unmanagedSourceDirectories +=
      baseDirectory.value / "src" / "test" / s"spark-${sparkLayout.value}",
    sparkJarsDir := {
      val root = (ThisBuild / baseDirectory).value
      if (line.jars == "maven") None
      else
        Some(sys.env.get("SPARK_JARS_DIR").map(file).getOrElse {
          val venv = if (line.primary) root / ".venv" else root / ".lines" / line.spark / "venv"
          ((venv / "lib") * "python3*" / "site-packages" / "pyspark" / "jars").get.headOption
            .getOrElse(
              sys.error(
                s"Spark ${line.spark} jars not found under $venv: run " +
                  (if (line.primary) "dev/setup" else s"dev/line ${line.id} setup") +
                  " (installs pyspark==" + line.spark + ") or set SPARK_JARS_DIR"
              )
            )
        })
    },
    Compile / unmanagedJars ++= sparkJarsDir.value.toSeq.flatMap(d => (d * "*.jar").classpath),
    sparkDependency,
    // What the jar was built for; BatchLogBuild checks it against the running Spark.
    Compile / resourceGenerators += Def.task {
      val out = (Compile / resourceManaged).value / "io" / "batchlog" / "build.properties"
      IO.write(
        out,
        s"""version=${version.value}
           |sparkLine=${line.line}
           |spark=${line.spark}
           |scala=${line.scala}
           |java=${line.java}
           |""".stripMargin
      )
      Seq(out)
    }.taskValue,
    // The Maven coordinates io.batchlog:batchlog-spark-<line>_<scala>:<version>, published to a
    // Maven repository folder (dist/maven) that spark-submit --packages --repositories file://...
    // reads. With its sources and its Scaladoc (the -javadoc jar), as Maven Central requires:
    // dev/maven-check applies Central's rules to every artifact there.
    publishTo := Some(MavenCache(
      "batchlog-dist",
      (ThisBuild / baseDirectory).value / "dist" / "maven"
    )),
    Compile / packageDoc / publishArtifact := true,
    Test / packageDoc / publishArtifact := false, // it would follow Compile's (Test extends it)
    Compile / doc / scalacOptions ++= Seq("-doc-title", s"batchlog ${version.value}"),
    // dist/maven is this checkout's build output: a second `dev/line <line> jar` or `dev/package`
    // replaces the artifacts of the same version the first one wrote instead of failing on them.
    publishConfiguration := publishConfiguration.value.withOverwrite(true),
    sparkTestSettings,
    run / fork := true,
    run / javaOptions ++= sparkJavaOptions,
    // The Python package ships the jar; `batchlog.jar_path()` finds it there.
    copyJarToPython := {
      val jar = (Compile / packageBin).value
      val dest =
        baseDirectory.value / ".." / "python" / "batchlog" / "jars" / s"${line.artifact}.jar"
      IO.copyFile(jar, dest)
      dest
    },
    packageLine := {
      val jar = (Compile / packageBin).value
      val dest = (ThisBuild / baseDirectory).value / "dist" / "jars" / s"${line.artifact}.jar"
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
    sparkDependency,
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
    sparkDependency
  )

lazy val root = (project in file("."))
  .aggregate(batchlog, testkit, bench)
  .settings(publish / skip := true)
