"""The boto3 client an S3 store talks through: one per store, built from its settings.

Kept apart from the store's operations so that what decides timeouts, retries,
addressing, connection pooling and the credentials named in errors has one home."""

from __future__ import annotations

import threading
from typing import Any

import boto3
import botocore.exceptions as bce
import botocore.loaders
import botocore.session
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from batchpoint.errors import ConfigError
from batchpoint.storage.redaction import mask_key, reveal
from batchpoint.storage.s3 import errors
from batchpoint.storage.s3.retry import botocore_retries
from batchpoint.storage.s3.settings import S3Settings

# Enough pooled connections for the thread pools that the tasks and the transfer manager
# run; botocore's default of 10 makes extra threads wait and log pool-full warnings.
POOL_CONNECTIONS = 32


def make_client(s: S3Settings) -> tuple[boto3.session.Session, Any]:
    """A session and its S3 client. Sessions are not thread-safe: the caller holds a lock."""
    core = botocore.session.Session()
    core.register_component("data_loader", _shared_loader())
    try:
        session = boto3.session.Session(
            botocore_session=core,
            aws_access_key_id=s.access_key_id,
            aws_secret_access_key=reveal(s.secret_access_key),
            aws_session_token=reveal(s.session_token),
            region_name=s.region,
            profile_name=s.profile,
        )
        config = Config(
            connect_timeout=s.connect_timeout,
            read_timeout=s.read_timeout,
            retries=botocore_retries(s.retry_mode, s.max_attempts),  # type: ignore[arg-type]
            s3={"addressing_style": s.effective_addressing_style()},
            max_pool_connections=POOL_CONNECTIONS,
        )
        # The profile is looked up here too when it comes from AWS_PROFILE.
        return session, session.client("s3", endpoint_url=s.endpoint_url, config=config)
    except bce.ProfileNotFound as exc:
        named = f"S3 option profile='{s.profile}'" if s.profile else "AWS_PROFILE"
        raise ConfigError(
            f"{named}: {exc}; name a profile of ~/.aws/config or ~/.aws/credentials "
            "(BATCHPOINT_S3_PROFILE), or give access keys"
        ) from None


def transfer_config(s: S3Settings) -> TransferConfig:
    return TransferConfig(
        multipart_threshold=s.multipart_threshold,
        multipart_chunksize=s.multipart_chunksize,
        # The classic manager goes through the store's client, so its calls share our
        # timeouts and retries and are visible to botocore event hooks; CRT would not.
        preferred_transfer_client="classic",
    )


def credential_source(s: S3Settings, session: boto3.session.Session | None) -> str:
    """Which credentials the client signs with, for error messages (key masked)."""
    if s.access_key_id:
        kind = "short-lived credentials" if s.session_token else "access key"
        return f"{kind} '{s.shown('access_key_id')}' from the storage options"
    if s.profile:
        return f"AWS profile '{s.profile}'"
    try:
        credentials = session.get_credentials() if session else None
    except bce.BotoCoreError:
        credentials = None
    if credentials is None:
        return "none found"
    label = errors.credential_label(getattr(credentials, "method", "unknown"))
    return f"access key '{mask_key(credentials.access_key)}' from {label}"


_LOADER: botocore.loaders.Loader | None = None
_LOADER_LOCK = threading.Lock()


def _shared_loader() -> botocore.loaders.Loader:
    """One botocore data loader for every store in the process. It caches the parsed
    service definitions, which are most of the cost of a new client (0.2 s against
    0.02 s): stores are unpickled afresh in every Spark task, each with its own client."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = botocore.loaders.create_loader()
        return _LOADER
