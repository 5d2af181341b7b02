"""A warm-up job for a freshly started Spark Connect server: the code paths of an
operator's epoch run once, so that the first real epoch does not pay for them.

A fresh server's first epoch pays for loading and compiling the JVM classes of Arrow
batches to and from Python, a shuffle, whole-stage code generation and (given a scratch
folder that driver and executors share) the Parquet writer and reader, and for its
Python workers' imports. This job touches each: rows through `mapInArrow` and a grouped
`applyInArrow` (Python workers that import what an operator's tasks import), a shuffle,
a join, a Parquet write and a read back. Its jobs carry WARM_UP_TAG, so the server's job
list shows it ran.

Spark also keeps a Python worker daemon per server session on each executor (the
session's artifact id is in the workers' environment, and a daemon's environment is its
key), started at the session's first Python task: over a second of CPU each, since
batchpoint's daemon loads pyarrow, numpy and boto3 before it forks. Given pipelines, the
warm-up joins each pipeline's session (spark.connect.pipeline_session_id), the one its
operators use, with the pool its jobs use, and runs Python tasks there: the first epoch
finds the daemon of every executor running, and Python workers forked.

    python -m batchpoint.jobs.warm_up REMOTE [PIPELINE_REF ...] [--scratch DIR]
    python -m batchpoint.jobs.warm_up --remote-from-env [PIPELINE_REF ...] [--scratch DIR]

(the second reads REMOTE from BATCHPOINT_SPARK_REMOTE: a `;token=` in it stays out of `ps`)

It runs as a Connect client in a process of its own: a process that holds a classic
Spark session cannot open a Connect one (batchpoint.spark.connect). Its callers are the
servers' launchers, right after the server listens: batchpoint.jobs.connect_server (the
compose file's spark-connect service, after every restart) and devstack.spark_connect.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The job tag of every warm-up job (Connect prefixes it with the session's own tags).
WARM_UP_TAG = "batchpoint-warm-up"

_ROWS = 20_000


def _through_worker(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow body: loads what an operator's tasks load (a no-op in a worker
    forked from batchpoint's daemon, which loaded it already)."""
    from batchpoint.spark.worker_daemon import preload

    preload()
    yield from batches


def _fold(table: pa.Table) -> pa.Table:
    """The applyInArrow body: one key's rows as one row."""
    import pyarrow.compute as pc

    return pa.table({"key": table["key"][:1], "total": [pc.sum(table["value"]).as_py()]})


def warm_up(spark: SparkSession, scratch: Path | None = None) -> float:
    """Run the warm-up jobs on `spark`; returns the seconds they took. The Parquet round
    trip only with a `scratch` folder that the server's driver and executors share (one
    machine's: not a cluster's, whose state goes through S3 from the tasks themselves)."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    spark.addTag(WARM_UP_TAG)
    try:
        rows = spark.range(0, _ROWS, 1, 2).select(
            (F.col("id") % 101).cast("string").alias("key"), F.col("id").alias("value")
        )
        folded = (
            rows.mapInArrow(_through_worker, rows.schema)
            .groupBy("key")
            .applyInArrow(_fold, "key string, total long")
        )
        if scratch is not None:
            target = str(scratch / "warm-up.parquet")
            folded.write.mode("overwrite").parquet(target)
            folded = spark.read.parquet(target)
        fresh = rows.dropDuplicates(["key"]).join(folded, "key", "left_anti")
        fresh.groupBy().count().collect()
    finally:
        spark.removeTag(WARM_UP_TAG)
        if scratch is not None:
            shutil.rmtree(scratch / "warm-up.parquet", ignore_errors=True)
    return time.monotonic() - started


#: Python tasks per pipeline session: enough to reach every executor of a small cluster
#: (Spark hands a stage's tasks to the executors in turn). An executor it misses starts
#: its daemon at the session's first real task there.
_WARM_TASKS = 8


def pipeline_names(pipeline_refs: Sequence[str]) -> list[str]:
    """The names of the pipelines (each ref loaded: a bad one fails here, not later)."""
    from batchpoint.runtime.loader import load_pipeline

    return [load_pipeline(ref).name for ref in pipeline_refs]


def warm_session(remote: str, pipeline: str) -> None:
    """Join the pipeline's session as its operators' jobs do
    (jobs.run_operator.operator_session) and run Python tasks in it, so that the
    session's worker daemons and workers are up."""
    from batchpoint.jobs.run_operator import operator_session
    from batchpoint.settings import Settings

    spark = operator_session(pipeline, "warm-up", Settings.from_env(), remote)
    spark.addTag(WARM_UP_TAG)
    try:
        rows = spark.range(0, _WARM_TASKS, 1, _WARM_TASKS)
        rows.mapInArrow(_through_worker, rows.schema).collect()
    finally:
        spark.removeTag(WARM_UP_TAG)


def warm_sessions(remote: str, pipeline_refs: Sequence[str]) -> list[str]:
    """Warm the session of every pipeline (two at a time: each daemon's start is a second
    of one core). The sessions stay open: they are the operators' own."""
    names = pipeline_names(pipeline_refs)
    with ThreadPoolExecutor(max_workers=2) as pool:
        for done in [pool.submit(warm_session, remote, name) for name in names]:
            done.result()
    return names


#: Where `--remote-from-env` reads the server's address: its `;token=` stays off the
#: command line, which any user of the machine sees in `ps`.
REMOTE_VARIABLE = "BATCHPOINT_SPARK_REMOTE"


def arguments(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    """The command line read, `remote` taken from `env` given --remote-from-env (then
    every positional argument is a pipeline)."""
    parser = argparse.ArgumentParser(
        prog="python -m batchpoint.jobs.warm_up",
        description="Warm a freshly started Spark Connect server for batchpoint's jobs.",
    )
    parser.add_argument("remote", nargs="?", help="the server, sc://HOST:PORT")
    parser.add_argument(
        "pipelines", nargs="*", metavar="PIPELINE_REF", help="module:attribute of a pipeline"
    )
    parser.add_argument(
        "--remote-from-env",
        action="store_true",
        help=f"read the server's address from {REMOTE_VARIABLE}, not the command line",
    )
    parser.add_argument(
        "--scratch",
        type=Path,
        default=None,
        help="a folder the server's driver and executors share, for a Parquet round trip",
    )
    parser.add_argument(
        "--sessions-only",
        action="store_true",
        help="only open and warm the pipelines' sessions (no warm-up jobs)",
    )
    args = parser.parse_args(argv)
    if args.remote_from_env:
        args.pipelines = [args.remote, *args.pipelines] if args.remote else args.pipelines
        args.remote = env.get(REMOTE_VARIABLE, "").strip()
        if not args.remote:
            parser.error(f"--remote-from-env: {REMOTE_VARIABLE} is not set")
    elif not args.remote:
        parser.error("name the server, sc://HOST:PORT, or give --remote-from-env")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, os.environ)
    from batchpoint.spark.connect import connect_session

    if not args.sessions_only:
        spark = connect_session(args.remote, "warm-up")
        seconds = warm_up(spark, args.scratch)
        # The warm-up's own session goes: its workers are of no use to other sessions.
        spark.stop()
        print(f"warm-up jobs took {seconds:.1f}s", flush=True)
    if args.pipelines:
        started = time.monotonic()
        names = warm_sessions(args.remote, args.pipelines)
        print(
            f"warmed the session of {len(names)} pipeline(s) in "
            f"{time.monotonic() - started:.1f}s: {', '.join(names)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
