"""A SparkSession set up for batchpoint jobs on one machine or a small cluster."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from batchpoint.errors import BatchpointError, ConfigError

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


# -- Spark Connect ------------------------------------------------------------------------


class SparkUnreachable(BatchpointError):
    """The Spark Connect server could not be reached (down, wrong address, restarted)."""


#: Session settings a Connect client gives its session where `conf` does not: keys hash
#: to the same key group only if dates and times are read alike, and Arrow batches stay
#: small. Runtime SQL settings, so they apply per session on any server.
CONNECT_SESSION_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.sql.execution.arrow.maxBytesPerBatch": str(16 << 20),
}

#: How long a client keeps retrying a server that does not answer before it gives up
#: with SparkUnreachable: 50 ms growing 4x per try, at most 4 s apart, 6 tries (about
#: 12 s). pyspark's default retries for over 10 minutes, which turns a dead server into
#: a hung Airflow task.
CONNECT_RETRY_POLICY: dict[str, float | int] = {
    "max_retries": 6,
    "initial_backoff": 50,
    "backoff_multiplier": 4.0,
    "max_backoff": 4000,
}

_SESSION_NAMESPACE = uuid.UUID("6f1d6a8e-2d0b-5c39-9a57-6b0c2f4d8e11")
#: How many successors of a closed session id a client tries before a random one.
_MAX_SUCCESSORS = 8


def _split_remote(remote: str) -> tuple[str, dict[str, str]]:
    """``sc://host:port/;k=v;...`` as (``sc://host:port``, params)."""
    if not remote.startswith("sc://"):
        raise ConfigError(
            f"Spark Connect address '{remote}' must start with sc:// (e.g. sc://127.0.0.1:15002)"
        )
    base, _, rest = remote.partition(";")
    params = {}
    for item in filter(None, rest.split(";")):
        key, _, value = item.partition("=")
        params[key] = value
    return base.rstrip("/"), params


def pipeline_session_id(pipeline: str, remote: str) -> str:
    """The server session every client of `pipeline` on `remote` shares.

    Spark keeps Python workers (and cached data) per session and never reaps those of a
    closed one, so one session per task would pile them up on a long-lived server; one
    per pipeline keeps them bounded. A client must therefore never stop() the session
    (that releases it for every other client, and the server refuses the id from then
    on: connect_session then moves to a successor id, the same one for every client)."""
    base, _ = _split_remote(remote)
    return str(uuid.uuid5(_SESSION_NAMESPACE, f"{base}|{pipeline}"))


def successor_session_id(session_id: str) -> str:
    """The id clients move to when the server has closed `session_id`: deterministic, so
    that every client of a pipeline converges on the same new session."""
    return str(uuid.uuid5(_SESSION_NAMESPACE, f"after|{session_id}"))


def is_connect(spark: object) -> bool:
    """Whether `spark` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _reason(exc: BaseException) -> str:
    """One line out of a gRPC or pyspark error: the gRPC status details if any."""
    seen: BaseException | None = exc
    while seen is not None:
        details = getattr(seen, "details", None)
        if callable(details):
            with contextlib.suppress(Exception):
                text = str(details() or "")
                if text:
                    return " ".join(text.split())[:300]
        seen = seen.__cause__ or seen.__context__
    getter = getattr(exc, "getMessage", None)
    text = str(getter()) if callable(getter) else str(exc)
    return (" ".join(text.split()) or type(exc).__name__)[:300]


def _closed_session(exc: BaseException) -> bool:
    text = str(exc)
    return "SESSION_CLOSED" in text or "INVALID_HANDLE" in text


def is_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the Connect server could not be reached (or went away)."""
    text = f"{type(exc).__name__} {exc}"
    return any(
        marker in text
        for marker in (
            "UNAVAILABLE",
            "Connection refused",
            "failed to connect",
            "RetriesExceeded",
            "DEADLINE_EXCEEDED",
            "Socket closed",
            "connection reset",
        )
    )


def server_answers(remote: str, timeout: float = 3.0) -> bool:
    """Whether anything accepts a connection at the server's address right now."""
    base, _ = _split_remote(remote)
    host, _, port = base.removeprefix("sc://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout):
            return True
    except (OSError, ValueError):
        return False


#: What a server says while it shuts down (it may still accept connections for a moment).
_SHUTTING_DOWN = (
    "Cannot call methods on a stopped SparkContext",
    "SparkContext was shut down",
    "SparkContext has been shutdown",
)


def server_went_away(remote: str, exc: BaseException, settle: float = 5.0) -> bool:
    """Whether a failed Spark operation failed because the server went away.

    A server killed mid-RPC surfaces as whatever the stream saw last (UNAVAILABLE,
    CANCELLED, INTERNAL with RST_STREAM, UNKNOWN, ...), and one stopping answers its last
    calls with errors of a stopped SparkContext, so the status alone cannot tell. An error
    that names no known marker counts if the server stops answering within `settle`
    seconds (a stopping JVM closes its port when it exits); one that keeps answering had
    a real error."""
    text = f"{type(exc).__name__} {exc}"
    if is_unreachable(exc) or any(marker in text for marker in _SHUTTING_DOWN):
        return True
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    from_rpc = any("Grpc" in type(e).__name__ or "Rpc" in type(e).__name__ for e in chain)
    if not from_rpc:
        return False
    deadline = time.monotonic() + settle
    while server_answers(remote):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)
    return True


def unreachable_error(remote: str, exc: BaseException) -> SparkUnreachable:
    base, _ = _split_remote(remote)
    return SparkUnreachable(f"Spark Connect server at {base} is unreachable: {_reason(exc)}")


def connect_session(
    remote: str,
    app_name: str,
    *,
    session_id: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A Spark Connect client session on `remote` (``sc://host:port``).

    With `session_id` the client joins that server session (see pipeline_session_id);
    if the server has closed it, the client moves to its successor and logs it. The
    server is contacted before this returns: one that cannot be reached raises
    SparkUnreachable with one line. Never call stop() on a shared session.

    Classic and Connect sessions cannot be mixed in one Python process: pyspark routes
    `pyspark.sql.functions` to Connect for the rest of the process once this ran.
    """
    base, params = _split_remote(remote)
    if classic_spark_running():
        raise ConfigError(
            "this process runs a classic Spark session already; a Spark Connect session "
            "cannot be mixed with it in one Python process"
        )
    settings = {
        **{k: v for k, v in CONNECT_SESSION_CONF.items() if k not in (conf or {})},
        **(conf or {}),
    }
    wanted = session_id or params.pop("session_id", None) or str(uuid.uuid4())
    params.pop("session_id", None)
    params.setdefault("user_agent", re.sub(r"[^A-Za-z0-9_.-]", "_", f"batchpoint_{app_name}")[:200])
    started = time.monotonic()
    for _ in range(_MAX_SUCCESSORS + 1):
        session = _open_connect(base, params, wanted)
        try:
            # The first RPC: reaches the server, and learns whether it knows the id.
            session.conf._set_all(configs=settings, silent=False)
            break
        except Exception as exc:
            _drop(session)
            if _closed_session(exc):
                successor = successor_session_id(wanted)
                log.warning(
                    "Spark Connect server at %s has closed session %s; using %s instead",
                    base,
                    wanted,
                    successor,
                )
                wanted = successor
                continue
            if is_unreachable(exc):
                raise unreachable_error(remote, exc) from None
            raise
    else:
        fresh = str(uuid.uuid4())
        log.warning("Spark Connect sessions after %s are all closed; using %s", wanted, fresh)
        session = _open_connect(base, params, fresh)
        try:
            session.conf._set_all(configs=settings, silent=False)
        except Exception as exc:
            _drop(session)
            raise unreachable_error(remote, exc) from None
    session._batchpoint_remote = base  # type: ignore[attr-defined]
    log.info(
        "Spark Connect session %s on %s (%s) ready in %.1fs",
        session.session_id,
        base,
        app_name,
        time.monotonic() - started,
    )
    return session


def _open_connect(base: str, params: Mapping[str, str], session_id: str) -> SparkSession:
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    pairs = {**params, "session_id": session_id}
    url = ";".join([f"{base}/", *(f"{k}={v}" for k, v in pairs.items())])
    # What pyspark's builder.remote() does: from now on pyspark.sql.functions build
    # Connect expressions.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    active = RemoteSparkSession.getActiveSession()
    if active is not None and active.session_id == session_id and not active.is_stopped:
        return active  # type: ignore[return-value]
    # pyspark warns once its retries are spent; the caller gets SparkUnreachable instead.
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    session = RemoteSparkSession.builder.remote(url).create()
    session.client.set_retry_policies([DefaultPolicy(**CONNECT_RETRY_POLICY)])
    return session  # type: ignore[return-value]


def _drop(session: SparkSession) -> None:
    """Forget a client without releasing its server session (never stop() a shared one)."""
    session.release_session_on_close = False  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        session.stop()


def classic_spark_running() -> bool:
    """Whether this process holds a classic Spark session (a JVM of its own), without
    importing pyspark when nothing did."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def session_here(app_name: str, pipeline: str, settings: Settings) -> SparkSession:
    """The Spark session for work that does not say which (a restore's quality gate): a
    classic one already running here; else, in connect mode, the pipeline's session on
    the Spark Connect server (one that cannot be reached raises SparkUnreachable); else
    a classic one on settings.spark_master. A process whose tasks ran as Connect clients
    (ConnectLauncher) can hold no classic session any more, so it must not start one."""
    connected = "SPARK_CONNECT_MODE_ENABLED" in os.environ
    remote = settings.spark_remote
    if not classic_spark_running() and remote and (settings.spark_mode == "connect" or connected):
        return connect_session(remote, app_name, session_id=pipeline_session_id(pipeline, remote))
    if connected:
        raise ConfigError(
            "this process runs Spark Connect sessions; set BATCHPOINT_SPARK_REMOTE (and "
            "BATCHPOINT_SPARK_MODE=connect) for its other Spark work"
        )
    return spark_session(app_name, settings.spark_master)


def remote_of(spark: SparkSession) -> str:
    """The ``sc://host:port`` a session from connect_session talks to."""
    return str(getattr(spark, "_batchpoint_remote", "sc://(unknown)"))
