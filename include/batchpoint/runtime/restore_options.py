"""What a restore is asked, parsed and checked before anything is read: the source
(`latest`, a checkpoint id, a savepoint folder), a new parallelism per operator, and the
quality gate's options (on or off with a typed confirmation, how far back `latest` may
look, suites to skip), as the restore form, `batchpoint restore` and the restore DAG
give them. runtime.restore plans and applies the restore."""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import ConfigError, RestoreRefused

# -- what to restore from ---------------------------------------------------------------


class SourceKind(enum.StrEnum):
    """What a restore goes back to; a candidate is a checkpoint or a savepoint."""

    LATEST = "latest"  # the newest retained checkpoint that passes the checks
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


@dataclass(frozen=True)
class RestoreSource:
    kind: SourceKind
    checkpoint_id: int | None = None
    location: str = ""

    @classmethod
    def parse(cls, value: str | int | None) -> RestoreSource:
        """`latest` (or empty), a checkpoint id, or a savepoint location."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "latest")):
            return cls(SourceKind.LATEST)
        if isinstance(value, bool):
            raise ConfigError(f"restore source {value!r}: expected latest, an id or a path")
        if isinstance(value, int) or value.strip().lstrip("+-").isdigit():
            checkpoint_id = int(value)
            if checkpoint_id < 1:
                raise ConfigError(f"restore source {value!r}: checkpoint ids start at 1")
            return cls(SourceKind.CHECKPOINT, checkpoint_id=checkpoint_id)
        return cls(SourceKind.SAVEPOINT, location=value.strip())

    @property
    def text(self) -> str:
        """What `parse` reads back as this source."""
        if self.kind is SourceKind.CHECKPOINT:
            return str(self.checkpoint_id)
        if self.kind is SourceKind.SAVEPOINT:
            return self.location
        return SourceKind.LATEST.value

    def __str__(self) -> str:
        if self.kind is SourceKind.CHECKPOINT:
            return f"checkpoint {self.checkpoint_id}"
        if self.kind is SourceKind.SAVEPOINT:
            return f"savepoint {self.location}"
        return "the latest retained checkpoint"


def parse_parallelism(value: Any, operators: list[str]) -> dict[str, int]:
    """The `new parallelism` of a restore: None, an int (every operator and sink), or a
    mapping operator -> int (also as JSON text)."""
    if value is None or value == "" or value == {}:
        return {}
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ConfigError(
                f'parallelism {text!r}: give an integer or a JSON object like {{"balances": 4}}'
            ) from None
    if isinstance(value, bool):
        raise ConfigError(f"parallelism {value!r}: expected an integer or an object")
    if isinstance(value, int):
        return {name: _positive(name, value) for name in operators}
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(operators))
        if unknown:
            raise ConfigError(
                f"parallelism names unknown operator(s) {unknown}; operators: {operators}"
            )
        return {str(name): _positive(str(name), v) for name, v in value.items()}
    raise ConfigError(f"parallelism {value!r}: expected an integer or an object")


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"parallelism of '{name}' must be a positive integer, got {value!r}")
    return value


def ungated_phrase(pipeline: str) -> str:
    """What to type to restore `pipeline` with the quality gate off."""
    return f"restore {pipeline} without the gate"


def parse_max_candidates(value: Any) -> int | None:
    """How many of the newest retained checkpoints `latest` may examine: None (or
    empty) for all of them, else an integer >= 1."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"max_candidates must be an integer >= 1 (or empty for every retained "
            f"checkpoint), got {value!r}"
        )
    return value


def parse_skip_suites(value: Any) -> tuple[str, ...]:
    """Names to skip: a list of strings, or one string of names separated by commas or
    new lines (what a text field sends). Order kept, duplicates dropped."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = re.split(r"[,\n]", value)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"skip_suites must be a list of suite names, got {value!r}")
    names = [v.strip() for v in value if v.strip()]
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class GateOptions:
    """What one restore asks of the quality gate."""

    enabled: bool = True
    max_candidates: int | None = None
    skip_suites: tuple[str, ...] = ()

    @classmethod
    def from_form(
        cls,
        pipeline: str,
        *,
        quality_gate: Any = True,
        confirm_ungated: Any = "",
        max_candidates: Any = None,
        skip_suites: Any = (),
    ) -> GateOptions:
        """Checked before anything is read: turning the gate off must be confirmed by
        typing `ungated_phrase(pipeline)` (surrounding spaces ignored), so that a
        restore that may bring back broken state is never one click away."""
        enabled = parse_flag("quality_gate", quality_gate)
        if not enabled:
            phrase = ungated_phrase(pipeline)
            typed = confirm_ungated.strip() if isinstance(confirm_ungated, str) else ""
            if typed != phrase:
                got = f"got {confirm_ungated!r}" if typed else "it is empty"
                raise RestoreRefused(
                    f"the quality gate is off for this restore of '{pipeline}', which needs a "
                    f'typed confirmation: set confirm_ungated to exactly "{phrase}" ({got}), '
                    "or turn quality_gate back on"
                )
        return cls(enabled, parse_max_candidates(max_candidates), parse_skip_suites(skip_suites))


def parse_flag(name: str, value: Any) -> bool:
    """A boolean form field, also as the text a template renders ("True", "false")."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"{name} must be true or false, got {value!r}")
