"""A SparkSession set up for batchpoint jobs on one machine or a small cluster."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from batchpoint.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Defaults sized for a small shared machine; every one can be overridden through `conf`.
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    # Keys hash to the same key group anywhere only if dates and times are read alike.
    "spark.sql.session.timeZone": "UTC",
    # Bound the Arrow batches shipped to Python workers by bytes as well as rows, so a
    # state with wide rows still streams in small pieces.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.sql.execution.arrow.maxBytesPerBatch": str(16 << 20),
    "spark.python.worker.faulthandler.enabled": "true",
}


def find_java() -> str:
    """The java binary Spark will start, or a ConfigError that says how to get one."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ConfigError(
            "Spark needs Java 17 and no 'java' is on PATH (nor in JAVA_HOME): "
            "install Debian's openjdk-17-jre-headless (apt-get install openjdk-17-jre-headless)"
        )
    return found


def _set_python_env() -> None:
    # Executors must run the interpreter that has batchpoint and pyarrow installed;
    # a bare `python3` from PATH usually has neither.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Without it Spark binds to whatever the hostname resolves to, which may be
    # unreachable in containers and sandboxes.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_session(
    app_name: str,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    *,
    log_level: str = "ERROR",
) -> SparkSession:
    """Get or create the process's SparkSession.

    As with SparkSession.builder.getOrCreate(), a session that is already running is
    returned as it is: `master` and static settings in `conf` then have no effect.
    Use ``local[N,F]`` as master to let a failed task be retried F-1 times in local
    mode (``local[N]`` never retries, whatever spark.task.maxFailures says).
    """
    find_java()
    _set_python_env()
    from pyspark.sql import SparkSession

    settings = {**DEFAULT_CONF, **(conf or {})}
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    started = time.monotonic()
    session = builder.getOrCreate()
    running = session.sparkContext.master
    if running != master:
        log.warning(
            "Spark session %r asked for master %s but the process already runs one on %s; "
            "using that",
            app_name,
            master,
            running,
        )
    session.sparkContext.setLogLevel(log_level)
    log.info("Spark session %r (%s) ready in %.1fs", app_name, master, time.monotonic() - started)
    return session
