"""A SparkSession set up for batchpoint jobs on one machine or a small cluster; the
Spark Connect client side is in connect.py (its names are re-exported here)."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from batchpoint.errors import ConfigError
from batchpoint.spark.connect import (
    CONNECT_RETRY_POLICY,
    CONNECT_SESSION_CONF,
    SparkUnreachable,
    classic_spark_running,
    connect_session,
    is_connect,
    is_unreachable,
    pipeline_session_id,
    remote_of,
    server_answers,
    server_went_away,
    successor_session_id,
    unreachable_error,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from batchpoint.settings import Settings

log = logging.getLogger(__name__)

#: Defaults sized for a small shared machine. Each applies only where nothing set the key
#: (spark-submit --conf, spark-defaults.conf, PYSPARK_SUBMIT_ARGS or `conf`).
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    # Keys hash to the same key group anywhere only if dates and times are read alike.
    "spark.sql.session.timeZone": "UTC",
    # Bound the Arrow batches shipped to Python workers by bytes as well as rows, so a
    # state with wide rows still streams in small pieces.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.sql.execution.arrow.maxBytesPerBatch": str(16 << 20),
    "spark.python.worker.faulthandler.enabled": "true",
}

#: Where a local driver listens, unless set: whatever the hostname resolves to may be
#: unreachable in containers and sandboxes. Never applied to a cluster master, whose
#: executors must reach the driver from other hosts.
LOCAL_DRIVER_CONF: dict[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}

DEFAULT_MASTER = "local[2]"

#: pyspark's Connect switch: set in a process once a Connect client runs there (see
#: `_open_connect`). A process started from it that must start its own driver (a
#: spark-submit or local job, the Connect server itself) must not inherit these.
CONNECT_CLIENT_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def defaults_for(master: str, is_set: Callable[[str], bool]) -> dict[str, str]:
    """The defaults to add for `master` where `is_set(key)` says nothing set the key."""
    out = {k: v for k, v in DEFAULT_CONF.items() if not is_set(k)}
    # The two go together: Spark binds to spark.driver.host when no bindAddress is set.
    if is_local(master) and not any(is_set(k) for k in LOCAL_DRIVER_CONF):
        out.update(LOCAL_DRIVER_CONF)
    return out


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


def _set_python_env(master: str | None) -> None:
    # Executors must run the interpreter that has batchpoint and pyarrow installed;
    # a bare `python3` from PATH usually has neither.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None or is_local(master):
        # Read by the JVM at start; see LOCAL_DRIVER_CONF.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


#: What pyspark's own `spark-submit pyspark-shell` (the JVM it starts when no launcher
#: did) fills in for a shell: nobody's choice, so not a setting that defaults must keep.
_SHELL_FILLED = ("spark.master", "spark.ui.showConsoleProgress")


def _launcher_settings(
    master: str | None, settings: Mapping[str, str]
) -> tuple[str, Callable[[str], bool]]:
    """The master to use and which keys the user set, read from the JVM's SparkConf."""
    from pyspark import SparkConf, SparkContext

    # Start the JVM (under spark-submit: connect to the launcher's) before building the
    # session, so that SparkConf() holds what the user gave; pyspark would start it the
    # same way in getOrCreate.
    SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(settings.items()))
    launched = SparkConf()
    external = getattr(SparkContext._gateway, "proc", None) is None
    if master is None:
        master = launched.get("spark.master", None) if external else None
    ignored = () if external else _SHELL_FILLED

    def given(key: str) -> bool:
        return launched.contains(key) and key not in ignored

    return master or DEFAULT_MASTER, given


def spark_session(
    app_name: str,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    *,
    log_level: str = "ERROR",
) -> SparkSession:
    """Get or create the process's SparkSession.

    Settings, strongest first: `master` and `conf`; what the launcher set (spark-submit's
    --master and --conf, spark-defaults.conf, PYSPARK_SUBMIT_ARGS); DEFAULT_CONF, and
    LOCAL_DRIVER_CONF for a local master. `master` None means spark-submit's --master
    when run by spark-submit, else local[2].

    As with SparkSession.builder.getOrCreate(), a session that is already running is
    returned as it is: `master` and static settings in `conf` then have no effect, and
    no default is applied over what it runs with. Use ``local[N,F]`` as master to let a
    failed task be retried F-1 times in local mode (``local[N]`` never retries, whatever
    spark.task.maxFailures says).

    A master of the form ``sc://host:port`` gives a Spark Connect client session instead
    (connect_session; no JVM here).
    """
    if master is not None and master.startswith("sc://"):
        return connect_session(master, app_name, conf=conf)
    find_java()
    _set_python_env(master)
    started = time.monotonic()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    settings = dict(conf or {})
    if SparkContext._active_spark_context is None:
        master, given = _launcher_settings(master, settings)
        settings = {**defaults_for(master, given), **settings}
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    running = session.sparkContext.master
    if master is not None and running != master:
        log.warning(
            "Spark session %r asked for master %s but the process already runs one on %s; "
            "using that",
            app_name,
            master,
            running,
        )
    session.sparkContext.setLogLevel(log_level)
    log.info("Spark session %r (%s) ready in %.1fs", app_name, running, time.monotonic() - started)
    return session


def session_here(app_name: str, pipeline: str, settings: Settings) -> SparkSession:
    """The Spark session for work that does not say which (a restore's quality gate): a
    classic one already running here; else, in connect mode, the pipeline's session on
    the Spark Connect server (one that cannot be reached raises SparkUnreachable); else
    a classic one on settings.spark_master; either with settings.spark_conf. A process
    whose tasks ran as Connect clients (ConnectLauncher) can hold no classic session any
    more, so it must not start one."""
    connected = "SPARK_CONNECT_MODE_ENABLED" in os.environ
    remote = settings.spark_remote
    from batchpoint.settings import SparkMode

    connect_mode = settings.spark_mode is SparkMode.CONNECT
    conf = settings.spark_conf
    if not classic_spark_running() and remote and (connect_mode or connected):
        session_id = pipeline_session_id(pipeline, remote)
        return connect_session(remote, app_name, session_id=session_id, conf=conf)
    if connected:
        raise ConfigError(
            "this process runs Spark Connect sessions; set BATCHPOINT_SPARK_REMOTE (and "
            "BATCHPOINT_SPARK_MODE=connect) for its other Spark work"
        )
    return spark_session(app_name, settings.spark_master, conf)


__all__ = [
    "CONNECT_CLIENT_VARIABLES",
    "CONNECT_RETRY_POLICY",
    "CONNECT_SESSION_CONF",
    "DEFAULT_CONF",
    "DEFAULT_MASTER",
    "LOCAL_DRIVER_CONF",
    "SparkUnreachable",
    "classic_spark_running",
    "connect_session",
    "defaults_for",
    "find_java",
    "is_connect",
    "is_local",
    "is_unreachable",
    "pipeline_session_id",
    "remote_of",
    "server_answers",
    "server_went_away",
    "session_here",
    "spark_session",
    "successor_session_id",
    "unreachable_error",
]
