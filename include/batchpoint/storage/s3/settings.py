"""How to reach an S3 service: `S3Settings`, built from string options (environment
variables, an Airflow connection, CLI flags) with one clear message per bad value."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlparse

from batchpoint.errors import ConfigError

MiB = 1024 * 1024
MIN_PART = 5 * MiB  # S3 refuses smaller multipart parts (except the last one)
MAX_PART = 5 * 1024 * MiB
# botocore's retry modes: 'standard' (jittered exponential backoff and a retry quota
# that stops retrying against an endpoint that keeps failing) and 'adaptive' (the same
# plus client-side rate limiting once throttled). 'legacy' retries a different, older set
# of errors and is not offered.
RETRY_MODES = ("standard", "adaptive")

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": MiB, "g": 1024 * MiB}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class S3Settings:
    """How to reach the S3 service. `None` means "let boto3 decide": AWS_ENDPOINT_URL,
    AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/config and the other standard sources."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    # Short-lived credentials (an assumed role, SSO) come as key, secret and this token.
    session_token: str | None = field(default=None, repr=False)
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

    def __post_init__(self) -> None:
        if self.endpoint_url is not None:
            parsed = urlparse(self.endpoint_url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ConfigError(
                    f"S3 option endpoint_url='{self.endpoint_url}' is not an http(s) URL "
                    "(expected e.g. http://127.0.0.1:8333)"
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
                f"S3 option retry_mode='{self.retry_mode}' must be one of {', '.join(RETRY_MODES)}"
            )
        if self.max_attempts < 1:
            raise ConfigError(f"S3 option max_attempts={self.max_attempts} must be at least 1")
        for name in ("connect_timeout", "read_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"S3 option {name}={getattr(self, name)} must be positive")
        if self.multipart_threshold < 1:
            raise ConfigError(
                f"S3 option multipart_threshold={self.multipart_threshold} must be positive"
            )
        if not MIN_PART <= self.multipart_chunksize <= MAX_PART:
            raise ConfigError(
                f"S3 option multipart_chunksize={self.multipart_chunksize} must be between "
                f"5 MiB ({MIN_PART}) and 5 GiB ({MAX_PART}): S3 refuses other part sizes"
            )
        if self.addressing_style not in (None, "path", "virtual", "auto"):
            raise ConfigError(
                f"S3 option addressing_style='{self.addressing_style}' must be one of "
                "path, virtual, auto"
            )

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> S3Settings:
        """Settings from string options (an Airflow connection's extras, CLI flags, ...).
        Empty values count as not given. Sizes accept suffixes: 8MiB, 8MB, 512k."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown S3 storage option(s) {', '.join(map(repr, unknown))}; "
                f"known options are {', '.join(known)}"
            )
        values: dict[str, Any] = {}
        for name, raw in options.items():
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                continue
            text = str(raw).strip()
            if name == "max_attempts":
                values[name] = _parse_int(name, text)
            elif name in ("connect_timeout", "read_timeout"):
                values[name] = _parse_float(name, text)
            elif name in ("multipart_threshold", "multipart_chunksize"):
                values[name] = _parse_size(name, text)
            elif name in ("addressing_style", "retry_mode"):
                values[name] = text.lower()
            elif name == "probe_conditional_writes":
                values[name] = _parse_bool(name, text)
            else:
                values[name] = text
        return cls(**values)

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


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"S3 option {name}='{text}' is not a whole number") from None


def _parse_float(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"S3 option {name}='{text}' is not a number of seconds") from None


def _parse_bool(name: str, text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise ConfigError(f"S3 option {name}='{text}' must be true or false")


def _parse_size(name: str, text: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(
            f"S3 option {name}='{text}' is not a size (use bytes or e.g. 8MiB, 64MB, 512KiB)"
        )
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
