"""Real multi-process races on the protocol's conditional writes.

Every worker is a separate interpreter (the conftest's 'spawn' process pool) that opens
its own store, and all of them are released by one barrier (a Manager's, whose proxy
pickles into pool tasks), so the conditional writes really do collide. Nothing sleeps
to keep racers apart: a race the protocol loses shows up as a duplicate id, two
outcomes, two winning acks, or a head that moved backwards.

Each test runs against the local backend and a real SeaweedFS (the `store` fixture).
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing as mp
import pickle
import random
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.managers import SyncManager
from typing import Any

import pytest

from batchpoint.errors import ObjectNotFound
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.completed_store import settle_outcome
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.control import ControlRecord, PendingEntry
from batchpoint.protocol.control_store import ControlStore, HeadStore
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.ids import CheckpointIDCounter
from batchpoint.protocol.layout import PipelineLayout, TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.storage import open_store
from batchpoint.storage.base import ObjectStore

CTX = mp.get_context("spawn")
# Generous: a loaded 2-core CI box with a real S3 server next to it is slow.
BARRIER_TIMEOUT = 120.0
RESULT_TIMEOUT = 300.0

# A store travels to a worker as itself when it pickles (S3), else as its URI (the local
# backend holds a thread lock); either way every process opens its own connection.
StoreRef = ObjectStore | str


def _ref(store: ObjectStore) -> StoreRef:
    try:
        pickle.dumps(store)
    except (TypeError, pickle.PicklingError, AttributeError):
        return store.uri
    return store


def _open(ref: StoreRef) -> ObjectStore:
    return open_store(ref) if isinstance(ref, str) else ref


def _is_s3(store: ObjectStore) -> bool:
    return store.uri.startswith("s3://")


# == running workers =======================================================================

Worker = Callable[..., Any]
# The conftest's pool has 4 warm 'spawn' workers; a race needs each party in its own one.
WORKERS = 4


@pytest.fixture(scope="module")
def manager() -> Iterator[SyncManager]:
    """Barriers and shared values that pickle into pool tasks (their proxies do)."""
    with CTX.Manager() as m:
        yield m


def _entry(target: Worker, index: int, args: tuple[Any, ...], barrier: Any) -> tuple[bool, Any]:
    try:
        return True, target(index, barrier, *args)
    except BaseException:
        barrier.abort()  # wake everyone now instead of at the barrier timeout
        return False, traceback.format_exc()


def _race(
    pool: ProcessPoolExecutor,
    manager: SyncManager,
    target: Worker,
    per_worker: Sequence[tuple[Any, ...]],
    main: Callable[[Any], None] | None = None,
) -> list[Any]:
    """Run `target(index, barrier, *args)` in one pool process per args tuple and return
    their results in worker order. With `main`, this process joins the barrier too and
    runs `main(barrier)` alongside (to prepare rounds and check them)."""
    assert len(per_worker) <= WORKERS, "more parties than pool processes would deadlock"
    barrier = manager.Barrier(len(per_worker) + (1 if main else 0), timeout=BARRIER_TIMEOUT)
    futures = [pool.submit(_entry, target, i, args, barrier) for i, args in enumerate(per_worker)]

    def worker_failures(timeout: float) -> list[str]:
        out = []
        for i, future in enumerate(futures):
            try:
                ok, value = future.result(timeout=timeout)
            except Exception as exc:  # the pool itself broke, or the worker hangs
                out.append(f"worker {i}: {exc!r}")
                continue
            if not ok:
                out.append(f"worker {i}:\n{value}")
        return out

    if main is not None:
        try:
            main(barrier)
        except BaseException:
            barrier.abort()
            failures = worker_failures(30.0)
            if failures:  # a worker's traceback explains a broken barrier best
                pytest.fail("\n".join(failures))
            raise
    failures = worker_failures(RESULT_TIMEOUT)
    if failures:
        pytest.fail("\n".join(failures))
    return [future.result()[1] for future in futures]


# == helpers =============================================================================


def _write_state(
    store: ObjectStore, c: CheckpointCoordinator, cid: int, task: TaskId, attempt: str
) -> tuple[FileHandle, ...]:
    """What a task attempt writes before it acks: one file in its own attempt folder."""
    body = f"{cid}/{task}/{attempt}".encode() * 8
    key = c.layout.task_data_prefix(cid, task, attempt) + "part-0.parquet"
    store.put(key, body)
    return (FileHandle(key, len(body), hashlib.sha256(body).hexdigest(), rows=1),)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _outcome_digest(store: ObjectStore, c: CheckpointCoordinator, cid: int) -> str | None:
    try:
        return _digest(store.get(c.layout.outcome(cid)).data)
    except ObjectNotFound:
        return None


def _non_decreasing(values: Sequence[int]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(values))


# == 1. id allocation ======================================================================


def _allocate_ids(index: int, barrier: Any, ref: StoreRef, pipeline: str, count: int) -> list[int]:
    counter = CheckpointIDCounter(_open(ref), PipelineLayout(pipeline))
    barrier.wait()
    return [counter.get_and_increment() for _ in range(count)]


def test_id_allocation_race(
    store: ObjectStore, process_pool: ProcessPoolExecutor, manager: SyncManager
) -> None:
    workers, each = (WORKERS, 15) if _is_s3(store) else (WORKERS, 40)
    got = _race(process_pool, manager, _allocate_ids, [(_ref(store), "ids", each)] * workers)

    for index, ids in enumerate(got):
        assert len(ids) == each
        assert all(a < b for a, b in itertools.pairwise(ids)), (
            f"worker {index} saw ids go backwards: {ids}"
        )
    everything = sorted(i for ids in got for i in ids)
    duplicates = sorted({i for i in everything if everything.count(i) > 1})
    assert not duplicates, f"ids handed out twice: {duplicates}"
    assert everything == list(range(1, workers * each + 1))
    assert CheckpointIDCounter(store, PipelineLayout("ids")).peek() == workers * each + 1


# == 2. finalize against expire ===========================================================

FINALIZE, EXPIRE, ACK = "finalize", "expire", "ack"


@dataclass(frozen=True)
class _Round:
    """One checkpoint raced over. kind 0: every ack is in, finalizers race expirers;
    kind 1: the last ack races them too; kind 2: the deadline has passed and the last
    (late) ack races them."""

    number: int

    @property
    def kind(self) -> int:
        return self.number % 3

    def role(self, worker: int, workers: int) -> str:
        if self.kind in (1, 2) and worker == self.number % workers:
            return ACK
        return FINALIZE if (worker + self.number) % 2 == 0 else EXPIRE


FE_SPEC = simple_pipeline("fe", [("op", 2)])
FE_LAST_TASK = FE_SPEC.expected_tasks()[-1]
# Failures must never make the pipeline refuse the next round's trigger.
FE_CONFIG = CheckpointConfig(timeout=600, tolerable_failed_checkpoints=10_000, num_retained=2)


def _finalize_or_expire(
    index: int, barrier: Any, ref: StoreRef, rounds: int, workers: int, current: Any, polls: Any
) -> list[tuple[int, int, str, str, str | None]]:
    store = _open(ref)
    c = CheckpointCoordinator(store, "fe", FE_CONFIG)
    seen = []
    for number in range(rounds):
        r = _Round(number)
        role = r.role(index, workers)
        barrier.wait()  # main has triggered the round's checkpoint
        cid = current.value
        spread = 2 * polls.value + 1
        handles = _write_state(store, c, cid, FE_LAST_TASK, f"w{index}") if role == ACK else ()
        barrier.wait()  # go
        if role == ACK:
            result = c.acknowledge(cid, FE_LAST_TASK, f"w{index}", handles).value
        elif role == FINALIZE:
            outcome = c.try_finalize(cid)
            result = outcome.status.value if outcome else "none"
        else:
            # What an expiry sensor does: look at the progress, find the deadline passed,
            # abort. The number of polls varies around what a finalize costs on this
            # backend, so that each side gets to write first in some rounds.
            for _ in range(1 + (number + index) % spread):
                c.progress(cid)
            result = c.abort(cid, CheckpointFailureReason.EXPIRED, "deadline passed").status.value
        seen.append((number, cid, role, result, _outcome_digest(store, c, cid)))
        barrier.wait()  # done: main checks the round
    return seen


def _calibrate(store: ObjectStore, c: CheckpointCoordinator) -> int:
    """How many progress polls take as long as a finalize's reads before its write, on
    this backend (one warm-up checkpoint, completed)."""
    pending = c.trigger({"src": {"p0": -1}})
    cid = pending.checkpoint_id
    for task in pending.expected_tasks:
        c.acknowledge(cid, task, "warmup", _write_state(store, c, cid, task, "warmup"))
    started = time.perf_counter()
    for _ in range(3):
        c.progress(cid)
    poll = (time.perf_counter() - started) / 3
    started = time.perf_counter()
    outcome = c.try_finalize(cid)
    finalize = time.perf_counter() - started
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    # about half a finalize is spent before its outcome write (the rest is settling)
    return max(1, round(finalize / 2 / poll))


def test_finalize_races_expire(
    store: ObjectStore, process_pool: ProcessPoolExecutor, manager: SyncManager
) -> None:
    workers, rounds = (WORKERS, 9) if _is_s3(store) else (WORKERS, 18)
    c = CheckpointCoordinator(store, FE_SPEC, FE_CONFIG)
    c.register(FE_SPEC)
    current = manager.Value("q", 0)
    polls = manager.Value("q", 1)
    observed: dict[int, dict[str, Any]] = {}

    def main(barrier: Any) -> None:
        polls.value = _calibrate(store, c)
        last_completed: int | None = c.head.get().checkpoint_id
        for number in range(rounds):
            r = _Round(number)
            timeout = 1e-3 if r.kind == 2 else None  # kind 2: overdue before anyone acks
            pending = c.trigger({"src": {"p0": number}}, timeout=timeout)
            cid = pending.checkpoint_id
            current.value = cid
            tasks = pending.expected_tasks if r.kind == 0 else pending.expected_tasks[:-1]
            for task in tasks:
                handles = _write_state(store, c, cid, task, "main")
                assert c.acknowledge(cid, task, "main", handles) is TaskAcknowledgeResult.SUCCESS
            if r.kind == 2:
                # The deadline is real time; make sure it is behind us before the race.
                while time.time() <= pending.deadline:
                    time.sleep(pending.deadline - time.time() + 1e-3)
            barrier.wait()
            barrier.wait()  # go
            barrier.wait()  # done

            raw = store.get(c.layout.outcome(cid)).data
            outcome = CheckpointOutcome.decode(c.layout.outcome(cid), raw)
            head = c.head.get()
            retained = c.completed.retained_ids()
            failures = c.failures.state()
            where = f"round {number} (kind {r.kind}), checkpoint {cid}"
            assert not store.exists(c.layout.active(cid)), f"{where}: still active"
            if outcome.status is CheckpointStatus.COMPLETED:
                assert r.kind != 2, f"{where}: completed with a late ack"
                assert head.checkpoint_id == cid, f"{where}: completed, head {head}"
                assert cid in retained, f"{where}: completed, not retained {retained}"
                assert failures.last_completed_id == cid and not failures.failed_ids, (
                    f"{where}: completed, failures {failures}"
                )
                assert outcome.completed is not None
                for h in outcome.completed.handles:
                    info = store.head(h.path)
                    assert info is not None and info.size == h.size, f"{where}: {h.path}"
                last_completed = cid
            else:
                assert outcome.reason is CheckpointFailureReason.EXPIRED, (
                    f"{where}: aborted for {outcome.reason}: {outcome.message}"
                )
                assert head.checkpoint_id == last_completed, f"{where}: aborted, head {head}"
                assert cid not in retained, f"{where}: aborted but retained"
                assert cid in failures.failed_ids, f"{where}: failure not counted {failures}"
                assert failures.last_completed_id == (last_completed or 0)
            acker = f"w{number % workers}"
            ack_files = [
                i.key for i in store.list(c.layout.task_data_prefix(cid, FE_LAST_TASK, acker))
            ]
            observed[number] = {"digest": _digest(raw), "outcome": outcome, "ack_files": ack_files}

    seen = _race(
        process_pool,
        manager,
        _finalize_or_expire,
        [(_ref(store), rounds, workers, current, polls)] * workers,
        main=main,
    )

    statuses = {CheckpointStatus.COMPLETED: 0, CheckpointStatus.ABORTED: 0}
    for number in range(rounds):
        r = _Round(number)
        truth = observed[number]
        outcome: CheckpointOutcome = truth["outcome"]
        statuses[outcome.status] += 1
        for worker, rows in enumerate(seen):
            _, cid, role, result, digest = rows[number]
            where = f"round {number}, checkpoint {cid}, worker {worker} ({role})"
            # Invariant 1: every process saw the very same single outcome record (or, a
            # finalizer that ran before the racing ack and the acker itself, none yet).
            if digest is not None or role == EXPIRE:
                assert digest == truth["digest"], f"{where}: saw another outcome"
            if role == FINALIZE:
                if result == "none":
                    # only while the racing last ack was missing; an expirer may still
                    # have settled it before this worker read the outcome back
                    assert r.kind == 1, f"{where}: finalize said none"
                else:
                    assert digest is not None, f"{where}: finalize wrote no outcome"
                    assert result == outcome.status.value, f"{where}: finalize said {result}"
            elif role == EXPIRE:
                assert result == outcome.status.value, f"{where}: abort said {result}"
            else:
                if outcome.status is CheckpointStatus.COMPLETED:
                    assert result == TaskAcknowledgeResult.SUCCESS.value, where
                if result == TaskAcknowledgeResult.DISCARDED.value:
                    assert outcome.status is CheckpointStatus.ABORTED, where
                    assert not truth["ack_files"], f"{where}: discarded files left"
                else:
                    assert result == TaskAcknowledgeResult.SUCCESS.value, where
                    assert truth["ack_files"], f"{where}: the acked attempt's files are gone"
    # Which side wins is up to the scheduler; both must only ever agree.
    print(f"outcomes over {rounds} rounds: {dict(statuses)}")


# == 3. one task acked by several attempts ================================================

DUP_CONFIG = CheckpointConfig(timeout=600)


def _ack_as_attempt(
    index: int, barrier: Any, ref: StoreRef, cid: int, tasks: list[TaskId]
) -> list[tuple[str, str, str, list[str]]]:
    store = _open(ref)
    c = CheckpointCoordinator(store, "dups", DUP_CONFIG)
    out = []
    for task in tasks:
        attempt = f"attempt-{index}"
        handles = _write_state(store, c, cid, task, attempt)
        barrier.wait()
        result = c.acknowledge(cid, task, attempt, handles)
        out.append((task, attempt, result.value, [h.path for h in handles]))
    return out


def test_same_task_acked_by_concurrent_attempts(
    store: ObjectStore, process_pool: ProcessPoolExecutor, manager: SyncManager
) -> None:
    workers, parallelism = (WORKERS, 3) if _is_s3(store) else (WORKERS, 6)
    spec = simple_pipeline("dups", [("op", parallelism)])
    c = CheckpointCoordinator(store, spec, DUP_CONFIG)
    c.register(spec)
    pending = c.trigger({"src": {"p0": 1}})
    cid = pending.checkpoint_id
    tasks = list(pending.expected_tasks)

    got = _race(process_pool, manager, _ack_as_attempt, [(_ref(store), cid, tasks)] * workers)

    winners: dict[str, str] = {}
    for i, task in enumerate(tasks):
        rows = [worker_rows[i] for worker_rows in got]
        results = sorted(r[2] for r in rows)
        assert results == ["DUPLICATE"] * (workers - 1) + ["SUCCESS"], f"{task}: {results}"
        (winner,) = [r for r in rows if r[2] == "SUCCESS"]
        winners[task] = winner[1]
        ack = c.acks(cid)[task]
        assert ack.attempt == winner[1], f"{task}: ack record is {ack.attempt}, winner {winner}"
        for _, attempt, result, paths in rows:
            for path in paths:
                if result == "SUCCESS":
                    assert store.exists(path), f"{task}: winner {attempt} lost {path}"
                else:
                    assert not store.exists(path), f"{task}: loser {attempt} left {path}"
            prefix = c.layout.task_data_prefix(cid, task, attempt)
            left = [i.key for i in store.list(prefix)]
            assert bool(left) == (result == "SUCCESS"), f"{task}/{attempt}: {left}"

    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    assert outcome.completed is not None
    assert {a.task: a.attempt for a in outcome.completed.acks} == winners


# == 4. concurrent head moves ==============================================================


def _completed(pipeline: str, checkpoint_id: int) -> CheckpointOutcome:
    pending = PendingCheckpoint(
        pipeline=pipeline,
        checkpoint_id=checkpoint_id,
        type=CheckpointType.CHECKPOINT,
        base_checkpoint_id=None,
        restore_generation=0,
        barrier={},
        base_barrier={},
        expected_tasks=(),
        trigger_time=0.0,
        deadline=4e9,
    )
    completed = CompletedCheckpoint(pending, (), 1.0)
    return CheckpointOutcome(CheckpointStatus.COMPLETED, pending, 1.0, completed=completed)


def _settle_completions(
    index: int, barrier: Any, ref: StoreRef, pipeline: str, offers: list[int]
) -> list[int]:
    control = ControlStore(_open(ref), PipelineLayout(pipeline), time.time)
    observed = []
    barrier.wait()
    for cid in offers:
        outcome = _completed(pipeline, cid)
        # The head moves only with the settle CAS of a completed checkpoint.
        control.update(lambda now, o=outcome: settle_outcome(now, o, 3, time.time()))
        observed.append(control.load().head or 0)
    return observed


def test_settled_completions_race_and_the_head_only_moves_forward(
    store: ObjectStore, process_pool: ProcessPoolExecutor, manager: SyncManager
) -> None:
    workers, each = (WORKERS, 12) if _is_s3(store) else (WORKERS, 30)
    top = workers * each * 4
    offers = [[random.Random(i).randint(1, top) for _ in range(each)] for i in range(workers)]
    admitted = tuple(
        PendingEntry(cid, CheckpointType.CHECKPOINT, None, 0, 4e9) for cid in range(1, top + 1)
    )
    ControlStore(store, PipelineLayout("heads"), time.time).update(
        lambda _: ControlRecord(pending=admitted)
    )
    args = [(_ref(store), "heads", o) for o in offers]

    got = _race(process_pool, manager, _settle_completions, args)

    for index, observed in enumerate(got):
        assert _non_decreasing(observed), f"worker {index} saw the head go back: {observed}"
        # a worker's own completion is never undone: the head is at least that afterwards
        assert all(seen >= offer for seen, offer in zip(observed, offers[index], strict=True))
    head = HeadStore(store, PipelineLayout("heads")).get()
    assert head.checkpoint_id == max(max(o) for o in offers)
    assert head.restore_generation == 0


HM_CONFIG = CheckpointConfig(timeout=600, max_concurrent=64, num_retained=3)


def _finalize_in_some_order(
    index: int, barrier: Any, ref: StoreRef, ids: list[int], stale: int | None
) -> tuple[list[int], dict[int, str]]:
    store = _open(ref)
    c = CheckpointCoordinator(store, "hm", HM_CONFIG)
    order = list(ids)
    random.Random(index).shuffle(order)
    observed: list[int] = []
    results: dict[int, str] = {}
    barrier.wait()
    # Each pass finalizes whatever it can; a checkpoint whose base is still pending
    # waits (None), so passes repeat until every one is settled.
    for _ in range(1000):
        for cid in order:
            if cid in results:
                continue
            if stale is not None and (settled := c.get_outcome(stale)) is not None:
                # a slow finalizer of an old checkpoint re-running its head move: the
                # settle CAS of the outcome it wrote
                c.control.update(
                    lambda now: settle_outcome(now, settled, HM_CONFIG.num_retained, time.time())
                )
            outcome = c.try_finalize(cid)
            observed.append(c.head.get().checkpoint_id or 0)
            if outcome is not None:
                results[cid] = outcome.status.value
        if len(results) == len(ids):
            break
    return observed, results


def test_concurrent_finalizers_move_head_forward(
    store: ObjectStore, process_pool: ProcessPoolExecutor, manager: SyncManager
) -> None:
    workers, count = (WORKERS, 5) if _is_s3(store) else (WORKERS, 10)
    spec = simple_pipeline("hm", [("op", 2)])
    c = CheckpointCoordinator(store, spec, HM_CONFIG)
    c.register(spec)
    ids = []
    for epoch in range(count):
        ids.append(c.trigger({"src": {"p0": epoch}}).checkpoint_id)
    for cid in ids:
        for task in spec.expected_tasks():
            c.acknowledge(cid, task, "a", _write_state(store, c, cid, task, "a"))
    # One worker keeps replaying a head move to the first checkpoint, as a finalizer
    # that stalled right after writing its outcome would.
    args = [(_ref(store), ids, ids[0] if i == 0 else None) for i in range(workers)]

    got = _race(process_pool, manager, _finalize_in_some_order, args)

    for index, (observed, results) in enumerate(got):
        assert _non_decreasing(observed), f"worker {index} saw the head go back: {observed}"
        assert results == {cid: "COMPLETED" for cid in ids}, f"worker {index}: {results}"
    head = c.head.get()
    assert head.checkpoint_id == max(ids)
    assert c.completed.retained_ids() == ids[-HM_CONFIG.num_retained :]
    assert c.failures.state().last_completed_id == max(ids)
    assert c.pending_checkpoints() == []
