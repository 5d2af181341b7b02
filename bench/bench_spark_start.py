"""How much the class-data archive (batchpoint.spark.fast_start) saves per Spark job.

    .venv/bin/python bench/bench_spark_start.py [--repeat 3]

Runs the same short PySpark job (a session, five small Arrow jobs through a Python
worker) with spark-submit, alternating plain JVM options and the fast-start ones with
the archive, and prints wall time per run and the ratio of the medians. Builds the
archive first if it is missing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from batchpoint.spark.fast_start import archive_path, build_archive, submit_args

JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
def passthrough(batches):
    yield from batches
for _ in range(5):
    spark.range(10000).repartition(2).mapInArrow(passthrough, "id long").collect()
spark.stop()
"""


def run(job: Path, extra: list[str]) -> float:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    argv = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    started = time.monotonic()
    subprocess.run([*argv, *extra, str(job)], env=env, check=True, capture_output=True)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not archive_path().is_file():
        print("building the archive ...", flush=True)
        build_archive()
    fast = shlex.split(submit_args())
    plain: list[str] = []
    times: dict[str, list[float]] = {"plain": [], "fast start": []}
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.py"
        job.write_text(JOB)
        for i in range(args.repeat):
            for name, extra in (("plain", plain), ("fast start", fast)):
                seconds = run(job, extra)
                times[name].append(seconds)
                print(f"run {i + 1} {name:<10} {seconds:5.1f}s", flush=True)
    base, quick = (statistics.median(times[k]) for k in ("plain", "fast start"))
    print(f"median: plain {base:.1f}s, fast start {quick:.1f}s: {quick / base:.2f}x the time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
