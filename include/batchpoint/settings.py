"""Deployment settings in one place: where the storage is, how to reach it, which Spark
master to use, and the checkpointing knobs. Read from BATCHPOINT_* environment variables
(the Airflow layer may fill them from a connection), validated with clear messages."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from batchpoint.errors import ConfigError
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.storage import StoreRef

_S3_OPTIONS = {
    "BATCHPOINT_S3_ENDPOINT_URL": "endpoint_url",
    "BATCHPOINT_S3_REGION": "region",
    "BATCHPOINT_S3_ACCESS_KEY_ID": "access_key_id",
    "BATCHPOINT_S3_SECRET_ACCESS_KEY": "secret_access_key",
    "BATCHPOINT_S3_SESSION_TOKEN": "session_token",
    "BATCHPOINT_S3_RETRY_MODE": "retry_mode",
    "BATCHPOINT_S3_MAX_ATTEMPTS": "max_attempts",
    "BATCHPOINT_S3_PROBE_CONDITIONAL_WRITES": "probe_conditional_writes",
}
_CHECKPOINT_OPTIONS = {
    "BATCHPOINT_CHECKPOINT_TIMEOUT": "timeout",
    "BATCHPOINT_MIN_PAUSE": "min_pause",
    "BATCHPOINT_MAX_CONCURRENT": "max_concurrent",
    "BATCHPOINT_TOLERABLE_FAILED_CHECKPOINTS": "tolerable_failed_checkpoints",
    "BATCHPOINT_NUM_RETAINED": "num_retained",
    "BATCHPOINT_VERIFY_CHECKSUMS": "verify_checksums",
}
DEFAULT_ROOT = "file://" + os.path.abspath(".batchpoint")


@dataclass(frozen=True)
class Settings:
    root: str
    store_options: Mapping[str, str] = field(default_factory=dict)
    spark_master: str = "local[2]"
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    @property
    def store_ref(self) -> StoreRef:
        return StoreRef.of(self.root, self.store_options)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> Settings:
        env = os.environ if env is None else env
        root = overrides.get("root") or env.get("BATCHPOINT_ROOT") or DEFAULT_ROOT
        if not root.startswith(("s3://", "file://")):
            raise ConfigError(
                f"BATCHPOINT_ROOT={root!r}: use s3://bucket/prefix or file:///absolute/path"
            )
        options = {name: env[var] for var, name in _S3_OPTIONS.items() if env.get(var)}
        checkpoint = {name: env[var] for var, name in _CHECKPOINT_OPTIONS.items() if env.get(var)}
        try:
            config = CheckpointConfig.from_mapping(checkpoint)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (from BATCHPOINT_* environment variables)") from None
        master = overrides.get("spark_master") or env.get("BATCHPOINT_SPARK_MASTER") or "local[2]"
        return cls(root, options, master, config)

    def as_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a child process."""
        out = {"BATCHPOINT_ROOT": self.root, "BATCHPOINT_SPARK_MASTER": self.spark_master}
        for var, name in _S3_OPTIONS.items():
            if name in self.store_options:
                out[var] = str(self.store_options[name])
        for var, name in _CHECKPOINT_OPTIONS.items():
            out[var] = str(getattr(self.checkpoint, name))
        return out
