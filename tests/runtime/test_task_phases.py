"""The runner's phases one at a time, without Spark, against a real store: align waits
on acks written through the coordinator, the snapshot's plan of writes, ack accounting
and decline, and the runner's start of an attempt (DUPLICATE on a retry after the ack).
The Spark phases (restore, process, the writes) run in the payments tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from batchpoint.errors import CheckpointError, StorageUnavailable
from batchpoint.protocol.checkpoint import (
    SHARED_FROM_META,
    CheckpointFailureReason,
    CheckpointStatus,
    FileHandle,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.runtime.api import OperatorContext, Pipeline
from batchpoint.runtime.incremental import SnapshotPlan
from batchpoint.runtime.runner import OperatorRunner
from batchpoint.runtime.streams import StreamWrite
from batchpoint.runtime.task_ack import acknowledge, decline, fail, task_metrics
from batchpoint.runtime.task_align import align
from batchpoint.runtime.task_attempt import (
    AttemptInterrupted,
    CheckpointAlreadySettled,
    OperatorFailed,
    OperatorRunReport,
    TaskAttempt,
    TaskEnvironment,
)
from batchpoint.runtime.task_snapshot import operator_writes
from batchpoint.storage import ObjectStore, StoreRef

SCHEMA = "k string, v bigint"


def pipeline() -> Pipeline:
    """events -> up (2 subtasks, state `seen`) -> down; up also feeds two sinks, one keyed
    as down is (one channel for both), one keyed otherwise."""
    p = Pipeline("phases", max_parallelism=8)
    p.source("events", root="sources/events", schema=SCHEMA)
    p.operator("up", inputs=["events"], key=["k"], states={"seen": SCHEMA}, parallelism=2)(
        lambda ctx: None
    )
    p.operator("down", inputs=["up"], key=["k"], parallelism=2)(lambda ctx: None)
    p.sink("alike", inputs=["up"], key=["k"])
    p.sink("other", inputs=["up"], key=["v"])
    return p


class World:
    """A registered pipeline on a real store, its coordinator, and attempts of it."""

    def __init__(self, store: ObjectStore, **config: Any) -> None:
        self.pipeline = pipeline()
        self.store = store
        self.coordinator = CheckpointCoordinator(
            store, self.pipeline.name, CheckpointConfig(**config)
        )
        self.coordinator.register(self.pipeline.spec())
        self.lines: list[str] = []

    def env(self, on_log: Any = None, **options: Any) -> TaskEnvironment:
        def log(line: str) -> None:
            self.lines.append(line)
            if on_log is not None:
                on_log(line)

        return TaskEnvironment(
            self.pipeline,
            self.coordinator,
            self.coordinator.store,
            None,
            StoreRef.of("file:///unused"),
            log,
            **options,
        )

    def trigger(self) -> int:
        return self.coordinator.trigger({"events": {"p0": 1}}).checkpoint_id

    def attempt(self, cid: int, name: str, attempt: str = "a1", **env: Any) -> TaskAttempt:
        pending = self.coordinator.get_pending(cid)
        assert pending is not None
        tasks = tuple(t for t in pending.expected_tasks if t.operator == name)
        report = OperatorRunReport(cid, name, attempt)
        node = self.pipeline.node(name)
        return TaskAttempt(self.env(**env), pending, node, tasks, attempt, report)  # type: ignore[arg-type]

    def file(self, cid: int, task: TaskId, attempt: str, name: str, rows: int = 3) -> FileHandle:
        data = f"{task} {name} {attempt}".encode()
        key = self.coordinator.layout.task_data_prefix(cid, task, attempt) + f"{name}.parquet"
        self.store.put(key, data)
        return FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows, None, name)

    def ack_all(self, cid: int, operator: str) -> None:
        for i in range(2):
            task = TaskId(operator, i)
            files = [self.file(cid, task, "up", f"channel-{operator}")]
            assert (
                self.coordinator.acknowledge(cid, task, "up", files)
                is TaskAcknowledgeResult.SUCCESS
            )


# -- align --------------------------------------------------------------------------------


def test_align_waits_for_every_upstream_ack(local_store: ObjectStore) -> None:
    """down's attempt starts waiting for up#0 and up#1; they ack while it waits (from its
    first "aligning" line, so no timing is involved), and it returns with no base."""
    world = World(local_store)
    cid = world.trigger()
    acked: list[str] = []

    def upstream_acks(line: str) -> None:
        if line.startswith("aligning") and not acked:
            world.ack_all(cid, "up")
            acked.append(line)

    assert align(world.attempt(cid, "down", on_log=upstream_acks, poll_interval=0.01)) is None
    assert acked == ["aligning: waiting for up#0, up#1"]
    # up itself reads only a source: nothing to wait for, nothing said
    world.lines.clear()
    assert align(world.attempt(cid, "up")) is None and world.lines == []


def test_align_waits_for_a_pending_base_and_returns_it(local_store: ObjectStore) -> None:
    world = World(local_store, max_concurrent=2)
    first = world.trigger()
    second = world.trigger()
    assert world.coordinator.get_pending(second).base_checkpoint_id == first

    def complete_the_base(line: str) -> None:
        if line == "aligning: waiting for the base checkpoint":
            for name in ("up", "down"):
                world.ack_all(first, name)
            for sink in ("alike", "other"):
                world.coordinator.acknowledge(first, TaskId(sink, 0), "up", [])
            assert world.coordinator.try_finalize(first).completed is not None

    base = align(world.attempt(second, "up", on_log=complete_the_base, poll_interval=0.01))
    assert base is not None and base.checkpoint_id == first


def test_align_ends_on_a_decline_a_timeout_or_an_interrupt(local_store: ObjectStore) -> None:
    world = World(local_store)
    cid = world.trigger()
    with pytest.raises(CheckpointError, match=r"alignment timed out waiting for up#0, up#1"):
        align(world.attempt(cid, "down", align_timeout=-1.0))
    interrupted = world.attempt(cid, "down")
    interrupted.env.interrupted.set()
    with pytest.raises(AttemptInterrupted, match=f"checkpoint {cid}: interrupted while aligning"):
        align(interrupted)
    waiting = world.attempt(cid, "down")
    world.coordinator.decline(cid, TaskId("up", 1), "a0", "bad input")  # aborts the checkpoint
    with pytest.raises(CheckpointError, match=f"checkpoint {cid} was settled while aligning: "):
        align(waiting)


# -- snapshot planning --------------------------------------------------------------------


class Frame:
    """A stand-in DataFrame: planning only passes frames around, so any use fails."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attribute: str) -> Any:
        raise AssertionError(f"planning used {self.name}.{attribute}")


def test_an_operator_writes_its_states_then_one_channel_per_keying(
    local_store: ObjectStore,
) -> None:
    world = World(local_store)
    cid = world.trigger()
    attempt = world.attempt(cid, "up")
    old, new, out = Frame("old"), Frame("new"), Frame("output")
    ctx = OperatorContext(None, cid, "up", {}, {"seen": old}, {})  # type: ignore[arg-type]
    ctx.set_state("seen", new)  # type: ignore[arg-type]
    writes = operator_writes(attempt, ctx, out, {"seen": SnapshotPlan(0, "full")})  # type: ignore[arg-type]
    declared = world.pipeline.operators["up"].states["seen"]
    assert writes == [
        StreamWrite(
            new, "state-seen", ("k",), 8, declared=declared, what="operator 'up', state 'seen'"
        ),  # type: ignore[arg-type]
        StreamWrite(out, "channel-down", ("k",), 8, ("down", "alike")),  # type: ignore[arg-type]
        StreamWrite(out, "channel-other", ("v",), 8, ("other",)),  # type: ignore[arg-type]
    ]
    with pytest.raises(
        CheckpointError, match="'up' returned no output but feeds down, alike, other"
    ):
        operator_writes(attempt, ctx, None, {"seen": SnapshotPlan(0, "full")})


# -- ack and decline ----------------------------------------------------------------------


def test_task_metrics_count_what_the_subtask_wrote_not_what_it_shares(tmp_path: Path) -> None:
    report = OperatorRunReport(7, "up", "a1", sync_ms=12.0, async_ms=30.0, records_in={1: 40})
    own = FileHandle("own", 1, "x", 5, (0, 3), "state-seen")
    shared = FileHandle("base", 1, "x", 100, (0, 3), "state-seen", meta={SHARED_FROM_META: 6})
    metrics = task_metrics(report, 1, [own, shared])
    assert (metrics.records_in, metrics.records_out) == (40, 5)
    assert (metrics.sync_ms, metrics.async_ms) == (12.0, 30.0)
    assert task_metrics(report, 0, []).records_in == 0


def test_acks_carry_files_and_metrics_and_a_late_attempt_learns_duplicate(
    store: ObjectStore,
) -> None:
    world = World(store)
    cid = world.trigger()
    first = world.attempt(cid, "up", "first")
    first.report.records_in.update({0: 10, 1: 20})
    handles = {
        i: [world.file(cid, TaskId("up", i), "first", "state-seen", rows=i + 1)] for i in range(2)
    }
    results = acknowledge(first, handles)
    assert results == {"up#0": TaskAcknowledgeResult.SUCCESS, "up#1": TaskAcknowledgeResult.SUCCESS}
    ack = json.loads(store.get(world.coordinator.layout.ack(cid, TaskId("up", 1))).data)
    assert ack["attempt"] == "first" and [h["path"] for h in ack["handles"]] == [handles[1][0].path]
    assert world.coordinator.acks(cid)[TaskId("up", 1)].metrics.records_in == 20
    assert world.coordinator.acks(cid)[TaskId("up", 1)].metrics.records_out == 2
    assert f"checkpoint {cid}: acks up#0=SUCCESS, up#1=SUCCESS" in world.lines

    late = world.attempt(cid, "up", "late")
    late_files = {i: [world.file(cid, TaskId("up", i), "late", "state-seen")] for i in range(2)}
    assert set(acknowledge(late, late_files).values()) == {TaskAcknowledgeResult.DUPLICATE}
    assert not any(store.exists(f.path) for fs in late_files.values() for f in fs)
    assert all(store.exists(f.path) for fs in handles.values() for f in fs)


def test_a_failed_operator_declines_every_subtask_and_the_checkpoint_aborts(
    local_store: ObjectStore,
) -> None:
    world = World(local_store)
    cid = world.trigger()
    up, down = world.attempt(cid, "up"), world.attempt(cid, "down")
    with pytest.raises(OperatorFailed, match=f"up failed in checkpoint {cid}: ValueError: bad row"):
        fail(up, ValueError("bad row"))
    # the first subtask's decline aborts the checkpoint; the next finds it aborted
    declines = world.coordinator.progress(cid).declines
    assert [(d.task, d.reason) for d in declines] == [(TaskId("up", 0), "ValueError: bad row")]
    assert f"checkpoint {cid}: declined by up: ValueError: bad row" in world.lines
    outcome = world.coordinator.get_outcome(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.DECLINED
    decline(down, "too late")  # settled already: the outcome holds
    assert world.coordinator.get_outcome(cid) == outcome


def test_storage_that_did_not_answer_declines_nothing_here_or_in_a_spark_task(
    local_store: ObjectStore,
) -> None:
    """An S3 outage is not the operator's fault: the checkpoint stays pending for a
    retry once S3 answers (the task waits for that: airflow/outages.py)."""
    world = World(local_store)
    cid = world.trigger()
    here = StorageUnavailable("S3 endpoint http://s3:8333 did not answer get s3://b/k")
    with pytest.raises(StorageUnavailable) as raised:
        fail(world.attempt(cid, "up"), here)
    assert raised.value is here
    # what pyspark raises for a Spark task that raised it: the worker's traceback as text
    in_task = RuntimeError(
        "Job aborted due to stage failure: Task 0 in stage 3.0 failed 4 times\n"
        'Traceback (most recent call last):\n  File "task.py", line 9, in read\n'
        "batchpoint.errors.StorageUnavailable: S3 endpoint http://s3:8333 did not answer "
        "get s3://b/sources/events/p1/e00012-f000.jsonl after up to 5 attempt(s)\n"
    )
    with pytest.raises(StorageUnavailable, match=f"up in checkpoint {cid}: StorageUnavailable"):
        fail(world.attempt(cid, "up"), in_task)
    assert not world.coordinator.progress(cid).declines
    assert world.coordinator.get_outcome(cid) is None


# -- the start of an attempt --------------------------------------------------------------


def test_a_retry_after_the_acks_learns_duplicate_and_runs_nothing(local_store: ObjectStore) -> None:
    """OperatorRunner.run with no Spark session at all: nothing of Spark is reached."""
    world = World(local_store)
    cid = world.trigger()
    runner = OperatorRunner(world.pipeline, StoreRef.of(local_store.root.as_uri()), None)  # type: ignore[arg-type]
    world.ack_all(cid, "up")
    report = runner.run(cid, "up")
    assert report.skipped == "every subtask acknowledged already (a retry after the ack)"
    assert report.results == {
        "up#0": TaskAcknowledgeResult.DUPLICATE,
        "up#1": TaskAcknowledgeResult.DUPLICATE,
    }
    with pytest.raises(CheckpointError, match="'events' is a source: sources run no task"):
        runner.run(cid, "events")
    world.coordinator.abort(cid, CheckpointFailureReason.DECLINED, "test")
    with pytest.raises(CheckpointAlreadySettled, match=f"checkpoint {cid} was aborted"):
        runner.run(cid, "down")
    with pytest.raises(CheckpointError, match=f"pipeline 'phases' has no checkpoint {cid + 1}"):
        runner.run(cid + 1, "down")
