"""Storage settings from an Airflow AWS connection, resolved through the Amazon
provider's AwsBaseHook: static keys, a session token, an assumed role (`role_arn`, with
`assume_role_method` and `assume_role_kwargs`), a profile (`profile_name`), a custom
session factory, or the standard credential chain, exactly as every other AWS task in
the deployment resolves them.

The Spark jobs that a task starts do not repeat that resolution (they may run where no
profile file or role trust exists): the worker resolves once and hands them the
resulting short-lived credentials (key, secret, session token) in their BATCHPOINT_S3_*
environment.

What the connection may hold besides the AWS connection's own fields, so that the
`batchpoint_storage` connection of earlier versions keeps working: the endpoint in
`host` (with `port` and `schema`) as well as in extra `endpoint_url`; extra `root`
(s3://bucket/prefix or file:///path) and `region`.
"""

from __future__ import annotations

import json
import threading
from functools import cached_property
from typing import Any
from urllib.parse import urlparse

from batchpoint.errors import ConfigError
from batchpoint.settings import Settings
from batchpoint.settings.values import check_root
from batchpoint.storage.redaction import holds_credentials, redact_uri, scrub

# batchpoint's own extras.
_OWN_EXTRAS = {"root", "region"}
# The Amazon provider's AWS connection extras (its connection docs), so an existing AWS
# connection can be reused as it is.
_AWS_EXTRAS = {
    "endpoint_url",
    "region_name",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "role_arn",
    "assume_role_method",
    "assume_role_kwargs",
    "assume_role_with_saml",
    "assume_role_with_web_identity_federation",
    "assume_role_with_web_identity_federation_audience",
    "assume_role_with_web_identity_token_file",
    "profile_name",
    "config_kwargs",
    "service_config",
    "session_kwargs",
    "verify",
}
_KNOWN_EXTRAS = _OWN_EXTRAS | _AWS_EXTRAS
# Extras that say where credentials come from; without any, the environment's
# BATCHPOINT_S3_* keys (if set) win over the standard chain, as before.
_CREDENTIAL_EXTRAS = {
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "role_arn",
    "profile_name",
    "session_kwargs",
}
_CREDENTIAL_OPTIONS = ("access_key_id", "secret_access_key", "session_token", "profile")
_SECRET_EXTRAS = ("aws_secret_access_key", "aws_session_token")

# Resolved credentials per connection content, kept for the life of the process: a sensor
# pokes, a UI request or a trigger resolves the same connection again and again, and an
# assumed role must not cost an STS call each time. botocore refreshes them itself before
# they expire, so the keys handed out stay the same until then (and so does the store
# that StoreRef caches for them).
_RESOLVED: dict[str, Any] = {}
_RESOLVED_LOCK = threading.Lock()


def settings_from_connection(conn: Any, base: Settings, conn_id: str) -> Settings:
    """Storage settings from an Airflow connection (type aws): endpoint, region, root
    and credentials; whatever the connection leaves out comes from `base` (the
    environment). Credentials are resolved here, through AwsBaseHook, to the keys (and
    session token) the store and the Spark jobs sign with."""
    extra = connection_extra(conn, conn_id)
    unknown = sorted(set(extra) - _KNOWN_EXTRAS)
    if unknown:
        raise ConfigError(
            f"Airflow connection '{conn_id}': unknown extra field(s) {unknown} "
            f"(known: batchpoint's {', '.join(sorted(_OWN_EXTRAS))} and the AWS "
            "connection's own)"
        )
    if bool(conn.login) != bool(conn.password):
        raise ConfigError(
            f"Airflow connection '{conn_id}': login (access key id) and password "
            "(secret access key) must be given together"
        )
    root = _extra_root(extra, conn_id) or base.root
    options = dict(base.store_options)
    region = extra.get("region") or extra.get("region_name")
    if region:
        options["region"] = str(region)
    aws = _aws_hook(conn, conn_id, extra, options.get("region"))
    cache_key = json.dumps([conn_id, conn.login, conn.password, extra], sort_keys=True, default=str)
    if conn.host:
        options["endpoint_url"] = connection_url(conn, conn_id)
    elif endpoint := aws.conn_config.get_service_endpoint_url("s3"):
        options["endpoint_url"] = str(endpoint)
    names_credentials = bool(conn.login) or bool(_CREDENTIAL_EXTRAS & set(extra))
    if names_credentials or not options.get("access_key_id"):
        credentials = _resolve_credentials(aws, conn_id, extra, options.get("region"), cache_key)
        if credentials is not None:
            for name in _CREDENTIAL_OPTIONS:
                options.pop(name, None)
            options.update(credentials)
        elif names_credentials:
            raise ConfigError(
                f"Airflow connection '{conn_id}': it names credentials, but the AWS "
                "provider resolved none from it"
            )
    from batchpoint.storage.s3 import S3Settings

    try:
        S3Settings.from_options(options)
    except ConfigError as exc:
        raise ConfigError(f"Airflow connection '{conn_id}': {exc}") from None
    return base.with_storage(root, options)


def connection_extra(conn: Any, conn_id: str) -> dict[str, Any]:
    """A connection's extra as a dict. Read here, not only through `extra_dejson`:
    Airflow's logs an extra that is not JSON and returns {}, and a connection then
    quietly loses its root, endpoint or use_ssl."""
    raw = getattr(conn, "extra", None)
    if isinstance(raw, str) and raw.strip():
        try:
            parsed: Any = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise _not_an_object(conn_id)
    # extra_dejson as well: Airflow masks the values in task logs when it parses them.
    extra = conn.extra_dejson if raw is None or isinstance(raw, str) else raw
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        raise _not_an_object(conn_id)
    return dict(extra)


def _not_an_object(conn_id: str) -> ConfigError:
    # The extra is not quoted: it may hold keys.
    return ConfigError(
        f"Airflow connection '{conn_id}': extra is not a JSON object: write it as "
        '{"field": "value", ...}'
    )


def _extra_root(extra: dict[str, Any], conn_id: str) -> str | None:
    """The connection's extra root, checked as BATCHPOINT_ROOT is (None: not given)."""
    root = extra.get("root")
    if not root:
        return None
    if holds_credentials(str(root)):
        raise ConfigError(
            f"Airflow connection '{conn_id}': extra root holds credentials before '@' "
            "(refused, not shown): give the keys as the connection's login and password"
        )
    try:
        return check_root(root)
    except ValueError as exc:
        raise ConfigError(
            f"Airflow connection '{conn_id}': extra root={redact_uri(repr(str(root)))}: {exc}"
        ) from None


def _aws_hook(conn: Any, conn_id: str, extra: dict[str, Any], region: str | None) -> Any:
    """An AwsBaseHook over the connection already fetched (no second lookup): its
    session factory (the deployment's own, if one is configured) does the resolving."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from airflow.providers.amazon.aws.utils.connection_wrapper import AwsConnectionWrapper

    aws_extra = {k: v for k, v in extra.items() if k in _AWS_EXTRAS}
    # Our endpoint is S3's only: the provider would otherwise send STS (assume-role
    # excepted) and every other service there too.
    endpoint = aws_extra.pop("endpoint_url", None)
    if endpoint:
        services = dict(aws_extra.get("service_config") or {})
        services["s3"] = {"endpoint_url": endpoint, **services.get("s3", {})}
        aws_extra["service_config"] = services
    if region and "region_name" not in aws_extra:
        aws_extra["region_name"] = region
    try:
        wrapper = AwsConnectionWrapper.from_connection_metadata(
            conn_id=conn_id, login=conn.login, password=conn.password, extra=aws_extra
        )
    except (NotImplementedError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"Airflow connection '{conn_id}': {_scrubbed(exc, conn, extra)}"
        ) from None

    class _ConnectionHook(AwsBaseHook):
        @cached_property
        def conn_config(self) -> AwsConnectionWrapper:
            return wrapper

    return _ConnectionHook(aws_conn_id=conn_id, client_type="s3")


def _resolve_credentials(
    aws: Any, conn_id: str, extra: dict[str, Any], region: str | None, cache_key: str
) -> dict[str, str] | None:
    """Frozen credentials as store options, or None when the chain has none."""
    import botocore.exceptions as bce

    try:
        with _RESOLVED_LOCK:
            credentials = _RESOLVED.get(cache_key)
            if credentials is None:
                credentials = aws.get_session(region_name=region).get_credentials()
                if credentials is not None:
                    _RESOLVED[cache_key] = credentials
        frozen = credentials.get_frozen_credentials() if credentials is not None else None
    except (bce.BotoCoreError, bce.ClientError) as exc:
        raise ConfigError(
            f"Airflow connection '{conn_id}': could not get AWS credentials "
            f"{_source(extra)}: {_one_line(_scrubbed(exc, aws.conn_config, extra))}"
        ) from None
    if frozen is None:
        return None
    _mask(frozen.secret_key, frozen.token)
    options = {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key}
    if frozen.token:
        options["session_token"] = frozen.token
    return options


def _source(extra: dict[str, Any]) -> str:
    if extra.get("role_arn"):
        return f"by assuming role {extra['role_arn']}"
    if extra.get("profile_name"):
        return f"from profile '{extra['profile_name']}'"
    return "from the standard credential chain"


def _one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())


def _scrubbed(exc: BaseException, conn: Any, extra: dict[str, Any]) -> str:
    """An AWS library's message without the connection's secrets in it (`conn`: the
    Airflow connection or the provider's wrapper of it)."""
    secrets = [getattr(conn, name, None) for name in ("password", *_SECRET_EXTRAS)]
    return scrub(str(exc), [*secrets, *(extra.get(k) for k in _SECRET_EXTRAS)])


def _mask(*secrets: str | None) -> None:
    """Keep resolved secrets out of task logs, as the provider's own hooks do."""
    from airflow.sdk.log import mask_secret

    for secret in secrets:
        if secret:
            mask_secret(secret)


def connection_url(conn: Any, conn_id: str | None = None) -> str:
    """The base URL a connection's host, port and schema make (http by default)."""
    host = str(conn.host)
    if "://" not in host:
        host = f"{conn.schema or 'http'}://{host}"
    parsed = urlparse(host)
    name = conn_id or getattr(conn, "conn_id", None) or "?"
    try:
        port = parsed.port
    except ValueError:  # not a number, or out of 0-65535
        port = -1
    if port is not None:
        _check_port(port, name, f"host {redact_uri(repr(str(conn.host)))}")
    elif conn.port:
        port = _check_port(conn.port, name, f"port {conn.port!r}")
        name_only = str(parsed.hostname or "")
        bracketed = f"[{name_only}]" if ":" in name_only else name_only  # an IPv6 address
        host = f"{parsed.scheme}://{bracketed}:{port}{parsed.path}"
    return host.rstrip("/")


def _check_port(port: Any, conn_id: str, where: str) -> int:
    try:
        number = int(port)
    except (TypeError, ValueError):
        number = -1
    if not 0 < number < 65536:
        raise ConfigError(
            f"Airflow connection '{conn_id}': {where} has no valid port: "
            "use a number from 1 to 65535"
        )
    return number
