"""Restores of bench_peer.py's engines, each timed in a fresh process: a new JVM, or a
Spark Connect client of a warm local server (batchpoint's default runtime). The parent
side (fresh_restore, warm_server_restore) starts ``bench_peer.py --restore-child``, whose
main calls the child side (restore_child): load an engine's whole state (batchpoint's
head, Structured Streaming's state store, or the cost curve's plain Parquet floor) and
print its row count. A sibling of the scripts, used by bench_peer and bench_cost_curve."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from peer_engines import TOTALS_DDL, read_batchpoint_state, read_streaming_state, spark_session

#: The script whose ``--restore-child`` runs restore_child in the fresh process.
ENTRY = Path(__file__).with_name("bench_peer.py")


def fresh_restore(
    engine: str, where: Path, remote: str = "", driver_memory: str | None = None
) -> tuple[float, int]:
    """Seconds for a new process (a new JVM, or a Connect client of `remote`) to load the
    whole state, and its row count. `engine`: bp, ss, or floor (a plain Parquet folder)."""
    started = time.perf_counter()
    child = [sys.executable, str(ENTRY), "--restore-child", engine, str(where)]
    child += [remote] if remote else []
    out = subprocess.run(
        child + (["--driver-memory", driver_memory] if driver_memory else []),
        check=True,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    return seconds, int(out.stdout.strip().splitlines()[-1])


def restore_child(
    engine: str, where: str, remote: str = "", driver_memory: str | None = None
) -> int:
    if remote:
        from batchpoint.spark.session import connect_session

        spark = connect_session(remote, "bench-peer-restore")
    else:
        spark = spark_session(driver_memory)
    if engine == "bp":
        df = read_batchpoint_state(spark, Path(where))
    elif engine == "floor":  # bench_cost_curve's plain Spark job: its state is Parquet
        df = spark.read.schema(TOTALS_DDL).parquet(where)
    else:
        df = read_streaming_state(spark, Path(where))
    print(df.count())
    return 0


def warm_server_restore(
    root: Path, workdir: Path, driver_memory: str | None = None
) -> tuple[float, int]:
    """batchpoint's restore in its default runtime: a fresh client process of a warm
    Spark Connect server (the second restore; the first one warms the server up)."""
    from devstack.spark_connect import SparkConnectServer

    conf = {"spark.sql.shuffle.partitions": "2"}
    if driver_memory:
        conf["spark.driver.memory"] = driver_memory
    with SparkConnectServer(workdir, master="local[2]", conf=conf) as server:
        fresh_restore("bp", root, server.url)
        return fresh_restore("bp", root, server.url)
