"""The ack trigger: a small async loop in the triggerer that watches one checkpoint's
acks and declines and fires once with its status. It decides nothing; the sensor that
deferred to it does, in `execute_complete`.

Must stay importable by the triggerer (an installed module, not the DAGs folder), and
carries its own absolute deadline: `dag.test()` runs triggers inline and ignores the
deferral timeout, and a trigger that can only wait would then hang forever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from batchpoint.airflow.mixins import BatchpointHookMixin, storage_conn_id_of
from batchpoint.errors import BatchpointError, StorageUnavailable
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.coordinator import AckProgress, CheckpointCoordinator

DONE = "done"
DECLINED = "declined"
ABORTED = "aborted"
TIMEOUT = "timeout"
ERROR = "error"


def progress_line(progress: AckProgress) -> str:
    """`acks 3 of 6 (missing: balances#0, ...)`: what the sensor and trigger log."""
    done = len(progress.acknowledged)
    line = f"acks {done} of {done + len(progress.missing)}"
    if progress.missing:
        shown = ", ".join(map(str, progress.missing[:8]))
        more = f" and {len(progress.missing) - 8} more" if len(progress.missing) > 8 else ""
        line += f" (missing: {shown}{more})"
    return line


def earliest(deadline: float, progress: AckProgress) -> float:
    """`deadline`, or the checkpoint's own if that comes first."""
    return deadline if progress.deadline is None else min(deadline, progress.deadline)


def ack_event(progress: AckProgress, deadline: float, now: float) -> dict[str, Any] | None:
    """What one look at the storage says, as a trigger event payload; None: keep waiting.
    Shared by the trigger and the sensor's non-deferrable modes. The wait ends by the
    earlier of `deadline` and the checkpoint's own: a sensor that deferred while storage
    did not answer guessed its deadline, and the run must not time out before it."""
    deadline = earliest(deadline, progress)
    base: dict[str, Any] = {
        "checkpoint_id": progress.checkpoint_id,
        "acknowledged": len(progress.acknowledged),
        "expected": len(progress.acknowledged) + len(progress.missing),
    }
    outcome = progress.outcome
    if progress.status is None:
        return {**base, "status": ABORTED, "message": "the checkpoint does not exist"}
    if progress.status is CheckpointStatus.COMPLETED:
        return {**base, "status": DONE, "message": "completed"}
    if progress.declines:
        first = progress.declines[0]
        return {
            **base,
            "status": DECLINED,
            "task": str(first.task),
            "message": f"task {first.task} declined: {first.reason}",
        }
    if progress.status is CheckpointStatus.ABORTED and outcome is not None:
        reason = outcome.reason.code if outcome.reason else "aborted"
        return {**base, "status": ABORTED, "reason": reason, "message": outcome.message}
    if progress.all_acknowledged:
        return {**base, "status": DONE, "message": "every task acknowledged"}
    if now >= deadline:
        return {
            **base,
            "status": TIMEOUT,
            "missing": [str(t) for t in progress.missing[:20]],
            "message": f"{len(progress.missing)} task(s) had not acknowledged by the deadline",
        }
    return None


class CheckpointAckTrigger(BatchpointHookMixin, BaseTrigger):
    """Fires {"status": done|declined|aborted|timeout|error, ...} for one checkpoint."""

    def __init__(
        self,
        pipeline: str,
        checkpoint_id: int,
        deadline: float,
        aws_conn_id: str | None = None,
        poll_interval: float = 5.0,
        storage_conn_id: str | None = None,  # old name, as triggers serialized before it
    ) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.checkpoint_id = int(checkpoint_id)
        self.deadline = float(deadline)
        self.aws_conn_id = storage_conn_id_of(aws_conn_id, storage_conn_id, type(self).__name__)
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "pipeline": self.pipeline,
                "checkpoint_id": self.checkpoint_id,
                "deadline": self.deadline,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    async def _coordinator(self) -> CheckpointCoordinator:
        settings = await self.hook.aget_settings()
        # Opening an S3 store imports boto3 and checks the bucket: off the event loop.
        return await asyncio.to_thread(self.hook.coordinator, self.pipeline, settings)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        coordinator: CheckpointCoordinator | None = None
        logged = ""
        deadline = self.deadline  # the checkpoint's own once a look has read it
        while True:
            try:
                if coordinator is None:
                    coordinator = await self._coordinator()
                progress = await asyncio.to_thread(coordinator.progress, self.checkpoint_id)
            except StorageUnavailable as exc:
                # An S3 restart outlasts the store's own retries; the operator tasks retry
                # through it and ack, so the wait goes on until the checkpoint's deadline.
                if time.time() >= deadline:
                    yield self._error(exc)
                    return
                self.log.warning(
                    "checkpoint %s: %s; looking again until its deadline", self.checkpoint_id, exc
                )
                await asyncio.sleep(self.poll_interval)
                continue
            except BatchpointError as exc:
                # Storage that cannot be used (no bucket, bad keys, bad settings): the
                # sensor fails with the message, not the triggerer with a traceback.
                yield self._error(exc)
                return
            if (line := progress_line(progress)) != logged:
                self.log.info("checkpoint %s: %s", self.checkpoint_id, line)
                logged = line
            deadline = earliest(deadline, progress)
            event = ack_event(progress, deadline, time.time())
            if event is not None:
                self.log.info("checkpoint %s: %s", self.checkpoint_id, event["message"])
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_interval)

    def _error(self, exc: BatchpointError) -> TriggerEvent:
        return TriggerEvent(
            {"checkpoint_id": self.checkpoint_id, "status": ERROR, "message": str(exc)}
        )
