"""Flink's CheckpointFailureManager, kept in storage: consecutive failed checkpoints are
counted per checkpoint id (so counting twice is impossible), a completion resets the
count, and past `tolerable_failed_checkpoints` the pipeline is FAILED until an explicit
reset or restore."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from batchpoint import codec
from batchpoint.errors import RESET_HINT, CorruptRecord, ObjectNotFound, PreconditionFailed
from batchpoint.protocol.cas import read_record, update_record
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.storage.base import ObjectStore


class PipelineStatus(enum.StrEnum):
    RUNNING = "RUNNING"
    FAILED = "FAILED"


@dataclass(frozen=True)
class FailureState(codec.Record):
    KIND = "failure-state"
    VERSION = 1

    status: PipelineStatus = codec.field(default=PipelineStatus.RUNNING, required=True)
    # consecutive failures since the last completion
    failed_ids: tuple[int, ...] = codec.field(default=(), required=True)
    last_completed_id: int = codec.field(default=0, required=True)
    reason: str = ""
    updated_at: float = codec.time(default=0.0, required=True)
    # The failures a reset cleared: a settle that finishes such a checkpoint again (a
    # second settler, a retry after a crash) must not count it a second time; an older
    # checkpoint still running then (max-concurrent) counts when it fails. Dropped
    # once a newer checkpoint completes, as `failed_ids` are.
    reset_ids: tuple[int, ...] = codec.field(default=(), omit=())

    @property
    def consecutive_failures(self) -> int:
        return len(self.failed_ids)


class CheckpointFailureManager:
    def __init__(self, store: ObjectStore, layout: PipelineLayout, tolerable: int) -> None:
        self._store = store
        self._key = layout.failures
        self._tolerable = tolerable

    @property
    def key(self) -> str:
        return self._key

    def state(self) -> FailureState:
        current = read_record(self._store, self._key, self._decode)
        return current[0] if current else FailureState()

    @staticmethod
    def _decode(key: str, data: bytes) -> FailureState:
        try:
            return FailureState.decode(key, data)
        except CorruptRecord as exc:
            raise CorruptRecord(exc.key, exc.problem, RESET_HINT) from None

    def record_failure(
        self, checkpoint_id: int, reason: CheckpointFailureReason, message: str, now: float
    ) -> FailureState:
        def count(current: FailureState | None) -> FailureState | None:
            state = current or FailureState()
            if not reason.counts_as_failure:
                return None
            if checkpoint_id <= state.last_completed_id:
                return None
            if checkpoint_id in state.failed_ids or checkpoint_id in state.reset_ids:
                return None
            failed = tuple(sorted((*state.failed_ids, checkpoint_id)))
            new = replace(state, failed_ids=failed, updated_at=now)
            if len(failed) > self._tolerable and state.status is PipelineStatus.RUNNING:
                new = replace(
                    new,
                    status=PipelineStatus.FAILED,
                    reason=(
                        f"{len(failed)} consecutive checkpoints failed (tolerable: "
                        f"{self._tolerable}); last: checkpoint {checkpoint_id} "
                        f"{reason.code}: {message}"
                    ),
                )
            return new

        return self._update(count)

    def record_success(self, checkpoint_id: int, now: float) -> FailureState:
        def reset(current: FailureState | None) -> FailureState | None:
            state = current or FailureState()
            if checkpoint_id <= state.last_completed_id:
                return None
            # failures of newer checkpoints (concurrent ones) still count
            newer = tuple(i for i in state.failed_ids if i > checkpoint_id)
            cleared = tuple(i for i in state.reset_ids if i > checkpoint_id)
            return replace(
                state,
                failed_ids=newer,
                reset_ids=cleared,
                last_completed_id=checkpoint_id,
                updated_at=now,
            )

        return self._update(reset)

    def reset(self, now: float, reason: str = "reset", *, completed_up_to: int = 0) -> FailureState:
        """RUNNING, with no failure counted. A corrupt record is replaced (on its etag):
        the counter is the only thing it holds, and a reset starts it over anyway;
        `completed_up_to` (the head) is then its newest completion, so a late failure
        of an older checkpoint still does not count."""

        def clear(current: FailureState | None) -> FailureState:
            state = current or FailureState()
            return replace(
                state,
                status=PipelineStatus.RUNNING,
                failed_ids=(),
                reason=reason,
                updated_at=now,
                reset_ids=tuple(sorted({*state.reset_ids, *state.failed_ids})),
            )

        while True:
            try:
                return self._update(clear)
            except CorruptRecord:
                fresh = FailureState(
                    last_completed_id=completed_up_to,
                    reason=f"{reason}; the corrupt record was replaced",
                    updated_at=now,
                )
                if self._replace_corrupt(fresh):
                    return fresh

    def _replace_corrupt(self, fresh: FailureState) -> bool:
        """Write `fresh` over the record if it is still the corrupt one read (False: it
        changed or vanished meanwhile; read it again). A record of a newer version is
        never replaced: it is not corrupt, and `_update` raises for it."""
        try:
            found = self._store.get(self._key)
            try:
                self._decode(self._key, found.data)
                return False  # readable now: another writer replaced it
            except CorruptRecord:
                pass
            self._store.replace(self._key, FailureState.encode(fresh), found.etag)
            return True
        except (ObjectNotFound, PreconditionFailed):
            return False

    def _update(self, mutate: Callable[[FailureState | None], FailureState | None]) -> FailureState:
        result = update_record(self._store, self._key, self._decode, FailureState.encode, mutate)
        return result or FailureState()
