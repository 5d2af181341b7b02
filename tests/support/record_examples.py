"""One realistic value of every stored record kind and version, and of the JSON values
stored inside records (tests/protocol/test_record_fixtures.py).

The bytes in tests/data/records/ were written from these values by the code of the day
they were added (`python tests/support/record_examples.py tests/data/records`), so they
stand for what a release wrote: readers must decode them to these values and re-encode
them to the same bytes. Never regenerate them to make a test pass: a change in the bytes
is a change of the stored format, which needs a new record version instead.

A few fixtures are *older shapes* (`LEGACY`): bytes an earlier release wrote that today's
writer no longer produces (a quarantine record of version 1, an ack from before task
metrics). They are decoded and compared with their values, not re-encoded.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from batchpoint.protocol import records
from batchpoint.protocol.cascade import CascadeRecord, CascadeStatus, CascadeStep
from batchpoint.protocol.checkpoint import (
    ADOPTED_FROM_META,
    SHARED_FROM_META,
    AckRecord,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    DeclineRecord,
    FileHandle,
    PendingCheckpoint,
    TaskMetrics,
)
from batchpoint.protocol.control import (
    CascadeFence,
    ControlFinding,
    ControlRecord,
    DiscardedEntry,
    PendingEntry,
    RestoreInFlight,
    RetainedEntry,
    StopInFlight,
    Stopped,
)
from batchpoint.protocol.failures import FailureState, PipelineStatus
from batchpoint.protocol.head import HeadMoveCause, HeadPointer
from batchpoint.protocol.ids import NextCheckpointId
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.metrics import StorageRequests
from batchpoint.protocol.migration import RetainedMarker
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.protocol.quarantine import QuarantineCause, QuarantineRecord
from batchpoint.protocol.restore_intents import RestoreIntent
from batchpoint.protocol.restores import RestoreRecord
from batchpoint.protocol.savepoints import SavepointMetadata
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.protocol.sink_timeline import TimelineStep
from batchpoint.protocol.sinks import PublishedEpoch, SinkManifest
from batchpoint.protocol.table_pins import TablePin
from batchpoint.protocol.topology import NodeTopology, StateTopology, Topology
from batchpoint.quality.findings import Finding
from batchpoint.quality.report import CandidateReport, GateMode, StateSkip
from batchpoint.sources.barrier import PartitionOffset, SourceBarrier
from batchpoint.sources.files import SourceSplit
from batchpoint.state.format import StateHandle
from batchpoint.state.keygroups import KeyGroupRange

FOLDER = Path(__file__).resolve().parents[1] / "data" / "records"
PIPELINE = "payments"


def at(text: str) -> float:
    """A time as the records hold it (milliseconds), so a decoded value equals it."""
    return records.from_iso("example", text)


# -- the JSON values inside records ------------------------------------------------------


def source_barrier() -> SourceBarrier:
    return SourceBarrier(
        {
            "p0": PartitionOffset(3, "e00002-f001.jsonl", "sha256:" + "ab" * 32),
            "p1": PartitionOffset(0, None, "sha256:" + "cd" * 32),
            "p2": PartitionOffset(7),  # an unverified offset: a bare count
        }
    )


def state_handle(subtask: int = 0, layer: int = 0) -> StateHandle:
    lo, hi = (0, 63) if subtask == 0 else (64, 127)
    return StateHandle(
        path=f"pipelines/{PIPELINE}/checkpoints/chk-0000000007/data/balances/{subtask}/"
        f"att-1/state-balances/part-00000-{layer}.parquet",
        size=4096 + subtask,
        sha256=f"{subtask}{layer}" * 32,
        rows=120 + subtask,
        key_group_range=KeyGroupRange(lo, hi),
        name="balances",
        schema_fingerprint="9f2c4e1ab37d5c60",
        subtask=subtask,
        parallelism=2,
        max_parallelism=128,
        task_attempt="spark-17-0",
        spark_schema='{"type":"struct","fields":[{"name":"account","type":"string"}]}',
        layer=layer,
        net_rows=-2 if layer else None,
        key_columns=("account",) if layer else (),
        format=2,  # the stored examples were written in state format 2
    )


def source_split() -> SourceSplit:
    return SourceSplit("p0", 2, "landing/payments/p0/e00002-f001.jsonl", 5321)


def delta_source_split() -> SourceSplit:
    """A Delta table's change data file, in a partition of the table, one side of it."""
    key = "tables/shop/daily/_change_data/day=2024-01-01/part-00000-c000.snappy.parquet"
    return SourceSplit("versions", 0, key, 1395, {"day": "2024-01-01", "shop": None}, "added")


# -- checkpoint records ----------------------------------------------------------------


def pending(checkpoint_id: int = 7, type: CheckpointType = CheckpointType.CHECKPOINT):
    return PendingCheckpoint(
        pipeline=PIPELINE,
        checkpoint_id=checkpoint_id,
        type=type,
        base_checkpoint_id=checkpoint_id - 1,
        restore_generation=2,
        barrier={"payments": source_barrier().to_json()},
        base_barrier={
            "payments": {
                "p0": {"offset": 2, "last": "e00001-f004.jsonl", "digest": "sha256:" + "ef" * 32}
            }
        },
        expected_tasks=(TaskId("balances", 0), TaskId("balances", 1), TaskId("alerts", 0)),
        trigger_time=at("2026-11-20T10:00:00.125Z"),
        deadline=at("2026-11-20T10:10:00.125Z"),
        properties={
            "audit": True,
            "changelog_chain": 8,
            "independent_of_base": "the base is a savepoint held outside retention",
            "retain_forever": True,
            "scheduler_run_id": "scheduled__2026-11-20T10:00:00+00:00",
            "description": "nightly",
            "why": {"ticket": "OPS-12", "tags": ["a", "b"]},  # the user's own
        },
    )


def imported_pending() -> PendingCheckpoint:
    """What a savepoint import writes: the original's properties and where it came from."""
    base = pending(9, CheckpointType.SAVEPOINT)
    return PendingCheckpoint(
        **{
            **{f: getattr(base, f) for f in ("pipeline", "checkpoint_id", "type")},
            "base_checkpoint_id": None,
            "restore_generation": 3,
            "barrier": base.barrier,
            "base_barrier": base.base_barrier,
            "expected_tasks": base.expected_tasks,
            "trigger_time": base.trigger_time,
            "deadline": base.deadline,
            "properties": {
                "description": "before the v2 deploy",
                "via": "cli",
                "target": "savepoints/v2",
                "stop_pipeline": True,
                "imported_from": "file:///srv/savepoints/v2",
                "savepoint_checkpoint_id": 4,
                "savepoint_taken_from": "s3://lake/batchpoint",
                "savepoint_description": "before the v2 deploy",
            },
        }
    )


def file_handle(handle: StateHandle, **meta: Any) -> FileHandle:
    body = {**handle.to_json(), **meta}
    return FileHandle.from_json(body, handle.path)


def acks(checkpoint_id: int = 7) -> tuple[AckRecord, ...]:
    channel = FileHandle(
        f"pipelines/{PIPELINE}/checkpoints/chk-{checkpoint_id:010d}/data/balances/0/att-1/"
        "channel-alerts/part-0.parquet",
        2048,
        "c" * 64,
        rows=40,
        key_group_range=(0, 63),
        name="channel-alerts",
        meta={"subtask": 0, "consumer": "alerts"},
    )
    sink = FileHandle(
        channel.path,
        2048,
        "c" * 64,
        rows=40,
        name="sink",
        meta={ADOPTED_FROM_META: "balances#0"},
    )
    return (
        AckRecord(
            checkpoint_id,
            TaskId("balances", 0),
            "att-1",
            (file_handle(state_handle(0)), file_handle(state_handle(0, layer=1)), channel),
            TaskMetrics(12.5, 840.25, 300, 160),
            at("2026-11-20T10:03:00.500Z"),
        ),
        AckRecord(
            checkpoint_id,
            TaskId("balances", 1),
            "att-2",
            (file_handle(state_handle(1), **{SHARED_FROM_META: checkpoint_id - 1}),),
            TaskMetrics(11.0, 799.5, 280, 121),
            at("2026-11-20T10:03:01.000Z"),
        ),
        AckRecord(
            checkpoint_id,
            TaskId("alerts", 0),
            "att-1",
            (sink,),
            TaskMetrics(0.5, 3.0, 40, 40),
            at("2026-11-20T10:04:00.000Z"),
        ),
    )


def decline() -> DeclineRecord:
    return DeclineRecord(
        8, TaskId("alerts", 0), "att-3", "source file vanished", at("2026-11-20T11:00:01.250Z")
    )


def completed_outcome() -> CheckpointOutcome:
    p = pending()
    decided = at("2026-11-20T10:04:02.000Z")
    return CheckpointOutcome(
        CheckpointStatus.COMPLETED, p, decided, completed=CompletedCheckpoint(p, acks(), decided)
    )


def aborted_outcome() -> CheckpointOutcome:
    return CheckpointOutcome(
        CheckpointStatus.ABORTED,
        pending(8),
        at("2026-11-20T11:00:02.000Z"),
        reason=CheckpointFailureReason.DECLINED,
        message="task alerts#0 declined: source file vanished",
    )


# -- pipeline records ------------------------------------------------------------------


def control() -> ControlRecord:
    return ControlRecord(
        head=7,
        restore_generation=2,
        retained=(
            RetainedEntry(
                4, CheckpointType.SAVEPOINT, at("2026-11-18T09:00:00.000Z"), claimed=True
            ),
            RetainedEntry(6, CheckpointType.CHECKPOINT, at("2026-11-20T09:04:00.000Z"), True),
            RetainedEntry(7, CheckpointType.CHECKPOINT, at("2026-11-20T10:04:02.000Z")),
        ),
        pending=(
            PendingEntry(8, CheckpointType.CHECKPOINT, 7, 2, at("2026-11-20T11:10:00.000Z")),
            PendingEntry(9, CheckpointType.SAVEPOINT, None, 2, at("2026-11-20T11:12:00.000Z")),
        ),
        discarded=(
            DiscardedEntry(5, at("2026-11-20T09:04:00.000Z")),
            DiscardedEntry(3, at("2026-11-20T09:05:00.000Z")),
        ),
        collected=(1, 2),
        restore=RestoreInFlight(2, 4, 3, (5,), True, at("2026-11-19T08:00:00.000Z")),
        moved_at=at("2026-11-20T10:04:02.000Z"),
        cause=HeadMoveCause.RESTORE,
        findings=(
            ControlFinding(
                3, "its retained marker is unreadable", at("2026-11-19T08:00:00.000Z"), hold=True
            ),
            ControlFinding(5, "unreadable pending record", at("2026-11-19T08:00:00.000Z")),
        ),
        extra={"written_by": "batchpoint 0.9"},  # a newer writer's field, kept
    )


def control_v1_bytes() -> bytes:
    """As version 1 wrote `control()`: the same fields, no stop (version 2 adds only
    `stopping` and `stopped`, written when set)."""
    body = json.loads(control().encode())
    del body["kind"], body["version"]
    return records.encode("pipeline-control", 1, body)


def control_stopping() -> ControlRecord:
    """A stop-with-savepoint in flight: savepoint 9 abandoned checkpoint 8."""
    return dataclasses.replace(
        control(),
        pending=(PendingEntry(9, CheckpointType.SAVEPOINT, 7, 2, at("2026-11-20T11:12:00.000Z")),),
        discarded=(
            *control().discarded,
            DiscardedEntry(8, at("2026-11-20T11:02:00.000Z")),
        ),
        stopping=StopInFlight(9, at("2026-11-20T11:02:00.000Z"), (8,)),
    )


def control_stopped() -> ControlRecord:
    """Stopped with savepoint 9, which is the head."""
    base = control()
    return dataclasses.replace(
        base,
        head=9,
        retained=(
            *base.retained,
            RetainedEntry(9, CheckpointType.SAVEPOINT, at("2026-11-20T11:05:00.000Z")),
        ),
        pending=(),
        discarded=(*base.discarded, DiscardedEntry(8, at("2026-11-20T11:02:00.000Z"))),
        moved_at=at("2026-11-20T11:05:00.000Z"),
        cause=HeadMoveCause.COMPLETED,
        stopped=Stopped(9, at("2026-11-20T11:05:00.000Z")),
    )


def control_importing() -> ControlRecord:
    """Savepoint 9 being imported (marked: never a base) beside checkpoint 8. An import
    an older release admitted has no mark (`control()`'s 9) and reads as unmarked."""
    base = control()
    return dataclasses.replace(
        base,
        pending=(base.pending[0], dataclasses.replace(base.pending[1], imported=True)),
    )


def control_gated_restore() -> ControlRecord:
    """The last restore, to 4, was passed by a gate (its name is recorded)."""
    base = control()
    assert base.restore is not None
    return dataclasses.replace(base, restore=dataclasses.replace(base.restore, gate="quality gate"))


def control_restore_passed_over() -> ControlRecord:
    """The last restore, to 4, gated: the gate failed and quarantined 6, and 5 was held
    by an earlier quarantine (the restore DAG's check task chose, its restore task
    recorded)."""
    base = control_gated_restore()
    assert base.restore is not None
    restore = dataclasses.replace(base.restore, passed_over=(6, 5), quarantined=(6,))
    return dataclasses.replace(base, restore=restore)


def manifest() -> SinkManifest:
    files = (acks()[2].handles[0],)
    return SinkManifest(
        "alerts",
        SinkMode.APPEND,
        ("account", "ts"),
        9,
        {
            6: PublishedEpoch(6, None, files),
            7: PublishedEpoch(7, 6, files),
            9: PublishedEpoch(9, 7, (), alias_of=4),
        },
        generation=2,
    )


def pinned_manifest() -> SinkManifest:
    """A sync under way: 9 pinned on the table's snapshot, an older pin on no snapshot."""
    pins = (TablePin(7, None), TablePin(9, 4811207319542316870))
    return dataclasses.replace(manifest(), pins=pins)


def timeline_manifest() -> SinkManifest:
    """Epochs with their timelines: 6 and 7 in generation 0, then a restore to 6 and 10
    on it in generation 1 (7 left behind, still retained)."""
    files = (acks()[2].handles[0],)
    return SinkManifest(
        "balances_table",
        SinkMode.SNAPSHOT,
        ("account",),
        10,
        {
            6: PublishedEpoch(6, None, files, timeline=(TimelineStep(0, 6),)),
            7: PublishedEpoch(7, 6, files, timeline=(TimelineStep(0, 7),)),
            10: PublishedEpoch(10, 6, files, timeline=(TimelineStep(0, 6), TimelineStep(1, 10))),
        },
        generation=1,
    )


def upstream_barrier() -> SourceBarrier:
    """A pipeline source's: upstream pipeline/sink uid, up to checkpoint 10 of generation 1."""
    return SourceBarrier({"payments/balances_table": PartitionOffset(10, generation=1)})


def control_cascade() -> ControlRecord:
    """Held by a cascade restore that follows 'payments' (its triggers refuse)."""
    fence = CascadeFence("3f9a0c2e7b14", "payments", at("2026-11-20T11:10:00.000Z"))
    return dataclasses.replace(control(), cascade=fence)


def cascade_record() -> CascadeRecord:
    """Half-way: payments restored to 6, reports (read it) not yet."""
    return CascadeRecord(
        "3f9a0c2e7b14",
        "payments",
        6,
        (CascadeStep("payments", 6, 1, done=True), CascadeStep("reports", 12, 0)),
        at("2026-11-20T11:10:00.000Z"),
    )


def cascade_record_done() -> CascadeRecord:
    done = tuple(dataclasses.replace(s, done=True) for s in cascade_record().steps)
    return dataclasses.replace(
        cascade_record(),
        steps=done,
        status=CascadeStatus.DONE,
        finished_at=at("2026-11-20T11:12:00.000Z"),
    )


def moving_manifest() -> SinkManifest:
    """A manifest a release before issue 36 kept under the sink's name, frozen while
    the sink's uid adopts it."""
    return dataclasses.replace(manifest(), moved_to="alerts-log")


def failures() -> FailureState:
    return FailureState(
        PipelineStatus.FAILED,
        (8, 10, 11),
        7,
        "3 consecutive checkpoints failed (tolerable: 2); last: checkpoint 11 expired: late",
        at("2026-11-20T12:00:00.000Z"),
    )


def id_counter() -> NextCheckpointId:
    return NextCheckpointId(12)


def head_pointer() -> HeadPointer:
    return HeadPointer(7, 2, at("2026-11-20T10:04:02.000Z"), HeadMoveCause.RESTORE)


def retained_marker() -> RetainedMarker:
    return RetainedMarker.of(
        RetainedEntry(6, CheckpointType.CHECKPOINT, at("2026-11-20T09:04:00.000Z"), True)
    )


def spec() -> PipelineSpec:
    return PipelineSpec(
        PIPELINE,
        (
            OperatorSpec("payments", OperatorKind.SOURCE, properties={"format": "jsonl"}),
            OperatorSpec(
                "balances",
                OperatorKind.OPERATOR,
                ("payments",),
                parallelism=2,
                max_parallelism=128,
                key_columns=("account",),
                states=("balances", "seen"),
            ),
            OperatorSpec(
                "alerts",
                OperatorKind.SINK,
                ("balances",),
                key_columns=("account", "ts"),
                properties={
                    "mode": "append",
                    "table": "payments.alerts",
                    "table_catalog": "lake",
                    "table_format": "iceberg",
                },
            ),
        ),
    )


def folder(ack: AckRecord) -> str:
    return f"{ack.task.operator}/{ack.task.subtask}/{ack.attempt}"


def savepoint() -> SavepointMetadata:
    relative = tuple(
        AckRecord(
            a.checkpoint_id,
            a.task,
            a.attempt,
            tuple(
                FileHandle.from_json({**h.to_json(), "path": f"data/{folder(a)}/{i}"})
                for i, h in enumerate(a.handles)
            ),
            a.metrics,
            a.acked_at,
        )
        for a in acks(4)
    )
    return SavepointMetadata(
        pipeline=PIPELINE,
        checkpoint_id=4,
        pending=pending(4, CheckpointType.SAVEPOINT),
        acks=relative,
        completed_at=at("2026-11-18T09:00:00.000Z"),
        exported_at=at("2026-11-18T09:01:30.250Z"),
        description="before the v2 deploy",
        taken_from="s3://lake/batchpoint",
    )


def quality_report() -> CandidateReport:
    return CandidateReport(
        pipeline=PIPELINE,
        checkpoint_id=7,
        checkpoint_type="checkpoint",
        mode=GateMode.AUDIT,
        evaluated_at=at("2026-11-20T10:05:00.000Z"),
        seconds=4.25,
        findings=[
            Finding("balances/balances", "suite:payments_balances", "2 of 121 values unexpected"),
            Finding("pipelines/payments/checkpoints/chk-0000000007/outcome.json", "metadata", "x"),
        ],
        gx_results={
            "balances/balances": {
                "payments_balances": {
                    "success": False,
                    "results": [{"result": {"unexpected_count": 2}}],
                }
            }
        },
        checks={"balances/balances": {"row-count": {"counted": 121, "recorded": 121}}},
        skipped=["suite:slow"],
        suites_run=True,
        quarantined=True,
    )


def quality_report_by_uid() -> CandidateReport:
    """A report since states are keyed by uid (issue 36): the checkpoint was written
    before `balances` was renamed `totals` (uid kept); labels beside the uids, and the
    states the gate did not judge, with why."""
    report = quality_report()
    return dataclasses.replace(
        report,
        findings=[
            dataclasses.replace(
                report.findings[0], object="totals/balances", uid="balances/balances"
            ),
            report.findings[1],
        ],
        states={"balances/balances": "totals/balances"},
        not_judged=[
            StateSkip(
                "balances/flags",
                "totals/flags",
                "new since checkpoint 7: it holds no state of uid 'flags' of operator uid "
                "'balances'",
            ),
            StateSkip(
                "dedup/seen",
                "dedup/seen",
                "not declared by the code (dropped, or its uid changed): nothing to judge it by",
            ),
        ],
    )


def quarantine_v2() -> QuarantineRecord:
    report = quality_report()
    return QuarantineRecord(
        7,
        at("2026-11-20T10:05:01.000Z"),
        QuarantineCause.QUALITY_GATE,
        str(report.findings[0]),
        report.to_body(),
    )


def quarantine_v2_restore() -> QuarantineRecord:
    return QuarantineRecord(
        5,
        at("2026-11-20T10:06:00.000Z"),
        QuarantineCause.RESTORE,
        "file pipelines/payments/checkpoints/chk-0000000005/data/x: sha256 mismatch",
    )


def restore_record() -> RestoreRecord:
    return RestoreRecord(4, 2, 3, at("2026-11-19T08:00:00.000Z"))


def restore_record_gated() -> RestoreRecord:
    return RestoreRecord(4, 2, 3, at("2026-11-19T08:00:00.000Z"), gate="quality gate")


def restore_record_passed_over() -> RestoreRecord:
    gated = restore_record_gated()
    return dataclasses.replace(gated, passed_over=(6, 5), quarantined=(6,))


def restore_intent() -> RestoreIntent:
    return RestoreIntent(3, 4, 5, at("2026-11-19T07:59:59.000Z"))


# -- older shapes an earlier release wrote ------------------------------------------------


def quarantine_v1() -> QuarantineRecord:
    report = quality_report()
    return QuarantineRecord(
        7,
        at("2026-11-20T10:05:01.000Z"),
        QuarantineCause.QUALITY_GATE,
        "failed the quality gate",
        report.to_body(),
    )


def quarantine_v1_bytes() -> bytes:
    """As the gate wrote it before restores quarantined (no found_by, no reason)."""
    record = quarantine_v1()
    body = {
        "checkpoint_id": record.checkpoint_id,
        "quarantined_at": records.to_iso(record.quarantined_at),
        "report": record.report,
    }
    return records.encode("quarantine", 1, body)


def ack_before_metrics() -> AckRecord:
    ack = acks()[2]
    return AckRecord(
        ack.checkpoint_id, ack.task, ack.attempt, ack.handles, TaskMetrics(), ack.acked_at
    )


def ack_before_metrics_bytes() -> bytes:
    body = json.loads(as_version_1(ack_before_metrics()))
    del body["metrics"]
    for handle in body["handles"]:
        del handle["rows"]  # the oldest handles had no row count either
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def ack_before_metrics_value() -> AckRecord:
    ack = ack_before_metrics()
    handles = tuple(
        FileHandle(h.path, h.size, h.sha256, 0, h.key_group_range, h.name, h.meta)
        for h in ack.handles
    )
    return AckRecord(ack.checkpoint_id, ack.task, ack.attempt, handles, ack.metrics, ack.acked_at)


# -- version 2 of the checkpoint records: uids and the recorded topology ------------------


def topology() -> Topology:
    """The payments pipeline after a deploy that renamed `balances` to `totals` (uid
    kept) and whose source has a uid of its own."""
    import pyarrow as pa

    balances = pa.schema(
        [pa.field("account", pa.string(), nullable=False), pa.field("balance", pa.int64())]
    )
    seen = pa.schema([pa.field("account", pa.string(), nullable=False)])
    return Topology(
        (
            NodeTopology("payments-in", "payments", OperatorKind.SOURCE, key_columns=()),
            NodeTopology(
                "balances",
                "totals",
                OperatorKind.OPERATOR,
                2,
                128,
                ("account",),
                (
                    StateTopology.declared("balances", "balances", balances),
                    StateTopology.declared("seen", "seen_ids", seen),
                ),
            ),
            NodeTopology(
                "alerts",
                "alerts",
                OperatorKind.SINK,
                1,
                128,
                ("account", "ts"),
                properties={"mode": "append", "table": "payments.alerts"},
            ),
        )
    )


def pending_v2(checkpoint_id: int = 7, type: CheckpointType = CheckpointType.CHECKPOINT):
    p = pending(checkpoint_id, type)
    return dataclasses.replace(
        p,
        barrier={"payments-in": p.barrier["payments"]},
        base_barrier={"payments-in": p.base_barrier["payments"]},
        expected_tasks=(TaskId("totals", 0), TaskId("totals", 1), TaskId("alerts", 0)),
        topology=topology(),
    )


def ack_v2_spark_work() -> AckRecord:
    """An ack that counted its attempt's Spark jobs and stages (issue 28); acks without
    the counts are the other fixtures, byte for byte as before."""
    ack = acks_v2()[1]
    metrics = dataclasses.replace(ack.metrics, spark_jobs=2, spark_stages=5)
    return dataclasses.replace(ack, metrics=metrics)


def ack_v2_storage_requests() -> AckRecord:
    """An ack that counted its subtask's storage requests by kind (issue 42); acks
    without them are the other fixtures, byte for byte as before."""
    ack = ack_v2_spark_work()
    requests = StorageRequests(get=1, head=2, put=4, list=1, delete=1)
    return dataclasses.replace(
        ack, metrics=dataclasses.replace(ack.metrics, storage_requests=requests)
    )


def acks_v2(checkpoint_id: int = 7) -> tuple[AckRecord, ...]:
    renamed = {"balances": "totals"}
    return tuple(
        dataclasses.replace(
            a,
            task=TaskId(renamed.get(a.task.operator, a.task.operator), a.task.subtask),
            operator_uid=a.task.operator,
        )
        for a in acks(checkpoint_id)
    )


def completed_outcome_v2() -> CheckpointOutcome:
    p = pending_v2()
    decided = at("2026-11-20T10:04:02.000Z")
    return CheckpointOutcome(
        CheckpointStatus.COMPLETED, p, decided, completed=CompletedCheckpoint(p, acks_v2(), decided)
    )


def aborted_outcome_v2() -> CheckpointOutcome:
    return dataclasses.replace(aborted_outcome(), pending=pending_v2(8))


def savepoint_v2() -> SavepointMetadata:
    old = savepoint()
    return dataclasses.replace(
        old,
        pending=pending_v2(4, CheckpointType.SAVEPOINT),
        acks=tuple(dataclasses.replace(a, operator_uid=a.task.operator + "-uid") for a in old.acks),
    )


def as_version_1(record: Any) -> bytes:
    """A checkpoint record as version 1 wrote it: the same body without the fields of
    version 2 (an ack's operator_uid, a pending record's topology: None here)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("operator_uid", "topology")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return records.encode(record.KIND, 1, strip(record.to_body()))


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


#: fixture file name -> the value it holds. Records are `<kind>-v<version>[-case].json`;
#: JSON values inside records are `value-<name>.json`.
RECORDS: dict[str, Callable[[], Any]] = {
    "pending-checkpoint-v2.json": pending_v2,
    "ack-v2.json": lambda: acks_v2()[0],
    "ack-v2-sink.json": lambda: acks_v2()[2],
    "ack-v2-spark-work.json": ack_v2_spark_work,
    "ack-v2-storage-requests.json": ack_v2_storage_requests,
    "decline-v1.json": decline,
    "checkpoint-outcome-v2-completed.json": completed_outcome_v2,
    "checkpoint-outcome-v2-aborted.json": aborted_outcome_v2,
    "pipeline-control-v2.json": control,
    "pipeline-control-v2-stopping.json": control_stopping,
    "pipeline-control-v2-stopped.json": control_stopped,
    "pipeline-control-v2-gated-restore.json": control_gated_restore,
    "pipeline-control-v2-restore-passed-over.json": control_restore_passed_over,
    "pipeline-control-v2-importing.json": control_importing,
    "sink-manifest-v1.json": manifest,
    "sink-manifest-v1-pinned.json": pinned_manifest,
    "sink-manifest-v1-moving.json": moving_manifest,
    "sink-manifest-v1-timeline.json": timeline_manifest,
    "pipeline-control-v2-cascade.json": control_cascade,
    "cascade-v1.json": cascade_record,
    "cascade-v1-done.json": cascade_record_done,
    "failure-state-v1.json": failures,
    "checkpoint-id-counter-v1.json": id_counter,
    "head-pointer-v1.json": head_pointer,
    "retained-checkpoint-v1.json": retained_marker,
    "pipeline-spec-v1.json": spec,
    "savepoint-v2.json": savepoint_v2,
    "quality-report-v1.json": quality_report,
    "quality-report-v1-by-uid.json": quality_report_by_uid,
    "quarantine-v2.json": quarantine_v2,
    "quarantine-v2-restore.json": quarantine_v2_restore,
    "restore-v1.json": restore_record,
    "restore-v1-gated.json": restore_record_gated,
    "restore-v1-passed-over.json": restore_record_passed_over,
    "restore-intent-v1.json": restore_intent,
}

#: JSON values stored inside records (or a Parquet file's metadata): name -> value.
VALUES: dict[str, Callable[[], Any]] = {
    "value-source-barrier.json": source_barrier,
    "value-source-barrier-upstream.json": upstream_barrier,
    "value-state-handle.json": state_handle,
    "value-state-handle-changelog.json": lambda: state_handle(1, layer=2),
    "value-key-group-range.json": lambda: KeyGroupRange(64, 127),
    "value-source-split.json": source_split,
    "value-source-split-delta.json": delta_source_split,
}

#: Older shapes: name -> (their bytes as the earlier release wrote them, the value).
LEGACY: dict[str, tuple[Callable[[], bytes], Callable[[], Any]]] = {
    "quarantine-v1.json": (quarantine_v1_bytes, quarantine_v1),
    "pipeline-control-v1.json": (control_v1_bytes, control),
    "ack-v1-before-metrics.json": (ack_before_metrics_bytes, ack_before_metrics_value),
    # version 1 of the checkpoint records (before uids): read through their upgrades
    "pending-checkpoint-v1.json": (lambda: as_version_1(pending()), pending),
    "pending-checkpoint-v1-imported.json": (
        lambda: as_version_1(imported_pending()),
        imported_pending,
    ),
    "ack-v1.json": (lambda: as_version_1(acks()[0]), lambda: acks()[0]),
    "ack-v1-shared.json": (lambda: as_version_1(acks()[1]), lambda: acks()[1]),
    "ack-v1-sink.json": (lambda: as_version_1(acks()[2]), lambda: acks()[2]),
    "checkpoint-outcome-v1-completed.json": (
        lambda: as_version_1(completed_outcome()),
        completed_outcome,
    ),
    "checkpoint-outcome-v1-aborted.json": (
        lambda: as_version_1(aborted_outcome()),
        aborted_outcome,
    ),
    "savepoint-v1.json": (lambda: as_version_1(savepoint()), savepoint),
}


def write(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, make in RECORDS.items():
        (folder / name).write_bytes(make().encode())
    for name, make in VALUES.items():
        (folder / name).write_bytes(_json(make().to_json()))
    for name, (data, _) in LEGACY.items():
        (folder / name).write_bytes(data())


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER)
