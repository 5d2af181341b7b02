"""Spark Connect clients: a session on a Spark Connect server (joining the pipeline's
shared server session), and telling a server that cannot be reached, or went away, from
an operator's own error."""

from __future__ import annotations

import atexit
import contextlib
import logging
import re
import socket
import sys
import time
import uuid
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.storage.redaction import redact_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as RemoteSession

log = logging.getLogger(__name__)


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
            f"Spark Connect address '{redact_uri(remote)}' must start with sc:// (e.g. sc://127.0.0.1:15002)"
        )
    base, _, rest = remote.partition(";")
    _check_address(base, remote)
    params = {}
    for item in filter(None, rest.split(";")):
        key, _, value = item.partition("=")
        params[key] = value
    return base.rstrip("/"), params


def _check_address(base: str, remote: str) -> None:
    """A ConfigError (never a ValueError traceback, which reads as a crash a retry may
    get past) for an address pyspark's client could not parse: a port that is no
    number, an unclosed IPv6 bracket. The message shows the address without its token."""
    try:
        _ = urlparse(base).port  # what pyspark's client parses, and fails on
    except ValueError as exc:
        raise ConfigError(
            f"Spark Connect address '{redact_uri(remote)}' is malformed "
            f"({redact_uri(str(exc))}): use sc://host:port"
        ) from None


def pipeline_session_id(pipeline: str, remote: str) -> str:
    """The server session every client of `pipeline` on `remote` shares: its operators
    (each task of every epoch), its quality gate and audit, an attempt's interrupt.

    Spark keeps Python workers (and cached data) per session and never reaps those of a
    closed one, so one session per task would pile them up on a long-lived server. It
    also starts a Python worker daemon per session on each executor, at the session's
    first Python task: one session per pipeline starts one per executor, where a session
    per operator started one per operator, each loading pyarrow, numpy and boto3 (over a
    second of CPU each), all of them again after every restart of the server.

    A client must never stop() the session (that releases it for every other client,
    and the server refuses the id from then on: connect_session then moves to a
    successor id, the same one for every client). Clients that run side by side (the
    sinks of one level) share it safely: job tags are per thread (each attempt
    interrupts only its own tag) and every client sets the same settings, the pool
    among them (pipeline_pool)."""
    base, _ = _split_remote(remote)
    return str(uuid.uuid5(_SESSION_NAMESPACE, f"{base}|{pipeline}"))


#: The session setting that puts a session's jobs in a scheduler pool: Spark SQL passes
#: a session's `spark.*` settings to the jobs it runs as local properties, over Connect too.
POOL_SETTING = "spark.scheduler.pool"


def pipeline_pool(pipeline: str) -> str:
    """The FAIR scheduler pool of a pipeline's jobs: with the server in FAIR mode
    (spark.scheduler.mode), the pipelines that share a server share its cores instead
    of one's jobs waiting behind another's. A pool is a session setting, hence one per
    pipeline (its session's): a pool per operator in one shared session would be a race,
    the last client to set it moving the others' jobs into it. Pools are server-wide,
    hence batchpoint's prefix; an unknown pool is created on first use."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"batchpoint.{pipeline}")


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


#: gRPC statuses of an RPC that never reached the server or lost it (what pyspark raises
#: once its retries of a dead server are spent); else what an RPC error says in text.
_UNREACHABLE_STATUSES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")
_UNREACHABLE_TEXT = ("UNAVAILABLE", "Connection refused", "failed to connect", "RetriesExceeded")
_UNREACHABLE_TEXT += ("Socket closed", "connection reset")
#: What an error a Spark task raised carries (a Python worker's traceback, the JVM's name
#: for it, the scheduler's wrapper of a failed task): the server ran the task, so a
#: "Connection refused" in it is the task's own (a UDF's HTTP call), never the server's.
_RAISED_IN_TASK = ("Traceback (most recent call last)", "PythonException", "PYTHON_EXCEPTION")
_RAISED_IN_TASK += ("Job aborted due to stage failure",)
_STATUS_IN_TEXT = re.compile(r"StatusCode\.([A-Z_]+)")


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def raised_in_spark_task(exc: BaseException) -> bool:
    """Whether a Spark task on the server raised `exc` (_RAISED_IN_TASK), or what it was
    raised from; not an error it met while handling one (that outage is an outage)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if any(marker in f"{type(seen).__name__} {seen}" for marker in _RAISED_IN_TASK):
            return True
        seen = seen.__cause__
    return False


def _rpc_status(exc: BaseException) -> str | None:
    """The gRPC status name of the failed RPC; None if nothing in the chain carries one
    (UNKNOWN, pyspark's default, says nothing)."""
    for seen in _chain(exc):
        for getter in (getattr(seen, "getGrpcStatusCode", None), getattr(seen, "code", None)):
            with contextlib.suppress(Exception):
                name = getattr(getter(), "name", None) if callable(getter) else None
                if isinstance(name, str) and name != "UNKNOWN":
                    return name
        found = _STATUS_IN_TEXT.search(str(seen))
        if found and found.group(1) != "UNKNOWN":
            return found.group(1)
    return None


def _from_rpc(exc: BaseException) -> bool:
    names = [type(e).__name__ for e in _chain(exc)]
    return any("Grpc" in n or "Rpc" in n or n == "RetriesExceeded" for n in names)


def is_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the Connect server could not be reached (or went away): by the
    failed RPC's gRPC status, else by what an RPC error without one says. Never an error
    a Spark task raised (the server ran it), nor one no RPC raised (the operator's own
    code, refused by another service)."""
    if raised_in_spark_task(exc):
        return False
    status = _rpc_status(exc)
    if status is not None:
        return status in _UNREACHABLE_STATUSES
    text = f"{type(exc).__name__} {exc}"
    return _from_rpc(exc) and any(marker in text for marker in _UNREACHABLE_TEXT)


def server_answers(remote: str, timeout: float = 3.0) -> bool:
    """Whether anything accepts a connection at the server's address right now."""
    base, _ = _split_remote(remote)
    host, _, port = base.removeprefix("sc://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout):
            return True
    except (OSError, ValueError):
        return False


#: What a server says while it shuts down (it may still accept connections for a moment),
#: and what the client says once a restarted server answers in its place: the server
#: reports a new server-side session (SESSION_CHANGED), and pyspark closes the client,
#: whose every later call raises NO_ACTIVE_SESSION. The session, and the attempt on it,
#: are gone either way: a retry on a new session can complete the checkpoint.
_SHUTTING_DOWN = (
    "Cannot call methods on a stopped SparkContext",
    "SparkContext was shut down",
    "SparkContext has been shutdown",
    "INVALID_HANDLE.SESSION_CHANGED",
    "NO_ACTIVE_SESSION",
)


def server_went_away(remote: str, exc: BaseException, settle: float = 5.0) -> bool:
    """Whether a failed Spark operation failed because the server went away.

    A server killed mid-RPC surfaces as whatever the stream saw last (UNAVAILABLE,
    CANCELLED, INTERNAL with RST_STREAM, UNKNOWN, ...), and one stopping answers its last
    calls with errors of a stopped SparkContext, so the status alone cannot tell. An error
    that names no known marker counts if the server stops answering within `settle`
    seconds (a stopping JVM closes its port when it exits); one that keeps answering had
    a real error. An error a Spark task raised is the operator's, whatever it says."""
    if raised_in_spark_task(exc):
        return False
    text = f"{type(exc).__name__} {exc}"
    if is_unreachable(exc) or any(marker in text for marker in _SHUTTING_DOWN):
        return True
    if not _from_rpc(exc):
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
    session = _join(remote, params, wanted, settings)
    session._batchpoint_remote = base  # type: ignore[attr-defined]
    log.info(
        "Spark Connect session %s on %s (%s) ready in %.1fs",
        session.session_id,
        base,
        app_name,
        time.monotonic() - started,
    )
    return session


def _join(
    remote: str, params: Mapping[str, str], wanted: str, settings: Mapping[str, str]
) -> SparkSession:
    """Session `wanted` on the server, else the first of its successors the server has
    not closed, else a fresh one."""
    base, _ = _split_remote(remote)
    for _ in range(_MAX_SUCCESSORS + 1):
        session = _open_connect(base, params, wanted)
        try:
            # The first RPC: reaches the server, and learns whether it knows the id.
            _apply_conf(session, settings)
            return session
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
    fresh = str(uuid.uuid4())
    log.warning("Spark Connect sessions after %s are all closed; using %s", wanted, fresh)
    session = _open_connect(base, params, fresh)
    try:
        _apply_conf(session, settings)
    except Exception as exc:
        _drop(session)
        if isinstance(exc, ConfigError):
            raise
        raise unreachable_error(remote, exc) from None
    return session


def _apply_conf(session: SparkSession, settings: Mapping[str, str]) -> None:
    """Set the session's conf through the public API, one key at a time, so that a key
    the server refuses (a static setting, a bad value) is named in a ConfigError rather
    than silently ignored (what the builder's `config()` does over Connect). A server
    that cannot be reached, or closed the session, raises as it is."""
    for key, value in settings.items():
        try:
            session.conf.set(key, value)
        except Exception as exc:
            if _closed_session(exc) or is_unreachable(exc):
                raise
            raise ConfigError(
                f"Spark setting {key}: the server refused it: {_reason(exc)}"
            ) from None


def _open_connect(base: str, params: Mapping[str, str], session_id: str) -> SparkSession:
    """A client of session `session_id`, through pyspark's public builder (which also
    switches the process to Connect). No conf is given to the builder: it would set it in
    its first RPC, before the retry policy below applies (pyspark's default retries a
    dead server for over 10 minutes), and ignore a key the server refuses; `_apply_conf`
    sets it next."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    pairs = {**params, "session_id": session_id}
    url = ";".join([f"{base}/", *(f"{k}={v}" for k, v in pairs.items())])
    known = _clients.get((base, session_id))
    if known is not None and not known.is_stopped and not known.client.is_closed:
        return known  # type: ignore[return-value]
    active = RemoteSparkSession.getActiveSession()
    if active is not None and active.session_id == session_id and not active.is_stopped:
        return active  # type: ignore[return-value]
    # pyspark warns once its retries are spent; the caller gets SparkUnreachable instead.
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    try:
        session = SparkSession.builder.remote(url).create()
    except ValueError as exc:  # pyspark's parsing of what _check_address let through
        raise ConfigError(
            f"Spark Connect address '{redact_uri(url)}' is malformed: {redact_uri(str(exc))}"
        ) from None
    session.client.set_retry_policies([DefaultPolicy(**CONNECT_RETRY_POLICY)])  # type: ignore[attr-defined]
    if not _clients:
        atexit.register(_close_clients)
    _clients[(base, session_id)] = session  # type: ignore[assignment]
    return session


#: This process's clients, by (server, session id): a process that runs several
#: operators (the demo's in-process tasks) keeps one client, and one gRPC channel, per
#: pipeline session rather than a new one per task.
_clients: dict[tuple[str, str], RemoteSession] = {}


def _close_clients() -> None:
    """Close the clients' channels at exit, before the interpreter tears down: pyspark
    closes them in each session's __del__, and with more than one session alive that
    waits forever on a gRPC lock during interpreter shutdown."""
    for session in list(_clients.values()):
        with contextlib.suppress(Exception):
            session.client.close()
    _clients.clear()


def _drop(session: SparkSession) -> None:
    """Forget a client without releasing its server session (never stop() a shared one)."""
    session.release_session_on_close = False  # type: ignore[attr-defined]
    for key, known in list(_clients.items()):
        if known is session:
            del _clients[key]
    with contextlib.suppress(Exception):
        session.stop()


def classic_spark_running() -> bool:
    """Whether this process holds a classic Spark session (a JVM of its own), without
    importing pyspark when nothing did."""
    if "pyspark" not in sys.modules:
        return False
    import pyspark

    # pyspark-client (the `connect` extra) has no classic Spark, hence no SparkContext.
    context = getattr(pyspark, "SparkContext", None)
    return context is not None and context._active_spark_context is not None


def remote_of(spark: SparkSession) -> str:
    """The ``sc://host:port`` a session from connect_session talks to."""
    return str(getattr(spark, "_batchpoint_remote", "sc://(unknown)"))
