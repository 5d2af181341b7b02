"""How to reach an S3 service: `S3Settings`, built from string options (environment
variables, an Airflow connection, CLI flags) with one clear message per bad value.

The secret access key and the session token are Secrets, and so is any option whose
value came from `${VAR}`: messages and the repr show them masked (invariant 13)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlparse

from batchpoint.errors import ConfigError
from batchpoint.storage.redaction import CREDENTIAL_OPTIONS, REDACTED, Secret, mask_key, redact_uri

MiB = 1024 * 1024
MIN_PART = 5 * MiB  # S3 refuses smaller multipart parts (except the last one)
MAX_PART = 5 * 1024 * MiB
# botocore's retry modes: 'standard' (jittered exponential backoff and a retry quota
# that stops retrying against an endpoint that keeps failing) and 'adaptive' (the same
# plus client-side rate limiting once throttled). 'legacy' retries a different, older set
# of errors and is not offered.
RETRY_MODES = ("standard", "adaptive")
#: The longest connect or read timeout: an S3 request silent for an hour is hung, and a
#: larger value (a unit slip: milliseconds for seconds) overflows the socket's clock.
MAX_TIMEOUT = 3600.0

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": MiB, "g": 1024 * MiB}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True, repr=False)
class S3Settings:
    """How to reach the S3 service. `None` means "let boto3 decide": AWS_ENDPOINT_URL,
    AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/config and the other standard sources."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: Secret | None = None
    # Short-lived credentials (an assumed role, SSO) come as key, secret and this token.
    session_token: Secret | None = None
    profile: str | None = None
    retry_mode: str = "standard"
    # Counts the first try: 1 means no retry at all.
    max_attempts: int = 5
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    multipart_threshold: int = 64 * MiB
    multipart_chunksize: int = 16 * MiB
    # 'path' | 'virtual' | 'auto'; None picks 'path' for a custom endpoint (S3-compatible
    # servers rarely have wildcard DNS for bucket subdomains) and 'auto' for AWS.
    addressing_style: str | None = None
    # Check once per process and endpoint, before the first conditional write, that the
    # endpoint honours If-None-Match and If-Match (see batchpoint.storage.probe).
    probe_conditional_writes: bool = True
    #: The options whose value came from `${VAR}`: shown masked, like the credentials.
    redacted: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        for name in CREDENTIAL_OPTIONS:  # given as plain text: a Secret all the same
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, Secret(value) if value else None)
        if self.endpoint_url is not None:
            parsed = urlparse(self.endpoint_url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ConfigError(
                    f"S3 option endpoint_url='{self.shown('endpoint_url')}' is not an http(s) "
                    "URL (expected e.g. http://127.0.0.1:8333)"
                )
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise ConfigError(
                "S3 options access_key_id and secret_access_key must be given together"
            )
        if self.session_token and not self.access_key_id:
            raise ConfigError(
                "S3 option session_token needs access_key_id and secret_access_key with it"
            )
        if self.profile and self.access_key_id:
            raise ConfigError(
                "S3 options: give either profile or access_key_id/secret_access_key, not both"
            )
        if self.retry_mode not in RETRY_MODES:
            raise ConfigError(
                f"S3 option retry_mode='{self.shown('retry_mode')}' must be one of "
                f"{', '.join(RETRY_MODES)}"
            )
        if self.max_attempts < 1:
            raise ConfigError(
                f"S3 option max_attempts={self.shown('max_attempts')} must be at least 1"
            )
        for name in ("connect_timeout", "read_timeout"):
            self._check_timeout(name)
        if self.multipart_threshold < 1:
            raise ConfigError(
                f"S3 option multipart_threshold={self.shown('multipart_threshold')} "
                "must be positive"
            )
        if not MIN_PART <= self.multipart_chunksize <= MAX_PART:
            raise ConfigError(
                f"S3 option multipart_chunksize={self.shown('multipart_chunksize')} must be "
                f"between 5 MiB ({MIN_PART}) and 5 GiB ({MAX_PART}): S3 refuses other part sizes"
            )
        if self.addressing_style not in (None, "path", "virtual", "auto"):
            raise ConfigError(
                f"S3 option addressing_style='{self.shown('addressing_style')}' must be one "
                "of path, virtual, auto"
            )

    def _check_timeout(self, name: str) -> None:
        seconds = getattr(self, name)
        if seconds <= 0:
            raise ConfigError(f"S3 option {name}={self.shown(name)} must be positive")
        # nan passes `<= 0`, and nan, inf or 1e12 fail only in the first socket.
        if not seconds <= MAX_TIMEOUT:
            raise ConfigError(
                f"S3 option {name}={self.shown(name)} is not a finite number of seconds up "
                f"to {MAX_TIMEOUT:.0f} (an hour)"
            )

    def shown(self, name: str) -> str:
        """An option's value as a message or the repr may show it."""
        value = getattr(self, name)
        if value is not None and (name in self.redacted or isinstance(value, Secret)):
            return REDACTED
        if name == "access_key_id" and value:
            return mask_key(value)
        return redact_uri(str(value))

    def secret_values(self) -> list[Any]:
        """What a third party's message (botocore's, the server's) must not repeat."""
        masked = (*CREDENTIAL_OPTIONS, *self.redacted)
        return [getattr(self, name) for name in masked if getattr(self, name) is not None]

    def shown_endpoint(self, endpoint: str | None) -> str:
        """How the endpoint the client uses may appear in a message."""
        if not endpoint:
            return "AWS S3"
        return REDACTED if "endpoint_url" in self.redacted else redact_uri(endpoint)

    def __repr__(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "redacted":
                continue
            masked = f.name in self.redacted or isinstance(value, str | Secret)
            parts.append(f"{f.name}={(self.shown(f.name) if masked else value)!r}")
        return f"S3Settings({', '.join(parts)})"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> S3Settings:
        """Settings from string options (an Airflow connection's extras, CLI flags, ...).
        Empty values count as not given. Sizes accept suffixes: 8MiB, 8MB, 512k. A value
        that is a Secret (from `${VAR}`) is used as it is and shown masked."""
        known = [f.name for f in fields(cls) if f.name != "redacted"]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown S3 storage option(s) {', '.join(map(repr, unknown))}; "
                f"known options are {', '.join(known)}"
            )
        values: dict[str, Any] = {}
        redacted = set()
        for name, raw in options.items():
            if isinstance(raw, Secret):
                redacted.add(name)
                raw = raw.reveal()
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                continue
            text = str(raw).strip()
            shown = REDACTED if name in redacted | CREDENTIAL_OPTIONS else text
            if name == "max_attempts":
                values[name] = _parse_int(name, text, shown)
            elif name in ("connect_timeout", "read_timeout"):
                values[name] = _parse_float(name, text, shown)
            elif name in ("multipart_threshold", "multipart_chunksize"):
                values[name] = _parse_size(name, text, shown)
            elif name in ("addressing_style", "retry_mode"):
                values[name] = text.lower()
            elif name == "probe_conditional_writes":
                values[name] = _parse_bool(name, text, shown)
            else:
                values[name] = text
        return cls(**values, redacted=frozenset(redacted & set(values)))

    def effective_endpoint(self) -> str | None:
        return (
            self.endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )

    def effective_addressing_style(self) -> str:
        if self.addressing_style:
            return self.addressing_style
        return "path" if self.effective_endpoint() else "auto"


def _parse_int(name: str, text: str, shown: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"S3 option {name}='{shown}' is not a whole number") from None


def _parse_float(name: str, text: str, shown: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"S3 option {name}='{shown}' is not a number of seconds") from None


def _parse_bool(name: str, text: str, shown: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise ConfigError(f"S3 option {name}='{shown}' must be true or false")


def _parse_size(name: str, text: str, shown: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(
            f"S3 option {name}='{shown}' is not a size (use bytes or e.g. 8MiB, 64MB, 512KiB)"
        )
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
