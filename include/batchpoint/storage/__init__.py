"""Storage: one interface (`ObjectStore`), two backends, chosen by URI."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from batchpoint.errors import ConfigError
from batchpoint.storage import redaction
from batchpoint.storage.base import ObjectInfo, ObjectStore, StoredObject
from batchpoint.storage.redaction import Secret, conceal, redact_uri

__all__ = ["ObjectInfo", "ObjectStore", "StoreRef", "StoredObject", "open_store"]

Options = tuple[tuple[str, str | Secret], ...]

_OPEN: OrderedDict[tuple[str, Options], ObjectStore] = OrderedDict()
_OPEN_LOCK = threading.Lock()
# Short-lived credentials are part of the options, so a long-lived process (the UI, the
# triggerer) sees a new key each time they rotate: only the most recent stores are kept.
_OPEN_MAX = 32


@dataclass(frozen=True)
class StoreRef:
    """How to open a store: what Spark executors and Airflow workers receive instead of
    a live client, so each process opens (and caches) its own. Credential options (and
    any value taken from `${VAR}`) are Secrets: its repr shows them masked, its pickle
    carries them whole."""

    uri: str
    options: Options = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple((k, conceal(k, v)) for k, v in self.options))

    def __repr__(self) -> str:  # a URI with a password in it (a path given by hand)
        return f"StoreRef(uri={redact_uri(self.uri)!r}, options={self.options!r})"

    @classmethod
    def of(cls, uri: str, options: Mapping[str, str | Secret] | None = None) -> StoreRef:
        return cls(uri, tuple(sorted((options or {}).items())))

    def open(self) -> ObjectStore:
        # One store per process: S3 clients are costly to build and thread-safe.
        key = (self.uri, self.options)
        with _OPEN_LOCK:
            store = _OPEN.get(key)
            if store is None:
                store = _OPEN[key] = open_store(self.uri, dict(self.options))
                while len(_OPEN) > _OPEN_MAX:
                    _OPEN.popitem(last=False)  # dropped, not closed: a holder may still use it
            _OPEN.move_to_end(key)
            return store


def open_store(uri: str, options: Mapping[str, str | Secret] | None = None) -> ObjectStore:
    """Open the store behind a root URI: ``s3://bucket/prefix`` or ``file:///path``.

    `options` carries S3 settings (endpoint_url, region, access_key_id, secret_access_key,
    session_token, retry_mode, max_attempts, probe_conditional_writes, ...: see
    `S3Settings`); anything not given falls back to the standard AWS environment and files.
    A value may be a `redaction.Secret`: the store signs with its value and shows its mask.
    """
    if not uri or not isinstance(uri, str):
        raise ConfigError("storage root URI is empty: set it to s3://bucket/prefix or file:///path")
    # A savepoint path, say (a root never gets here), and before the scheme's own
    # errors, which show the URI.
    if redaction.holds_credentials(uri):
        raise ConfigError(f"storage URI {redaction.CREDENTIALS_REFUSED}")
    parsed = urlparse(uri)
    shown = redact_uri(uri)  # a token or signature in a query is no credential, still secret
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"storage URI '{shown}': file URIs must be file:///absolute/path")
        from batchpoint.storage.local import LocalObjectStore

        return LocalObjectStore(parsed.path)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError(f"storage URI '{shown}' names no bucket: use s3://bucket/prefix")
        from batchpoint.storage.s3 import S3ObjectStore, S3Settings

        settings = S3Settings.from_options(options or {})
        return S3ObjectStore(parsed.netloc, parsed.path.strip("/"), settings)
    if parsed.scheme == "s3a":
        raise ConfigError(
            f"storage URI '{shown}': use s3:// (batchpoint moves bytes with boto3/pyarrow, "
            "not Hadoop's s3a)"
        )
    if not parsed.scheme and uri.startswith("/"):
        raise ConfigError(f"storage URI '{shown}' has no scheme: did you mean file://{shown}?")
    raise ConfigError(f"storage URI '{shown}': unsupported scheme (use s3:// or file://)")
