"""spark-submit settings for short jobs on small data, where JVM start-up dominates.

An operator job of the demo does a few seconds of work inside twenty seconds of JVM
start, class loading and first-stage compilation. Three things cut that:

* a class-data sharing archive of the classes a PySpark job loads (JDK 17's dynamic
  AppCDS), built once per environment with `python -m batchpoint.spark.fast_start`
  (`./dev setup` does it), and again only when what it was built from changes (the
  JVM, Spark's jars, the JVM options: its stamp beside it): about a third off every job;
* the JVM's quick (C1) compiler only, and the serial collector;
* no adaptive query planning and two shuffle partitions.

A missing or stale archive is harmless: the JVM says so on stderr and starts without it
(a missing one silently).

The compose file's Spark Connect server and its executors map the archive the image
builds (docker/Dockerfile, `--archive`): a restarted server listens in about half the
time, and its first epoch loads fewer classes (docs/deploy.md). The archive does not
depend on the JVM's collector or compilers, only on the JVM and the class path: the
server's (spark-submit's) and the executors' (a worker's launch command) both match it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from batchpoint.settings.submit_options import spark_submit_program

JVM_OPTIONS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
SPARK_CONF = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "2"}

#: A job that loads what operator jobs load: a session, Arrow batches through a Python
#: worker, a shuffle.
_WARM_UP_JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
def passthrough(batches):
    yield from batches
spark.range(1000).repartition(2).mapInArrow(passthrough, "id long").groupBy().count().collect()
spark.stop()
"""


def archive_path() -> Path:
    """One archive per environment (it is only valid for this JDK and these jars)."""
    return Path(sys.prefix) / "share" / "batchpoint" / "spark-classes.jsa"


def stamp_path(archive: Path) -> Path:
    return archive.with_name(archive.name + ".stamp")


def archive_inputs() -> str:
    """What an archive is only valid for: this JVM, these jars (Spark's version), these
    JVM options, this Python (its workers)."""
    from importlib.metadata import PackageNotFoundError, version

    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    try:
        done = subprocess.run([java or "java", "-version"], capture_output=True, text=True)
        jvm = (done.stderr or done.stdout).strip()
    except OSError as exc:
        jvm = f"no java: {exc}"
    try:
        spark = version("pyspark")
    except PackageNotFoundError:
        spark = "none"
    return "\n".join(
        [jvm, f"pyspark {spark}", f"options {' '.join(JVM_OPTIONS)}", f"python {sys.version}"]
    )


def is_current(archive: Path) -> bool:
    """The archive exists and was built from what is installed now."""
    stamp = stamp_path(archive)
    return archive.is_file() and stamp.is_file() and stamp.read_text() == archive_inputs()


def submit_args(archive: Path | None = None) -> str:
    """Extra spark-submit arguments, shell syntax (BATCHPOINT_SPARK_SUBMIT_ARGS)."""
    archive = archive_path() if archive is None else archive
    jvm = list(JVM_OPTIONS)
    # spark-submit splits the driver's Java options at spaces, with no quoting.
    if archive.is_file() and " " not in str(archive):
        jvm.append(f"-XX:SharedArchiveFile={archive}")
    args = ["--driver-java-options", " ".join(jvm)]
    for key, value in SPARK_CONF.items():
        args += ["--conf", f"{key}={value}"]
    return shlex.join(args)


def build_archive(archive: Path | None = None) -> Path:
    """Run the warm-up job once with -XX:ArchiveClassesAtExit. Raises on failure."""
    archive = archive_path() if archive is None else archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    # Its own partial file: two builds at once (two set-ups) must not write into one.
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    spark_submit = spark_submit_program() or str(Path(sys.executable).parent / "spark-submit")
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "warm_up.py"
        job.write_text(_WARM_UP_JOB)
        jvm = [*JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={partial}", "-Xlog:cds=off"]
        done = subprocess.run(
            [
                spark_submit,
                "--master",
                "local[2]",
                "--driver-java-options",
                " ".join(jvm),
                "--conf",
                "spark.ui.enabled=false",
                str(job),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"building the class-data archive failed:\n{tail}")
    # Atomic: a concurrent job sees the old archive or the new one, never half of one.
    partial.replace(archive)
    stamp_path(archive).write_text(archive_inputs())
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchpoint.spark.fast_start",
        description="Build the class-data archive of Spark's classes for this environment.",
    )
    parser.add_argument("--rebuild", action="store_true", help="build it even if up to date")
    parser.add_argument(
        "--archive",
        type=Path,
        default=None,
        help="where (default: <prefix>/share/batchpoint/spark-classes.jsa); an image whose "
        "prefix its user cannot write names a folder of its own (docker/Dockerfile)",
    )
    args = parser.parse_args(argv)
    archive = archive_path() if args.archive is None else args.archive
    if is_current(archive) and not args.rebuild:
        print(f"Spark class-data archive: {archive} (up to date)")
        return 0
    started = time.monotonic()
    try:
        build_archive(archive)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        # Only a speed-up: say so and carry on without it.
        print(f"warning: no Spark class-data archive, jobs start slower: {exc}", file=sys.stderr)
        return 0
    size = archive.stat().st_size >> 20
    print(f"Spark class-data archive: {archive} ({size} MiB, {time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
