"""A cascade restore: one pipeline's restore followed by every pipeline downstream of it
that read what the restore takes back, as one operation that a crash cannot cut in
half (ops/cascade.py runs it; runtime/cascade_plan.py plans it).

The record is the operation. It lives at `cascades/active.json` under the storage root
while the cascade runs, one at a time per root, created only if absent and changed only
by compare-and-swap on its etag. Its states:

- APPLYING: the plan is fixed (every target chosen and gated before the record is
  written: a refusal stops the cascade before any head moves). Each step's pipeline is
  then fenced (`CascadeFence` in its control record: its triggers refuse, reason
  CASCADE), restored in the plan's order (upstream first) and marked done.
- DONE or FAILED: every fence is lifted, the record is copied to
  `cascades/<id>.json` (the history) and the active record deleted.

A crash anywhere leaves the active record: the next cascade call resumes it. A step
whose restore happened but whose mark was lost is recognised by its pipeline's control
record (a newer restore generation with the head on the step's target) and not
restored twice. Nothing here depends on timing: every decision is a CAS on a record.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from batchpoint import codec
from batchpoint.errors import (
    CheckpointError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    RecordError,
)
from batchpoint.protocol.control import CascadeFence, ControlRecord
from batchpoint.storage.base import ObjectStore

PREFIX = "cascades/"
ACTIVE = PREFIX + "active.json"
_MAX_ROUNDS = 50


class CascadeStatus(enum.StrEnum):
    APPLYING = "applying"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class CascadeStep(codec.Value):
    """Restore `pipeline` to `target`; `generation_before` is its restore generation
    when the cascade was planned (a newer one with the head on the target: done)."""

    pipeline: str
    target: int
    generation_before: int
    done: bool = False
    # the root's new parallelism, when its restore rescales (operator -> subtasks)
    parallelism: Mapping[str, int] = codec.field(default_factory=dict, omit={})


@dataclass(frozen=True)
class CascadeRecord(codec.Record):
    KIND = "cascade"
    VERSION = 1

    cascade_id: str
    root: str  # the pipeline whose restore the others follow
    target: int  # the root's restore target
    steps: tuple[CascadeStep, ...]  # upstream first
    started_at: float = codec.time()
    status: CascadeStatus = CascadeStatus.APPLYING
    finished_at: float | None = codec.field(default=None, omit=None)
    failure: str | None = codec.field(default=None, omit=None)

    @property
    def pipelines(self) -> list[str]:
        return [s.pipeline for s in self.steps]

    @property
    def finished(self) -> bool:
        return self.status is not CascadeStatus.APPLYING

    def step(self, pipeline: str) -> CascadeStep:
        return next(s for s in self.steps if s.pipeline == pipeline)

    def fence(self) -> CascadeFence:
        return CascadeFence(self.cascade_id, self.root, self.started_at)


def new_cascade_id() -> str:
    return uuid.uuid4().hex[:12]


class CascadeBusy(CheckpointError):
    """Another cascade holds the storage root, or a pipeline of the plan is held."""


class CascadeStore:
    """The active cascade record and the history, on the storage root of the pipelines."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def active(self) -> tuple[CascadeRecord, str] | None:
        try:
            found = self._store.get(ACTIVE)
        except ObjectNotFound:
            return None
        return CascadeRecord.decode(ACTIVE, found.data), found.etag

    def start(self, record: CascadeRecord) -> bool:
        """Make `record` the active cascade; False when one is active already."""
        try:
            self._store.create(ACTIVE, record.encode())
        except ObjectAlreadyExists:
            return False
        return True

    def update(
        self, cascade_id: str, change: Callable[[CascadeRecord], CascadeRecord | None]
    ) -> CascadeRecord:
        """Apply `change` to the active record of `cascade_id` until the write wins."""
        for _ in range(_MAX_ROUNDS):
            found = self.active()
            if found is None or found[0].cascade_id != cascade_id:
                raise CascadeBusy(f"cascade {cascade_id} is no longer the active one")
            record, etag = found
            new = change(record)
            if new is None:
                return record
            try:
                self._store.replace(ACTIVE, new.encode(), etag)
            except PreconditionFailed:
                continue
            return new
        raise CheckpointError(f"gave up updating cascade {cascade_id}")

    def retire(self, record: CascadeRecord) -> None:
        """Keep a finished cascade in the history and free the root for the next one."""
        assert record.finished
        self._store.put(history_key(record.cascade_id), record.encode())
        self._store.delete(ACTIVE)

    def history(self, cascade_id: str) -> CascadeRecord | None:
        key = history_key(cascade_id)
        try:
            return CascadeRecord.decode(key, self._store.get(key).data)
        except ObjectNotFound:
            return None


def history_key(cascade_id: str) -> str:
    return f"{PREFIX}{cascade_id}.json"


def mark_done(record: CascadeRecord, pipeline: str) -> CascadeRecord | None:
    steps = tuple(replace(s, done=True) if s.pipeline == pipeline else s for s in record.steps)
    return None if steps == record.steps else replace(record, steps=steps)


def finished(record: CascadeRecord, now: float, failure: str | None = None) -> CascadeRecord:
    status = CascadeStatus.FAILED if failure else CascadeStatus.DONE
    return replace(record, status=status, finished_at=now, failure=failure)


# -- the fence in each pipeline's control record -----------------------------------------


def active_fence(cascades: CascadeStore, pipeline: str) -> CascadeFence | None:
    """The fence of the cascade under way that names `pipeline` among its steps (None
    when none does, or its record cannot be read: repair then names no fence)."""
    try:
        found = cascades.active()
    except RecordError:
        return None
    if found is None or found[0].finished or pipeline not in found[0].pipelines:
        return None
    return found[0].fence()


def held_by(pipeline: str, held: CascadeFence) -> str:
    """Why a pipeline a cascade holds refuses another cascade or a restore of its own."""
    return (
        f"pipeline '{pipeline}' is held by cascade {held.cascade} (following "
        f"'{held.root}'): finish that one first "
        f"(`batchpoint restore --pipeline {held.root} --cascade`)"
    )


def fenced(control: ControlRecord | None, fence: CascadeFence, pipeline: str) -> ControlRecord:
    """The control record held by `fence` (a restore still rolling forward may finish:
    the cascade's own restore of this pipeline finishes it first)."""
    control = control or ControlRecord()
    held = control.cascade
    if held is not None and held.cascade != fence.cascade:
        raise CascadeBusy(held_by(pipeline, held))
    return control if held == fence else replace(control, cascade=fence)


def retired_fence(control: ControlRecord | None, cascades: CascadeStore) -> str | None:
    """The id of the cascade fencing the pipeline when that cascade is over (retired to
    the history, not active): a fence a process that lost the race to finish it set
    again, or died before lifting. Nothing holds it any more, so it may be lifted."""
    fence = control.cascade if control is not None else None
    if fence is None:
        return None
    active = cascades.active()
    if active is not None and active[0].cascade_id == fence.cascade:
        return None
    return fence.cascade if cascades.history(fence.cascade) is not None else None


def unfenced(control: ControlRecord | None, cascade_id: str) -> ControlRecord | None:
    """The record without this cascade's fence (None: nothing to change)."""
    if control is None or control.cascade is None or control.cascade.cascade != cascade_id:
        return None
    return replace(control, cascade=None)


def restored_by_cascade(control: ControlRecord | None, step: CascadeStep) -> bool:
    """Whether the step's restore took effect (its mark may have been lost in a crash)."""
    return (
        control is not None
        and control.restore_generation > step.generation_before
        and control.head == step.target
    )


def describe(record: CascadeRecord) -> str:
    steps = ", ".join(
        f"{s.pipeline} -> {s.target}{' (done)' if s.done else ''}" for s in record.steps
    )
    return f"cascade {record.cascade_id} ({record.status.value}): {steps}"


def as_json(record: CascadeRecord) -> str:
    return json.dumps(record.to_json(), sort_keys=True)
