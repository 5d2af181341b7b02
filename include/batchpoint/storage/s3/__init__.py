"""The S3 backend: `S3ObjectStore` (store.py) reached with `S3Settings` (settings.py);
what failures mean (errors.py) and how requests are retried (retry.py).

The store (and boto3 with it) is imported when first named: checking settings, or
listing them in the provider's info, does not pay for boto3."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from batchpoint.storage.s3.settings import S3Settings

if TYPE_CHECKING:
    from batchpoint.storage.s3.store import S3ObjectStore

__all__ = ["S3ObjectStore", "S3Settings"]


def __getattr__(name: str) -> Any:
    if name == "S3ObjectStore":
        from batchpoint.storage.s3.store import S3ObjectStore

        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
