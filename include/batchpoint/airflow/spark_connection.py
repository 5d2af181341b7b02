"""The Spark endpoint of a task from an Airflow connection of the apache-spark provider's
types, read the way its hooks read them (the provider itself need not be installed):

* connect mode, a `spark_connect` connection (SparkConnectHook, default id
  `spark_connect_default`): host and port the server, login the `user_id`, password the
  `token`, extra `use_ssl`; the URL is built as `get_connection_url` builds it;
* submit mode, a `spark` connection (SparkSubmitHook, default id `spark_default`): host
  (and port) the master, as `spark://host:7077`, `yarn`, `k8s://https://...`, `local[4]`.

The connection is looked up when the task runs (never when the DAG is parsed);
BATCHPOINT_SPARK_REMOTE and BATCHPOINT_SPARK_MASTER are the fallback when it does not
exist. A connection's token only ever shows redacted (batchpoint.storage.redaction). The
operator tasks and the audit read it (task_spark_settings, spark_settings), so does a
restore's quality gate (gate_spark_settings) and the CLI given --spark-conn-id
(cli_spark_settings, where a missing connection is an error: nothing else names the
endpoint it asked for)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlparse, urlunparse

from batchpoint.airflow.compat import AirflowNotFoundException, BaseHook
from batchpoint.airflow.config import DEFAULT_SPARK_MODE
from batchpoint.airflow.storage_connection import connection_extra
from batchpoint.errors import ConfigError
from batchpoint.settings import Settings, SparkMode, read_environment
from batchpoint.settings.values import check_spark_master, check_spark_remote
from batchpoint.storage.redaction import redact_uri

log = logging.getLogger(__name__)

#: The provider's connection type and default connection id of each mode.
CONN_TYPES: dict[SparkMode, str] = {SparkMode.CONNECT: "spark_connect", SparkMode.SUBMIT: "spark"}
DEFAULT_CONN_IDS: dict[SparkMode, str] = {
    SparkMode.CONNECT: "spark_connect_default",
    SparkMode.SUBMIT: "spark_default",
}

GetConnection = Callable[[str], Any]


def connect_url(conn: Any, extra: Mapping[str, Any] | None = None) -> str:
    """`sc://host:port/;user_id=...;token=...;use_ssl=...` of a `spark_connect`
    connection, as the provider's SparkConnectHook.get_connection_url builds it (`extra`:
    the connection's, parsed; None: its extra_dejson)."""
    host = str(conn.host or "")
    scheme, sep, _ = host.partition("://")
    if sep and scheme.lower() != "sc":
        # Rewritten to sc:// it would be a plaintext channel, its token sent in the clear.
        raise ValueError(
            f"host {redact_uri(repr(host))} is not a Spark Connect address: give the host "
            "name (or sc://host), and extra use_ssl=true for TLS"
        )
    if not sep:
        host = f"sc://{host}"
    if conn.port:
        host = f"{host}:{conn.port}"
    url = urlparse(host)
    if url.path:
        raise ValueError(f"path {url.path!r} is not supported in a Spark Connect address")
    params = []
    if conn.login:
        params.append(f"user_id={quote(conn.login)}")
    if conn.password:
        params.append(f"token={quote(conn.password)}")
    use_ssl = (conn.extra_dejson if extra is None else extra).get("use_ssl")
    if use_ssl is not None:
        params.append(f"use_ssl={quote(str(use_ssl).lower())}")
    return urlunparse(("sc", url.netloc, "/", ";".join(params), "", ""))


def submit_master(conn: Any) -> str:
    """The master of a `spark` connection, as the provider's SparkSubmitHook reads it."""
    host = str(conn.host or "")
    return f"{host}:{conn.port}" if conn.port else host


def spark_settings(
    settings: Settings,
    mode: SparkMode | None,
    conn_id: str | None = None,
    get_connection: GetConnection = BaseHook.get_connection,
) -> Settings:
    """`settings` with the Spark endpoint of connection `conn_id` (None: the mode's
    default id), or as they are when no such connection exists (local mode has none)."""
    if mode not in CONN_TYPES:
        return settings
    conn_id = conn_id or DEFAULT_CONN_IDS[mode]
    try:
        conn = get_connection(conn_id)
    except AirflowNotFoundException:
        log.info("no Airflow connection '%s': the BATCHPOINT_SPARK_* variables apply", conn_id)
        return settings  # the BATCHPOINT_SPARK_* variables
    if conn.conn_type != CONN_TYPES[mode]:
        raise ConfigError(
            f"Airflow connection '{conn_id}' is of type '{conn.conn_type}': {mode} mode "
            f"needs a '{CONN_TYPES[mode]}' connection (the apache-spark provider's)"
        )
    if mode is SparkMode.CONNECT:
        extra = connection_extra(conn, conn_id)
        remote = _checked(conn_id, lambda: check_spark_remote(connect_url(conn, extra)))
        log.info("Spark Connect server from connection '%s': %s", conn_id, redact_uri(remote))
        return dataclasses.replace(settings, spark_remote=remote)
    master = _checked(conn_id, lambda: check_spark_master(submit_master(conn)))
    log.info("Spark master from connection '%s': %s", conn_id, redact_uri(master))
    return dataclasses.replace(settings, spark_master=master)


def task_spark_settings(
    settings: Settings,
    mode: SparkMode | None,
    conn_id: str | None,
    conf: Mapping[str, str] | None = None,
) -> Settings:
    """What an operator task's Spark job runs with: the endpoint of `conn_id` (see
    spark_settings) and the operator's `conf` over BATCHPOINT_SPARK_CONF. In connect mode
    a connection that does not exist, with no BATCHPOINT_SPARK_REMOTE to fall back on, is
    a ConfigError naming it (a typo in the id), not a task that fails later."""
    settings = spark_settings(settings, mode, conn_id)
    if mode is SparkMode.CONNECT and not settings.spark_remote:
        conn_id = conn_id or DEFAULT_CONN_IDS[mode]
        raise ConfigError(
            f"no Spark Connect server: Airflow connection '{conn_id}' not found and "
            f"BATCHPOINT_SPARK_REMOTE is not set: create a spark_connect connection "
            f"'{conn_id}', or fix the id (BATCHPOINT_SPARK_CONN_ID, the task's spark_conn_id)"
        )
    if conf:
        settings = dataclasses.replace(settings, spark_conf={**settings.spark_conf, **conf})
    return settings


def gate_spark_settings(settings: Settings, conn_id: str | None) -> Settings:
    """What Spark work a task starts by itself (a restore's quality gate) runs with: the
    deployment's mode (BATCHPOINT_SPARK_MODE, connect by default, as the operator tasks)
    and the endpoint of `conn_id` (None: BATCHPOINT_SPARK_CONN_ID, else the mode's
    default id; see spark_settings)."""
    mode = settings.spark_mode or DEFAULT_SPARK_MODE
    conn_id = conn_id or read_environment().spark_conn_id
    return spark_settings(dataclasses.replace(settings, spark_mode=mode), mode, conn_id)


#: The mode a connection type gives the CLI when BATCHPOINT_SPARK_MODE does not say.
MODE_OF_TYPE = {conn_type: mode for mode, conn_type in CONN_TYPES.items()}


def cli_spark_settings(
    settings: Settings, conn_id: str, get_connection: GetConnection = BaseHook.get_connection
) -> Settings:
    """`settings` with the Spark endpoint of connection `conn_id`, found as Airflow finds
    it outside a task (AIRFLOW_CONN_<ID>, then the configured secrets backends). The mode
    is BATCHPOINT_SPARK_MODE's, else the connection type's. Asked for by name, a missing
    connection is an error, not the variables' endpoint."""
    try:
        conn = get_connection(conn_id)
    except AirflowNotFoundException:
        raise ConfigError(
            f"Airflow connection '{conn_id}' not found (Airflow looked in "
            f"AIRFLOW_CONN_{conn_id.upper()} and its configured secrets backends)"
        ) from None
    mode = settings.spark_mode or MODE_OF_TYPE.get(conn.conn_type)
    if mode is SparkMode.LOCAL:
        raise ConfigError(
            f"Airflow connection '{conn_id}': BATCHPOINT_SPARK_MODE=local reaches no Spark "
            "endpoint (connect or submit mode does)"
        )
    if mode is None:
        raise ConfigError(
            f"Airflow connection '{conn_id}' is of type '{conn.conn_type}': the Spark "
            f"endpoint is a '{CONN_TYPES[SparkMode.CONNECT]}' or '{CONN_TYPES[SparkMode.SUBMIT]}' "
            "connection (the apache-spark provider's)"
        )
    found = dataclasses.replace(settings, spark_mode=mode)
    return spark_settings(found, mode, conn_id, lambda _conn_id: conn)


def _checked(conn_id: str, endpoint: Callable[[], str]) -> str:
    """The checked endpoint of connection `conn_id`, or a ConfigError naming it (and no
    token: the reason may quote the address)."""
    try:
        return endpoint()
    except ValueError as exc:
        raise ConfigError(f"Airflow connection '{conn_id}': {redact_uri(str(exc))}") from None
