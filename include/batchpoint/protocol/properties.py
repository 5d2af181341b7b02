"""A pending checkpoint's properties (Flink's CheckpointProperties): the protocol's flags
as typed fields, and the user's own properties beside them.

Stored as one JSON object, exactly as the flat dict it was before it had types: each
flag under its name when set, the user's properties as they were given. It is also a
read-only Mapping of that object, which is what user functions see
(`OperatorContext.properties`) and what records written before a flag existed hold.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self

from batchpoint import codec
from batchpoint.errors import ConfigError, RecordError


def _flag(doc: str) -> Any:
    return codec.field(default=None, omit=None, doc=doc)


@dataclass(frozen=True)
class CheckpointProperties(codec.Value, Mapping[str, Any]):
    """What the trigger fixed about how the checkpoint is taken and kept."""

    # -- how it completes ------------------------------------------------------------------
    audit: bool | None = _flag(
        "only the audit's verdict may complete it, once every task acknowledged it"
    )
    # -- how its state is snapshotted ------------------------------------------------------
    changelog_chain: int | None = _flag(
        "the changelog chain bound every attempt of every task plans its snapshots with"
    )
    changelog_min_bytes: int | None = _flag(
        "a state whose base is smaller (in bytes) is snapshotted in full by every attempt"
    )
    independent_of_base: str | None = _flag(
        "why it must not share its base's files (the base is held outside retention)"
    )
    # -- how it is kept --------------------------------------------------------------------
    retain_forever: bool | None = _flag("never subsumed")
    stop_pipeline: bool | None = _flag("a stop-with-savepoint: the pipeline stops after it")
    # -- who asked -------------------------------------------------------------------------
    scheduler_run_id: str | None = _flag("the scheduler's run that triggered it")
    description: str | None = _flag("a savepoint's description, as given")
    via: str | None = _flag("the front end that triggered a savepoint")
    target: str | None = _flag("where a savepoint is to be exported")
    # -- a savepoint import ----------------------------------------------------------------
    imported_from: str | None = _flag("the savepoint folder it was imported from")
    savepoint_checkpoint_id: int | None = _flag("the id it had where the savepoint was taken")
    savepoint_taken_from: str | None = _flag("the storage root the savepoint was taken from")
    savepoint_base_checkpoint_id: int | None = _flag(
        "the base the savepoint was taken on, where it was taken"
    )
    savepoint_description: str | None = _flag("the imported savepoint's description")
    # -- the user's own, handed to user functions as they are ------------------------------
    user: Mapping[str, Any] = codec.field(extra=True, default_factory=dict)

    @classmethod
    def of(cls, properties: Mapping[str, Any] | None) -> Self:
        """Typed properties from a flat mapping (a trigger's): a flag of the wrong type is
        refused, naming it."""
        if isinstance(properties, CheckpointProperties):
            return properties
        try:
            return cls.from_json(dict(properties or {}), "checkpoint properties")
        except RecordError as exc:
            problem = getattr(exc, "problem", str(exc))
            raise ConfigError(f"checkpoint properties: {problem}") from None

    @property
    def is_imported(self) -> bool:
        return self.imported_from is not None

    # -- the stored object, as a read-only mapping -----------------------------------------

    def __getitem__(self, key: str) -> Any:
        return self._flat()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flat())

    def __len__(self) -> int:
        return len(self._flat())

    def _flat(self) -> dict[str, Any]:
        return self.to_json()


NONE = CheckpointProperties()
