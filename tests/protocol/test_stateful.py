"""Random sequences of protocol operations against a model (hypothesis stateful).

The machine triggers checkpoints and savepoints, acknowledges (valid, duplicate,
unknown, to aborted checkpoints), declines, lets checkpoints expire, finalizes,
restores and collects garbage, all on a fake clock, and after every step checks
DESIGN.md's invariants 1-7 against what it has seen so far:

1. at most one outcome per checkpoint, byte-for-byte the same ever after;
2. COMPLETED only with every expected ack, every referenced file intact;
3. duplicate, unknown and discarded acks change nothing and leave no files;
4. a trigger's base is the head or the newest pending checkpoint of the timeline,
   and its base_barrier is that base's barrier;
5. ids strictly increase and are never reused, across restores too;
6. the head moves only forward, except through a restore (a new generation);
7. no file referenced by a retained checkpoint, the head or a pending checkpoint's
   acks ever disappears.

Runs at full length on the local backend and shorter on SeaweedFS. Each example uses
its own pipeline name in the test's store, so examples never see each other.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from batchpoint.errors import CheckpointNotFound, RestoreRefused, TriggerRefused
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    DeclineResult,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.failures import PipelineStatus
from batchpoint.protocol.layout import TaskId, parse_checkpoint_dir_name
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.storage.base import ObjectInfo, ObjectStore
from support.clock import FakeClock
from support.restoring import restore

# -- settings --------------------------------------------------------------------------
# Profiles, so a run can be lengthened (`settings.load_profile`) without editing the
# test. Under CI (or a derandomizing profile given with --hypothesis-profile) the
# examples are derived from the test's name: the same sequences on every run.
_DERANDOMIZE = settings.default.derandomize or bool(os.environ.get("CI"))
_COMMON: dict[str, Any] = {
    "deadline": None,
    "derandomize": _DERANDOMIZE,
    "database": None if _DERANDOMIZE else settings.default.database,
    "suppress_health_check": [HealthCheck.too_slow],
}
settings.register_profile(
    "batchpoint-stateful-local", max_examples=60, stateful_step_count=40, **_COMMON
)
settings.register_profile(
    "batchpoint-stateful-s3", max_examples=8, stateful_step_count=15, **_COMMON
)

TASKS_OF = [("a", 2), ("b", 1)]
UNKNOWN_TASKS = (
    TaskId("zz", 0),
    TaskId("a", 7),
    TaskId("b", 1),
)  # a missing operator, and subtasks out of range
TIMEOUT = 30.0
_EXAMPLES = itertools.count()


@dataclass
class _Ack:
    attempt: str
    acked_at: float
    handles: tuple[FileHandle, ...]
    etag: str = ""


@dataclass
class _Model:
    """What the machine has seen and what therefore must hold from now on."""

    triggered: dict[int, PendingCheckpoint] = field(default_factory=dict)
    outcome_etags: dict[int, str] = field(default_factory=dict)  # first seen, forever
    outcomes: dict[int, CheckpointOutcome] = field(default_factory=dict)
    pruned: set[int] = field(default_factory=set)  # records removed by GC history_limit
    acks: dict[int, dict[str, _Ack]] = field(default_factory=dict)  # the winning acks
    gone: set[str] = field(default_factory=set)  # files that must never exist again
    max_id: int = 0
    generation: int = 0
    head: int | None = None
    retained: set[int] = field(default_factory=set)
    failed: list[int] = field(default_factory=list)
    last_completed: int = 0
    pipeline_failed: bool = False

    def status(self, cid: int) -> CheckpointStatus:
        outcome = self.outcomes.get(cid)
        return outcome.status if outcome else CheckpointStatus.PENDING

    def pending(self) -> list[int]:
        return sorted(cid for cid in self.triggered if cid not in self.outcomes)

    def settled(self, status: CheckpointStatus) -> list[int]:
        return sorted(c for c, o in self.outcomes.items() if o.status is status)


class ProtocolMachine(RuleBasedStateMachine):
    store: ClassVar[ObjectStore]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.name = f"p{next(_EXAMPLES)}-{uuid.uuid4().hex[:6]}"
        self.spec = simple_pipeline(self.name, TASKS_OF)
        self.tasks = self.spec.expected_tasks()
        self.m = _Model()
        self.c: CheckpointCoordinator | None = None
        self.config = CheckpointConfig()
        self.offset = 0
        self.attempts = itertools.count(1)

    # == setup ===========================================================================

    @initialize(
        max_concurrent=st.integers(1, 3),
        num_retained=st.integers(1, 3),
        tolerable=st.integers(0, 3),
        min_pause=st.sampled_from([0.0, 5.0]),
        verify_checksums=st.booleans(),
    )
    def setup(
        self,
        max_concurrent: int,
        num_retained: int,
        tolerable: int,
        min_pause: float,
        verify_checksums: bool,
    ) -> None:
        self.config = CheckpointConfig(
            timeout=TIMEOUT,
            min_pause=min_pause,
            max_concurrent=max_concurrent,
            tolerable_failed_checkpoints=tolerable,
            num_retained=num_retained,
            verify_checksums=verify_checksums,
        )
        self.c = CheckpointCoordinator(self.store, self.spec, self.config, clock=self.clock)
        self.c.register(self.spec)

    @property
    def co(self) -> CheckpointCoordinator:
        assert self.c is not None
        return self.c

    # == helpers =========================================================================

    def _write_files(self, cid: int, task: TaskId, attempt: str, count: int) -> list[FileHandle]:
        out = []
        prefix = self.co.layout.task_data_prefix(cid, task, attempt)
        for part in range(count):
            body = f"{self.name}/{cid}/{task}/{attempt}/{part}".encode() * (part + 1)
            key = f"{prefix}part-{part}.parquet"
            self.store.put(key, body)
            out.append(FileHandle(key, len(body), hashlib.sha256(body).hexdigest(), rows=part))
        return out

    def _own(self, cid: int, task: TaskId, attempt: str, handles: list[FileHandle]) -> list[str]:
        prefix = self.co.layout.task_data_prefix(cid, task, attempt)
        return [h.path for h in handles if h.path.startswith(prefix)]

    def _assert_discarded(self, cid: int, task: TaskId, attempt: str, paths: list[str]) -> None:
        """Invariant 3: the files of an ack that lost are deleted, at once."""
        for path in paths:
            assert not self.store.exists(path), f"{cid}/{task}/{attempt}: {path} left behind"
        self.m.gone.update(paths)

    def _new_attempt(self) -> str:
        return f"att-{next(self.attempts)}"

    def _sync(self) -> None:
        """Take in outcomes decided since the last look, in id order (the order the
        coordinator settles them in), and update the model's head, retention and
        failure counts the way the protocol says they must move."""
        c = self.co
        for cid in sorted(self.m.triggered):
            if cid in self.m.outcomes or cid in self.m.pruned:
                continue
            outcome = c.get_outcome(cid)
            if outcome is None:
                continue
            raw = self.store.get(c.layout.outcome(cid))
            self.m.outcome_etags[cid] = raw.etag
            self.m.outcomes[cid] = outcome
            self._on_outcome(outcome)

    def _on_outcome(self, outcome: CheckpointOutcome) -> None:
        cid = outcome.checkpoint_id
        pending = outcome.pending
        # the outcome carries the trigger record unchanged: a replay reads the same input
        assert pending.to_body() == self.m.triggered[cid].to_body(), cid
        if outcome.status is CheckpointStatus.COMPLETED:
            self._check_completed(outcome)
            if pending.restore_generation == self.m.generation and (
                self.m.head is None or cid > self.m.head
            ):
                self.m.head = cid
            self.m.retained.add(cid)
            self._subsume()
            if not pending.is_savepoint and cid > self.m.last_completed:
                self.m.last_completed = cid
                self.m.failed = [i for i in self.m.failed if i > cid]
        else:
            assert outcome.reason is not None and outcome.completed is None
            counts = outcome.reason.counts_as_failure and not pending.is_savepoint
            if counts and cid > self.m.last_completed and cid not in self.m.failed:
                self.m.failed = sorted([*self.m.failed, cid])
                if len(self.m.failed) > self.config.tolerable_failed_checkpoints:
                    self.m.pipeline_failed = True

    def _subsume(self) -> None:
        marks = sorted(self.m.retained)
        subsumable = [
            cid
            for cid in marks
            if not self.m.outcomes[cid].pending.is_savepoint
            and not self.m.outcomes[cid].pending.properties.get("retain_forever")
        ]
        excess = subsumable[: max(0, len(subsumable) - self.config.num_retained)]
        # never the head, nor the base of a pending checkpoint (a trigger's fence)
        bases = {self.m.triggered[p].base_checkpoint_id for p in self.m.pending()}
        self.m.retained -= {cid for cid in excess if cid != self.m.head and cid not in bases}

    def _check_completed(self, outcome: CheckpointOutcome) -> None:
        """Invariant 2, at the moment of completion."""
        cid = outcome.checkpoint_id
        assert outcome.completed is not None
        acks = outcome.completed.acks
        assert [a.task for a in acks] == list(outcome.pending.expected_tasks), cid
        model_acks = self.m.acks.get(cid, {})
        for ack in acks:
            assert ack.attempt == model_acks[ack.task].attempt, (cid, ack.task)
            assert ack.handles == model_acks[ack.task].handles, (cid, ack.task)
            assert ack.acked_at <= outcome.pending.deadline, (cid, ack.task)
        for handle in outcome.completed.handles:
            data = self.store.get(handle.path).data
            assert len(data) == handle.size, handle.path
            assert hashlib.sha256(data).hexdigest() == handle.sha256, handle.path

    def _must_exist(self) -> dict[str, int]:
        """Invariant 7's protected set: path -> size."""
        keep: dict[str, int] = {}
        holders = set(self.m.retained)
        if self.m.head is not None:
            holders.add(self.m.head)
        for cid in holders:
            completed = self.m.outcomes[cid].completed
            assert completed is not None
            keep.update((h.path, h.size) for h in completed.handles)
        for cid in self.m.pending():
            for ack in self.m.acks.get(cid, {}).values():
                keep.update((h.path, h.size) for h in ack.handles)
        return keep

    def _objects(self) -> dict[str, ObjectInfo]:
        # One listing shows every outcome, ack and data file of the pipeline.
        return {i.key: i for i in self.store.list(self.co.layout.checkpoints_prefix)}

    def _base_candidates(self, head_id: int | None, generation: int) -> int | None:
        chained = [
            cid
            for cid in self.m.pending()
            if self.m.triggered[cid].restore_generation == generation and cid > (head_id or 0)
        ]
        return chained[-1] if chained else head_id

    # == trigger =========================================================================

    @precondition(lambda self: self.c is not None)
    @rule(savepoint=st.booleans(), retain_forever=st.booleans())
    def trigger(self, savepoint: bool, retain_forever: bool) -> None:
        c = self.co
        self.offset += 1
        kind = CheckpointType.SAVEPOINT if savepoint else CheckpointType.CHECKPOINT
        kept = retain_forever and not savepoint
        properties = CheckpointProperties(retain_forever=True) if kept else None
        barrier = {"src": {"p0": self.offset}}
        try:
            pending = c.trigger(barrier, checkpoint_type=kind, properties=properties)
        except TriggerRefused as refused:
            self._sync()  # the trigger settled overdue/complete checkpoints first
            self._check_refusal(refused, kind)
            assert c.ids.peek() == self.m.max_id + 1, "a refused trigger used up an id"
            return
        self._sync()
        cid = pending.checkpoint_id
        # Invariant 5: ids only grow, whatever aborts and restores happened before.
        assert cid > self.m.max_id, (cid, self.m.max_id)
        assert cid == self.m.max_id + 1, "a trigger that was not refused skipped an id"
        self.m.max_id = cid
        assert not self.m.pipeline_failed, "a FAILED pipeline took a checkpoint"
        if kind is CheckpointType.CHECKPOINT:
            running = [p for p in self.m.pending() if not self.m.triggered[p].is_savepoint]
            assert len(running) < self.config.max_concurrent, running
        # Invariant 4: the base is the head, or the newest pending one of the timeline.
        head = c.head.get()
        assert pending.restore_generation == head.restore_generation == self.m.generation
        base = self._base_candidates(head.checkpoint_id, head.restore_generation)
        assert pending.base_checkpoint_id == base, (pending.base_checkpoint_id, base)
        expected_barrier = dict(self.m.triggered[base].barrier) if base is not None else {}
        assert dict(pending.base_barrier) == expected_barrier
        assert dict(pending.barrier) == barrier
        assert pending.expected_tasks == self.tasks
        assert pending.deadline == self.clock.now + TIMEOUT
        self.m.triggered[cid] = pending

    def _check_refusal(self, refused: TriggerRefused, kind: CheckpointType) -> None:
        c = self.co
        reason = refused.reason
        if reason is CheckpointFailureReason.PIPELINE_FAILED:
            assert self.m.pipeline_failed
            assert c.failures.state().status is PipelineStatus.FAILED
            return
        assert not self.m.pipeline_failed, f"refused {reason} while FAILED"
        assert kind is CheckpointType.CHECKPOINT, f"a savepoint was refused: {refused}"
        if reason is CheckpointFailureReason.TOO_MANY_CONCURRENT:
            running = [
                p
                for p in self.m.pending()
                if not self.m.triggered[p].is_savepoint
                and self.m.triggered[p].restore_generation == self.m.generation
            ]
            assert len(running) >= self.config.max_concurrent, (running, str(refused))
        elif reason is CheckpointFailureReason.MINIMUM_PAUSE:
            assert self.m.head is not None
            decided = self.m.outcomes[self.m.head].decided_at
            assert self.clock.now - decided < self.config.min_pause, str(refused)
        else:
            raise AssertionError(f"unexpected refusal {reason}: {refused}")

    @precondition(lambda self: self.c is not None)
    @rule(seconds=st.integers(1, 8))
    def tick(self, seconds: int) -> None:
        self.clock.now += seconds

    # == acknowledge =====================================================================

    def _unacked(self) -> list[tuple[int, str]]:
        return [
            (cid, task)
            for cid in self.m.pending()
            for task in self.tasks
            if task not in self.m.acks.get(cid, {})
        ]

    @precondition(lambda self: self.c is not None and self._unacked())
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        cid, task = data.draw(st.sampled_from(self._unacked()), label="ack")
        self._ack(data, cid, task)

    @precondition(lambda self: self.c is not None and self._unacked())
    @rule(data=st.data())
    def ack_all(self, data: st.DataObject) -> None:
        """Every task still running finishes its snapshot (the common case, which one
        ack at a time would rarely reach before the clock expires the checkpoint)."""
        cid = data.draw(st.sampled_from(sorted({c for c, _ in self._unacked()})), label="all")
        for task in self.tasks:
            if task not in self.m.acks.get(cid, {}):
                self._ack(data, cid, task)

    def _ack(self, data: st.DataObject, cid: int, task: TaskId) -> None:
        attempt = self._new_attempt()
        handles = self._write_files(cid, task, attempt, data.draw(st.integers(0, 2)))
        # Incremental state: share a file of the base checkpoint instead of rewriting it.
        base = self.m.triggered[cid].base_checkpoint_id
        if base is not None and self.m.status(base) is CheckpointStatus.COMPLETED:
            base_files = self.m.outcomes[base].completed.handles  # type: ignore[union-attr]
            if base_files and data.draw(st.booleans(), label="share"):
                handles.append(data.draw(st.sampled_from(base_files), label="shared"))
        result = self.co.acknowledge(cid, task, attempt, handles)
        assert result is TaskAcknowledgeResult.SUCCESS, (cid, task, result)
        etag = self.store.get(self.co.layout.ack(cid, task)).etag
        self.m.acks.setdefault(cid, {})[task] = _Ack(attempt, self.clock.now, tuple(handles), etag)
        for h in handles:
            assert self.store.exists(h.path), h.path

    def _acked(self) -> list[tuple[int, str]]:
        return [
            (cid, task)
            for cid, acks in sorted(self.m.acks.items())
            if cid not in self.m.pruned and self.m.status(cid) is not CheckpointStatus.ABORTED
            for task in acks
        ]

    @precondition(lambda self: self.c is not None and self._acked())
    @rule(data=st.data(), same_attempt=st.booleans())
    def duplicate_ack(self, data: st.DataObject, same_attempt: bool) -> None:
        """A retry or a speculative attempt of a task that already acked."""
        cid, task = data.draw(st.sampled_from(self._acked()), label="duplicate")
        winner = self.m.acks[cid][task]
        if same_attempt:
            # the winning attempt acking again (its ack call was retried): idempotent
            result = self.co.acknowledge(cid, task, winner.attempt, winner.handles)
            assert result is TaskAcknowledgeResult.SUCCESS, result
            # (files of a subsumed checkpoint may be collected already; the invariant
            # checks that every protected one is still there)
            return
        attempt = self._new_attempt()
        handles = self._write_files(cid, task, attempt, data.draw(st.integers(1, 2)))
        result = self.co.acknowledge(cid, task, attempt, handles)
        assert result is TaskAcknowledgeResult.DUPLICATE, (cid, task, result)
        self._assert_discarded(cid, task, attempt, self._own(cid, task, attempt, handles))
        assert self.store.get(self.co.layout.ack(cid, task)).etag == winner.etag

    @precondition(lambda self: self.c is not None and self.m.triggered)
    @rule(data=st.data())
    def unknown_ack(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(sorted(self.m.triggered)), label="checkpoint")
        task = data.draw(st.sampled_from(UNKNOWN_TASKS), label="unknown task")
        attempt = self._new_attempt()
        handles = self._write_files(cid, task, attempt, 1)
        result = self.co.acknowledge(cid, task, attempt, handles)
        if cid in self.m.pruned or self.m.status(cid) is CheckpointStatus.ABORTED:
            assert result is TaskAcknowledgeResult.DISCARDED, (cid, result)
        else:
            assert result is TaskAcknowledgeResult.UNKNOWN, (cid, result)
        self._assert_discarded(cid, task, attempt, [h.path for h in handles])
        assert not self.store.exists(self.co.layout.ack(cid, task))

    def _dead(self) -> list[int]:
        return sorted(set(self.m.settled(CheckpointStatus.ABORTED)) | self.m.pruned)

    @precondition(lambda self: self.c is not None and self._dead())
    @rule(data=st.data())
    def ack_to_aborted(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(self._dead()), label="aborted")
        task = data.draw(st.sampled_from(self.tasks), label="task")
        attempt = self._new_attempt()
        handles = self._write_files(cid, task, attempt, data.draw(st.integers(1, 2)))
        before = self.store.head(self.co.layout.ack(cid, task))
        result = self.co.acknowledge(cid, task, attempt, handles)
        assert result is TaskAcknowledgeResult.DISCARDED, (cid, task, result)
        self._assert_discarded(cid, task, attempt, [h.path for h in handles])
        assert self.store.head(self.co.layout.ack(cid, task)) == before

    # == decline, expire, finalize =======================================================

    @precondition(lambda self: self.c is not None and self.m.triggered)
    @rule(data=st.data())
    def decline(self, data: st.DataObject) -> None:
        pending = self.m.pending()
        settled = data.draw(st.integers(0, 3), label="settled") == 0
        pool = pending if pending and not settled else None
        cid = data.draw(st.sampled_from(pool or sorted(self.m.triggered)), label="checkpoint")
        task = data.draw(st.sampled_from([*self.tasks, UNKNOWN_TASKS[0]]), label="task")
        result = self.co.decline(cid, task, self._new_attempt(), "injected failure")
        if cid in self.m.pruned:
            expected = DeclineResult.UNKNOWN
        elif self.m.status(cid) is CheckpointStatus.COMPLETED:
            expected = DeclineResult.IGNORED_COMPLETED
        elif self.m.status(cid) is CheckpointStatus.ABORTED:
            expected = DeclineResult.ALREADY_ABORTED
        elif task not in self.tasks:
            expected = DeclineResult.UNKNOWN
        elif task in self.m.acks.get(cid, {}):
            expected = DeclineResult.IGNORED_ACKNOWLEDGED
        else:
            expected = DeclineResult.ABORTED
        assert result is expected, (cid, task, result, expected)
        self._sync()
        if expected is DeclineResult.ABORTED:
            outcome = self.m.outcomes[cid]
            assert outcome.reason is CheckpointFailureReason.DECLINED, outcome
            assert outcome.message == f"task {task} declined: injected failure"

    @precondition(lambda self: self.c is not None and self.m.pending())
    @rule()
    def expire(self) -> None:
        self.clock.now = max(self.m.triggered[cid].deadline for cid in self.m.pending()) + 1
        self.co.expire_overdue()
        self._sync()
        assert not self.m.pending(), f"still pending after every deadline: {self.m.pending()}"
        assert self.co.pending_checkpoints() == []

    def _predict_finalize(self, cid: int) -> tuple[CheckpointStatus, Any] | None:
        p = self.m.triggered[cid]
        acks = self.m.acks.get(cid, {})
        missing = [t for t in p.expected_tasks if t not in acks]
        late = [t for t, a in acks.items() if a.acked_at > p.deadline]
        if (missing and self.clock.now > p.deadline) or late:
            return CheckpointStatus.ABORTED, CheckpointFailureReason.EXPIRED
        if missing:
            return None
        base = p.base_checkpoint_id
        if base is not None and self.m.status(base) is CheckpointStatus.PENDING:
            return None  # waits for its base
        if base is not None and self.m.status(base) is CheckpointStatus.ABORTED:
            return CheckpointStatus.ABORTED, CheckpointFailureReason.BASE_ABORTED
        return CheckpointStatus.COMPLETED, None

    @precondition(lambda self: self.c is not None and self.m.triggered)
    @rule(data=st.data())
    def finalize(self, data: st.DataObject) -> None:
        pending = self.m.pending()
        # mostly a pending one; sometimes a settled one, which must answer idempotently
        settled = data.draw(st.integers(0, 3), label="settled") == 0
        pool = pending if pending and not settled else None
        cid = data.draw(st.sampled_from(pool or sorted(self.m.triggered)), label="checkpoint")
        if cid in self.m.pruned:
            with pytest.raises(CheckpointNotFound):
                self.co.try_finalize(cid)
            return
        if cid in self.m.outcomes:  # idempotent: the outcome that holds, unchanged
            again = self.co.try_finalize(cid)
            assert again == self.m.outcomes[cid]
            return
        expected = self._predict_finalize(cid)
        outcome = self.co.try_finalize(cid)
        self._sync()
        if expected is None:
            assert outcome is None, (cid, outcome)
            assert cid in self.m.pending()
        else:
            assert outcome is not None, (cid, expected)
            assert (outcome.status, outcome.reason) == expected, (cid, outcome, expected)

    # == restore, gc, reset ==============================================================

    @precondition(lambda self: self.c is not None and self.m.triggered)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        c = self.co
        not_retained = sorted(set(self.m.triggered) - self.m.retained)
        if not self.m.retained or (not_retained and data.draw(st.booleans(), label="refused")):
            cid = data.draw(st.sampled_from(not_retained), label="not retained")
            head = c.head.get()
            with pytest.raises(RestoreRefused, match=f"checkpoint {cid} .* is not retained"):
                restore(c, cid)
            assert c.head.get() == head
            return
        target = data.draw(st.sampled_from(sorted(self.m.retained)), label="target")
        was_pending = self.m.pending()
        head = restore(c, target)
        self._sync()
        for cid in was_pending:
            # aborted by the restore, or first, as its base was (the restore aborts in
            # id order, and each abort cascades to the checkpoints built on it)
            outcome = self.m.outcomes[cid]
            if outcome.reason is CheckpointFailureReason.BASE_ABORTED:
                assert outcome.pending.base_checkpoint_id in was_pending, outcome
            else:
                assert outcome.reason is CheckpointFailureReason.RESTORED, outcome
        self.m.generation += 1
        assert (head.checkpoint_id, head.restore_generation) == (target, self.m.generation)
        self.m.head = target
        self.m.failed = []
        self.m.pipeline_failed = False

    @precondition(lambda self: self.c is not None)
    @rule(history_limit=st.one_of(st.none(), st.integers(0, 2)))
    def gc(self, history_limit: int | None) -> None:
        c = self.co
        keep = self._must_exist()
        report = c.garbage_collector().collect(history_limit=history_limit)
        objects = self._objects()
        # Invariant 7: nothing still referenced went.
        for path, size in keep.items():
            assert path in objects and objects[path].size == size, f"GC deleted {path}"
        assert not set(report.deleted_files) & set(keep)
        for cid in report.pruned_checkpoints:
            assert cid in self.m.outcomes and cid not in self.m.retained and cid != self.m.head
            assert not any(k.startswith(c.layout.checkpoint(cid)) for k in objects), cid
            self.m.pruned.add(cid)
        # ... and everything else of a settled checkpoint did go.
        for cid in self.m.outcomes:
            for key in objects:
                if key.startswith(c.layout.data_prefix(cid)):
                    assert key in keep, f"GC left {key} of settled checkpoint {cid}"
        self.m.gone.update(p for p in report.deleted_files)

    @precondition(lambda self: self.c is not None and self.m.pipeline_failed)
    @rule()
    def reset_failures(self) -> None:
        self.co.reset_failures()
        self.m.failed = []
        self.m.pipeline_failed = False

    # == invariants ======================================================================

    @invariant()
    def protocol_invariants(self) -> None:
        if self.c is None:
            return
        c = self.c
        self._sync()
        objects = self._objects()
        active = {
            parse_checkpoint_dir_name(i.key.rsplit("/", 1)[-1])
            for i in self.store.list(c.layout.active_prefix)
        }
        # 1: one outcome, never rewritten (or gone only through GC history pruning)
        for cid in self.m.triggered:
            key = c.layout.outcome(cid)
            if cid in self.m.pruned:
                assert key not in objects, f"pruned checkpoint {cid} has an outcome again"
            elif cid in self.m.outcomes:
                assert key in objects, f"outcome of {cid} disappeared"
                assert objects[key].etag == self.m.outcome_etags[cid], f"outcome {cid} changed"
                assert cid not in active, f"settled checkpoint {cid} is still active"
            else:
                assert cid in active, f"pending checkpoint {cid} lost its record"
        # 3: acks are write-once; no loser ever wrote one
        acks_seen = {k for k in objects if "/acks/" in k}
        expected_acks = set()
        for cid, acks in self.m.acks.items():
            if cid in self.m.pruned:
                continue
            for task, ack in acks.items():
                key = c.layout.ack(cid, task)
                expected_acks.add(key)
                assert key in objects and objects[key].etag == ack.etag, f"ack {key} changed"
        assert acks_seen == expected_acks, acks_seen ^ expected_acks
        assert not self.m.gone & set(objects), self.m.gone & set(objects)
        # 6: the head, within a generation, only moves forward; it is the newest completed
        head = c.head.get()
        assert head.restore_generation == self.m.generation
        assert head.checkpoint_id == self.m.head, (head, self.m.head)
        # 7: every referenced file is there, with its size
        for path, size in self._must_exist().items():
            assert path in objects and objects[path].size == size, f"lost {path}"
        # retention and failure counting, as the model says
        retained = set(c.completed.retained_ids())
        assert retained == self.m.retained, (retained, self.m.retained)
        failures = c.failures.state()
        assert list(failures.failed_ids) == self.m.failed, (failures, self.m.failed)
        assert (failures.status is PipelineStatus.FAILED) == self.m.pipeline_failed, failures
        assert failures.last_completed_id == self.m.last_completed


def _run(store: ObjectStore, profile: str) -> None:
    machine = type("Machine", (ProtocolMachine,), {"store": store})
    run_state_machine_as_test(machine, settings=settings.get_profile(profile))


def test_protocol_state_machine_local(local_store: ObjectStore) -> None:
    _run(local_store, "batchpoint-stateful-local")


@pytest.mark.s3
def test_protocol_state_machine_s3(s3_store: ObjectStore) -> None:
    _run(s3_store, "batchpoint-stateful-s3")
