"""The S3 backend: `S3ObjectStore` (store.py) reached with `S3Settings` (settings.py);
what failures mean (errors.py) and how requests are retried (retry.py)."""

from batchpoint.storage.s3.settings import S3Settings
from batchpoint.storage.s3.store import S3ObjectStore

__all__ = ["S3ObjectStore", "S3Settings"]
