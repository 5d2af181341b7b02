"""Ack: one acknowledgement per subtask, with its files and metrics (Flink's
acknowledgeCheckpoint); a later attempt of a task that acknowledged learns DUPLICATE and
its files are removed. Decline: an attempt that failed before its acks declines every
subtask, so the checkpoint aborts at once and nothing of it is ever published."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

from batchpoint.errors import BatchpointError, StorageUnavailable
from batchpoint.protocol.checkpoint import (
    SHARED_FROM_META,
    FileHandle,
    TaskAcknowledgeResult,
    TaskMetrics,
)
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.metrics import StorageRequests
from batchpoint.runtime.task_attempt import OperatorFailed, OperatorRunReport, TaskAttempt
from batchpoint.runtime.task_writes import Handles


def task_metrics(report: OperatorRunReport, subtask: int, files: list[FileHandle]) -> TaskMetrics:
    """A subtask's metrics: the attempt's sync and async times, the rows it read from
    upstream operators, and the rows of the files it wrote (files it shares with the
    base checkpoint are not its output), and the storage requests its writes made."""
    return TaskMetrics(
        sync_ms=report.sync_ms,
        async_ms=report.async_ms,
        records_in=report.records_in.get(subtask, 0),
        records_out=sum(f.rows for f in files if SHARED_FROM_META not in f.meta),
        spark_jobs=report.spark_jobs,
        spark_stages=report.spark_stages,
        storage_requests=StorageRequests.of(report.requests.by_kind(subtask)),
    )


def acknowledge(attempt: TaskAttempt, handles: Handles) -> dict[str, TaskAcknowledgeResult]:
    """Every subtask's ack (at most 8 at once); the results by task name."""
    coordinator, report = attempt.env.coordinator, attempt.report

    def ack(task: TaskId) -> tuple[str, TaskAcknowledgeResult]:
        files = handles.get(task.subtask, [])
        metrics = task_metrics(report, task.subtask, files)
        result = coordinator.acknowledge(
            attempt.checkpoint_id, task, attempt.attempt, files, metrics
        )
        return str(task), result

    with ThreadPoolExecutor(max_workers=min(8, len(attempt.tasks))) as pool:
        results = dict(pool.map(ack, attempt.tasks))
    summary = ", ".join(f"{t}={r.value}" for t, r in results.items())
    attempt.log(f"checkpoint {attempt.checkpoint_id}: acks {summary}")
    written = [f for fs in handles.values() for f in fs if SHARED_FROM_META not in f.meta]
    attempt.log(
        f"checkpoint {attempt.checkpoint_id}: records in {sum(report.records_in.values())}"
        f" (from upstream operators), records out {sum(f.rows for f in written)}, "
        f"{sum(f.size for f in written)} bytes in {len(written)} file(s); "
        f"sync {report.sync_ms:.0f} ms, async {report.async_ms:.0f} ms" + _spark_work(report)
    )
    return results


def _spark_work(report: OperatorRunReport) -> str:
    if report.spark_jobs is None:
        return ""
    return f"; {report.spark_jobs} Spark job(s), {report.spark_stages} stage(s)"


def decline(attempt: TaskAttempt, reason: str) -> None:
    for task in attempt.tasks:
        attempt.env.coordinator.decline(attempt.checkpoint_id, task, attempt.attempt, reason)
    attempt.log(f"checkpoint {attempt.checkpoint_id}: declined by {attempt.operator}: {reason}")


def fail(attempt: TaskAttempt, exc: Exception) -> NoReturn:
    """Decline for an operator that raised, and raise OperatorFailed. An outage is not
    the operator's fault: a Spark Connect server that went away, or storage that did
    not answer (here or in a Spark task), declines nothing (a retry once it is back can
    still complete the checkpoint) and raises SparkUnreachable or StorageUnavailable."""
    name, cid = attempt.operator, attempt.checkpoint_id
    if isinstance(exc, StorageUnavailable):
        raise exc
    if isinstance(exc, BatchpointError):
        decline(attempt, str(exc))
        raise OperatorFailed(f"{name} failed in checkpoint {cid}: {exc}") from exc
    from batchpoint.spark.remote import error_line, raised_in_task

    # batchpoint's own error raised in a Spark task (a state set null where declared
    # not null), not the worker's traceback and the JVM's stack around it
    reason = error_line(exc)
    if raised_in_task(exc) == StorageUnavailable.__name__:
        raise StorageUnavailable(f"{name} in checkpoint {cid}: {reason}") from exc
    if attempt.env.remote:
        from batchpoint.spark.connect import remote_of, server_went_away, unreachable_error

        remote = remote_of(attempt.env.session)
        if server_went_away(remote, exc):
            raise unreachable_error(remote, exc) from None
    decline(attempt, reason)
    raise OperatorFailed(f"{name} failed in checkpoint {cid}: {reason}") from exc
