"""Which Iceberg catalog serves a table sink, and how it reaches the store's files.

In order: BATCHPOINT_TABLE_CATALOG (a SQLAlchemy URI: an embedded SQLite file or the
deployment's Postgres), pyiceberg's own configuration of the sink's catalog name
(~/.pyiceberg.yaml, PYICEBERG_CATALOG__<NAME>__*), and for a file:// root a SQLite file
beside the data (<root>/tables/catalog.db). An S3 root with none of these is a
configuration error: a catalog file on one machine would not be shared. Tables live
under <root>/tables/ and their FileIO gets the store's S3 endpoint and credentials, so
the table and the checkpoints it references are on one storage.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from batchpoint.errors import ConfigError
from batchpoint.storage import ObjectStore
from batchpoint.storage.redaction import redact_uri, reveal, scrub

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

_CATALOGS: dict[tuple[str, str, str, object], Catalog] = {}
_LOCK = threading.Lock()


def file_io_properties(store: ObjectStore) -> dict[str, str]:
    """pyiceberg FileIO properties that reach the store's objects as the store does."""
    s3 = getattr(store, "settings", None)
    if not store.uri.startswith("s3://") or s3 is None:
        return {}
    props = {
        "s3.endpoint": s3.effective_endpoint(),
        "s3.region": s3.region,
        "s3.access-key-id": s3.access_key_id,
        "s3.secret-access-key": reveal(s3.secret_access_key),
        "s3.session-token": reveal(s3.session_token),
        "s3.force-virtual-addressing": "true"
        if s3.effective_addressing_style() == "virtual"
        else None,
    }
    return {k: v for k, v in props.items() if v}


def warehouse(store: ObjectStore) -> str:
    return store.child("tables")


def catalog_uri(store: ObjectStore, configured: str | None) -> str | None:
    if configured:
        return configured
    root = getattr(store, "root", None)
    if store.uri.startswith("file://") and root is not None:
        (root / "tables").mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{root / 'tables' / 'catalog.db'}"
    return None


def default_catalog_missing(name: str, store: ObjectStore, configured_uri: str | None) -> bool:
    """Whether `name` would be the file root's default catalog and that has not been
    made yet: then no table exists, and a reader (GC, `verify`, the UI) must not make
    it by opening it."""
    if configured_uri:
        return False
    root = getattr(store, "root", None)
    if not store.uri.startswith("file://") or root is None:
        return False
    try:
        from pyiceberg.utils.config import Config
    except ImportError:
        return False  # opening says what is missing
    if Config().get_catalog_config(name):
        return False
    return not (root / "tables" / "catalog.db").exists()


def table_metadata_prefix(identifier: str) -> str:
    """Where a table of the store's warehouse keeps its metadata by default
    (<warehouse>/<namespace>/<table>/metadata/), as a key of the store."""
    namespace, _, table = identifier.rpartition(".")
    return f"tables/{namespace}/{table}/metadata/"


def open_catalog(name: str, store: ObjectStore, configured_uri: str | None = None) -> Catalog:
    """The catalog `name` for tables on `store`'s storage (cached per process)."""
    key = (name, configured_uri or "", store.uri, getattr(store, "settings", None))
    with _LOCK:
        found = _CATALOGS.get(key)
        if found is None:
            found = _CATALOGS[key] = _open(name, store, configured_uri)
        return found


def _open(name: str, store: ObjectStore, configured_uri: str | None) -> Catalog:
    try:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.utils.config import Config
    except ImportError:
        raise ConfigError(
            "table sinks need pyiceberg: install batchpoint with its 'tables' extra "
            "(pip install 'batchpoint[tables]')"
        ) from None
    io = file_io_properties(store)
    base = {"warehouse": warehouse(store), **io}
    uri = catalog_uri(store, configured_uri)
    if configured_uri is None:
        config = Config().get_catalog_config(name)
        if config:
            return load_catalog(name, **{**base, **_flat(config)})
    if uri is None:
        raise ConfigError(
            f"table catalog '{name}' is not configured for the S3 root {store.uri}: set "
            "BATCHPOINT_TABLE_CATALOG to a SQLAlchemy URI every worker reaches "
            "(postgresql+psycopg2://user:pass@host/db, or sqlite:////shared/path/catalog.db), "
            f"or configure pyiceberg's catalog '{name}' (PYICEBERG_CATALOG__"
            f"{name.upper()}__URI=...)"
        )
    try:
        return SqlCatalog(name, uri=uri, **base)
    except Exception as exc:  # SQLAlchemy's errors: a bad URI or an unreachable database
        # Neither the URI's password nor the store's keys may reach the message (the
        # driver's own text often repeats the URI).
        secrets = [*_password(uri), io.get("s3.secret-access-key"), io.get("s3.session-token")]
        problem = scrub(str(exc), secrets)
        raise ConfigError(f"table catalog '{name}' at {redact_uri(uri)}: {problem}") from None


def _password(uri: str) -> tuple[str, ...]:
    """The URI's password as written and decoded (a driver may repeat either)."""
    try:
        password = urlparse(uri).password
    except ValueError:
        return ()
    return (password, unquote(password)) if password else ()


def _flat(config: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in config.items() if not isinstance(v, Mapping)}
