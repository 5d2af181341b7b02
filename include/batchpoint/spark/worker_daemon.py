"""The Python worker daemon of a Spark Connect server that runs batchpoint's jobs (the
compose file's and devstack's): pyspark's own daemon, with the modules batchpoint's
Spark tasks import loaded once before it forks.

Spark forks every Python worker from one daemon per server session (Connect keeps the
workers of each session apart), and a fresh worker pays for its imports on its first
task: pyarrow, numpy, boto3 and batchpoint's state code, over a second of CPU on a small
machine, in every session's first epoch. Loaded here, each fork inherits them.

Set as ``spark.python.daemon.module=batchpoint.spark.worker_daemon`` (the compose
file's spark-connect service, devstack.spark_connect.DEFAULT_CONF). pyspark's daemon
forks, and a fork keeps only the forking thread: the only threads these imports start
are numpy's BLAS pool and pyarrow's jemalloc background thread, and both libraries
reset them in a forked child (pthread_atfork); their compute and I/O pools start on
first use, in the worker.
"""

from __future__ import annotations

import importlib

#: What an operator's Spark tasks import in a worker (the state readers and writers, the
#: source readers, the store clients), cheapest first so that a missing optional one
#: leaves the rest loaded.
PRELOAD = (
    "numpy",
    "pyarrow",
    "pyarrow.parquet",
    "pyarrow.compute",
    "pyspark.worker",
    "pyspark.sql.pandas.types",
    "batchpoint.storage",
    "batchpoint.state.format",
    "batchpoint.spark.state_writer",
    "batchpoint.spark.state_reader",
    "batchpoint.spark.keyed_io",
    "boto3",
    "botocore.session",
)


def preload() -> list[str]:
    """Import PRELOAD; returns what could not be imported (the daemon runs anyway: a
    worker that needs it fails on its own import, with its own traceback)."""
    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # a missing optional module costs only its warmth
            missing.append(name)
    return missing


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
