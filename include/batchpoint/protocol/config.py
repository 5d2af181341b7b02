"""Checkpointing settings of one pipeline (Flink's CheckpointConfig)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from batchpoint.errors import ConfigError


@dataclass(frozen=True)
class CheckpointConfig:
    timeout: float = 600.0  # seconds a checkpoint may stay pending
    min_pause: float = 0.0  # seconds between a completion and the next trigger
    max_concurrent: int = 1  # pending checkpoints at once
    tolerable_failed_checkpoints: int = 3  # consecutive failures before the pipeline FAILS
    num_retained: int = 3  # completed checkpoints kept (savepoints are extra)
    verify_checksums: bool = False  # re-read every file's bytes at finalize
    restore_checksums: bool = True  # re-read every file's bytes before a restore

    def __post_init__(self) -> None:
        checks = [
            (self.timeout > 0, "timeout must be > 0 seconds"),
            (self.min_pause >= 0, "min_pause must be >= 0 seconds"),
            (self.max_concurrent >= 1, "max_concurrent must be >= 1"),
            (self.tolerable_failed_checkpoints >= 0, "tolerable_failed_checkpoints must be >= 0"),
            (self.num_retained >= 1, "num_retained must be >= 1"),
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
