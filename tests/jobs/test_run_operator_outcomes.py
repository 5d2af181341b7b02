"""How an operator job ends when its checkpoint takes none of its acks (jobs/run_operator.py
run_job), without Spark: a real local store and coordinator, the real runner, and a sink
that stages its input by reference (no Spark job). An ack the checkpoint DISCARDED (it
was aborted while the attempt ran) ends the job as an abort seen before the attempt
started does (operator-failed, exit 3), never as acknowledged (exit 0)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from batchpoint.jobs import run_operator
from batchpoint.protocol.checkpoint import CheckpointStatus, FileHandle
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.job_status import JobReport, JobStatus
from batchpoint.runtime.runner import OperatorRunner
from batchpoint.runtime.streams import CONSUMERS_META
from batchpoint.runtime.task_hooks import AttemptPoint
from batchpoint.settings import Settings
from batchpoint.storage import StoreRef
from batchpoint.storage.local import LocalObjectStore

SCHEMA = "k string, v bigint"


def pipeline() -> Pipeline:
    """events -> up (2 subtasks) -> down, and a sink `alike` keyed as up's output is: the
    sink stages up's channel files as they are (no Spark)."""
    p = Pipeline("outcomes", max_parallelism=8)
    p.source("events", root="sources/events", schema=SCHEMA)
    p.operator("up", inputs=["events"], key=["k"], parallelism=2)(lambda ctx: None)
    p.operator("down", inputs=["up"], key=["k"], parallelism=1)(lambda ctx: None)
    p.sink("alike", inputs=["up"], key=["k"])
    return p


class DeclinedMeanwhile:
    """The fault: while the sink's attempt runs (after its snapshot, before its ack),
    another operator's attempt declines the checkpoint, which aborts it."""

    def __init__(self, coordinator: CheckpointCoordinator) -> None:
        self.coordinator = coordinator

    def at(self, point: AttemptPoint, operator: str, checkpoint_id: int) -> None:
        if point is AttemptPoint.AFTER_SNAPSHOT:
            self.coordinator.decline(checkpoint_id, TaskId("down", 0), "d1", "down raised")

    def spark_tasks(self, operator: str, checkpoint_id: int) -> object:
        raise AssertionError("no Spark task runs here")


class World:
    def __init__(self, root: Path) -> None:
        self.store = LocalObjectStore(root)
        self.ref = StoreRef.of(root.as_uri())
        self.pipeline = pipeline()
        self.coordinator = CheckpointCoordinator(self.store, "outcomes", CheckpointConfig())
        self.coordinator.register(self.pipeline.spec())
        self.errors: list[str] = []
        self.cid = self.coordinator.trigger({"events": {"p0": 1}}).checkpoint_id
        for i, groups in enumerate([(0, 3), (4, 7)]):  # up's channel, one file per subtask
            task = TaskId("up", i)
            self.coordinator.acknowledge(self.cid, task, "u1", [self.channel_file(task, groups)])

    def channel_file(self, task: TaskId, groups: tuple[int, int]) -> FileHandle:
        data = f"{task} channel".encode()
        key = self.coordinator.layout.task_data_prefix(self.cid, task, "u1") + "channel.parquet"
        self.store.put(key, data)
        meta = {"max_parallelism": 8, CONSUMERS_META: ["down", "alike"]}
        digest = hashlib.sha256(data).hexdigest()
        return FileHandle(key, len(data), digest, 3, groups, "channel-down", meta)

    def run_sink(self, monkeypatch: pytest.MonkeyPatch, hooks: object = None) -> JobReport:
        """run_job of the sink; its runner is the real one on no Spark session (what
        _runner would open: the adopted sink needs none), with `hooks` if a fault."""
        runner = OperatorRunner(self.pipeline, self.ref, None, attempt="s1", hooks=hooks)  # type: ignore[arg-type]
        monkeypatch.setattr(run_operator, "_runner", lambda *args: runner)
        settings = Settings(root=self.ref.uri)
        return run_operator.run_job(
            "unused:pipeline", self.cid, "alike", settings, log=print, error=self.errors.append
        )


def test_acks_discarded_by_an_abort_while_the_attempt_ran_fail_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path / "store")
    report = world.run_sink(monkeypatch, DeclinedMeanwhile(world.coordinator))
    cid = world.cid
    assert (report.status, report.exit_code) == (JobStatus.OPERATOR_FAILED, 3)
    assert not report.status.succeeded
    said = f"checkpoint {cid} was aborted while alike ran (task down#0 declined: down raised)"
    assert report.message == said
    assert world.errors == [f"error: {said}"]
    # the line the launcher reads says the same
    assert JobReport.parse(report.line()) == report
    outcome = world.coordinator.get_outcome(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert TaskId("alike", 0) not in world.coordinator.acks(cid)


def test_the_same_abort_seen_before_the_attempt_starts_ends_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path / "store")
    world.coordinator.decline(world.cid, TaskId("down", 0), "d1", "down raised")
    report = world.run_sink(monkeypatch)
    assert (report.status, report.exit_code) == (JobStatus.OPERATOR_FAILED, 3)
    assert report.message.startswith(f"checkpoint {world.cid} was aborted (")


def test_acks_the_checkpoint_took_still_end_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path / "store")
    report = world.run_sink(monkeypatch)
    assert (report.status, report.exit_code) == (JobStatus.ACKNOWLEDGED, 0)
    assert report.message == "acks alike#0=SUCCESS" and world.errors == []
    assert world.coordinator.acks(world.cid)[TaskId("alike", 0)].attempt == "s1"


TOKEN = "SECRETTOKEN42"


@pytest.mark.parametrize(
    "remote",
    [
        f"sc://spark:15O02/;token={TOKEN}",  # a port that is no number
        f"sc://[spark/;token={TOKEN}",  # an IPv6 bracket never closed
        f"sc://spark:99999/;token={TOKEN}",  # a port out of range
        "spark:15002",  # no sc://
    ],
)
def test_a_malformed_remote_is_bad_config_in_one_line_without_its_token(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    remote: str,
) -> None:
    """Checked as BATCHPOINT_SPARK_REMOTE is, before any client is built: exit 2 (a setting
    to fix), not a ValueError traceback and exit 1 (read as a crash a retry may get past)."""
    monkeypatch.setenv("BATCHPOINT_ROOT", (tmp_path / "root").as_uri())
    argv = ["--pipeline", "demo.payments:pipeline", "--checkpoint-id", "1", "--operator", "dedup"]
    code = run_operator.main([*argv, "--remote", remote])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: --remote: "), err
    report = JobReport.last_in(out.splitlines())
    assert report is not None and report.status is JobStatus.BAD_CONFIG
    assert report.message == err.strip().removeprefix("error: ")
    assert TOKEN not in out + err
