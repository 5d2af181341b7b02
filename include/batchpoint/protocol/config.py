"""Checkpointing settings of one pipeline (Flink's CheckpointConfig)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from batchpoint.errors import ConfigError

#: Longer than any sensible timeout, pause or grace (batchpoint.settings.values has the
#: same bound for the variables): a larger value is a typo that would overflow deadlines.
MAX_SECONDS = 30 * 86400.0


#: A deployment's `changelog_min_bytes` unless set: Spark's own open cost for a file
#: (spark.sql.files.openCostInBytes). A state smaller than one file's opening costs less
#: to rewrite than to compare with its base.
DEPLOYED_CHANGELOG_MIN_BYTES = 4 << 20


@dataclass(frozen=True)
class CheckpointConfig:
    timeout: float = 600.0  # seconds a checkpoint may stay pending
    min_pause: float = 0.0  # seconds between a completion and the next trigger
    max_concurrent: int = 1  # pending checkpoints at once
    tolerable_failed_checkpoints: int = 3  # consecutive failures before the pipeline FAILS
    num_retained: int = 3  # completed checkpoints kept (savepoints are extra)
    verify_checksums: bool = False  # re-read every file's bytes at finalize
    restore_verify_checksums: bool = True  # check every file's sha256 before a restore
    history_limit: int = 100  # records of settled, unretained checkpoints kept
    gc_grace: float = 3600.0  # seconds a discarded checkpoint's files wait for late writers
    # Changelog layers an incremental checkpoint may stack on a full snapshot; 0: every
    # checkpoint writes its state in full.
    changelog_chain: int = 8
    # A state whose base is smaller than this many bytes is written in full: comparing it
    # with its base costs a join and a second layer to read, more than rewriting it. Off
    # here (any state may be a changelog, as in Flink's incremental checkpoints);
    # deployments turn it on by default (DEPLOYED_CHANGELOG_MIN_BYTES).
    changelog_min_bytes: int = 0
    # A periodic trigger whose sources have nothing new since its base is refused
    # (`no-new-input`), as Structured Streaming runs no micro-batch without new data. Off
    # here (a checkpoint per trigger, as in Flink); deployments turn it on by default.
    skip_idle: bool = False

    def __post_init__(self) -> None:
        for name in ("timeout", "min_pause", "gc_grace"):
            value = getattr(self, name)
            if not math.isfinite(value) or value > MAX_SECONDS:
                raise ConfigError(
                    f"checkpoint config: {name}={value!r} must be finite and at most 30 days"
                )
        checks = [
            (self.timeout > 0, "timeout must be > 0 seconds"),
            (self.min_pause >= 0, "min_pause must be >= 0 seconds"),
            (self.gc_grace >= 0, "gc_grace must be >= 0 seconds"),
            (self.max_concurrent >= 1, "max_concurrent must be >= 1"),
            (self.tolerable_failed_checkpoints >= 0, "tolerable_failed_checkpoints must be >= 0"),
            (self.num_retained >= 1, "num_retained must be >= 1"),
            (self.history_limit >= 0, "history_limit must be >= 0"),
            (self.changelog_chain >= 0, "changelog_chain must be >= 0"),
            (self.changelog_min_bytes >= 0, "changelog_min_bytes must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"checkpoint config: {message}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> CheckpointConfig:
        known = {f.name: f.type for f in fields(cls)}
        unknown = set(values) - set(known)
        if unknown:
            raise ConfigError(
                f"checkpoint config: unknown settings {sorted(unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
        converted: dict[str, Any] = {}
        for name, value in values.items():
            default = getattr(cls, name)
            try:
                if isinstance(default, bool):
                    converted[name] = _to_bool(value)
                else:
                    converted[name] = type(default)(value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"checkpoint config: {name}={value!r} is not a valid {type(default).__name__}"
                ) from None
        return cls(**converted)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)
