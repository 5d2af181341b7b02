"""The ack sensor: waits beside the operator tasks until every expected task of the
run's checkpoint has acknowledged it (then `finalize` may run), or fails fast when a task
declines it, or expires it at its deadline.

Like the Amazon provider's sensors it looks once, and if the answer is not there yet it
defers to `CheckpointAckTrigger` (deferrable=True; its default is Airflow's `[operators]
default_deferrable`, as theirs is) or falls back to the ordinary poke/reschedule loop.
The DAG factory always says which (BATCHPOINT_ACK_SENSOR_MODE, deferrable by default).
Reschedule mode suits executors that run one task at a time (`dag.test()` runs a deferred
trigger inline, which would block the very operator tasks whose acks it waits for).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from batchpoint.airflow.compat import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    conf,
)
from batchpoint.airflow.links import CHECKPOINT_LINKS
from batchpoint.airflow.mixins import BatchpointTaskMixin
from batchpoint.airflow.triggers import (
    ABORTED,
    DECLINED,
    DONE,
    TIMEOUT,
    CheckpointAckTrigger,
    ack_event,
    progress_line,
)
from batchpoint.errors import StorageUnavailable
from batchpoint.ops.epoch import expire
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.coordinator import AckProgress

#: How much longer than the checkpoint's own deadline the deferral may last: the trigger
#: fires at the deadline itself; Airflow's deferral timeout is only the backstop.
DEFERRAL_GRACE = 60.0


class CheckpointAckSensor(BatchpointTaskMixin, BaseSensorOperator):
    operator_extra_links = CHECKPOINT_LINKS

    ui_color = "#e0ecff"

    def __init__(
        self,
        *,
        pipeline: str,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.deferrable = deferrable
        self.poll_interval = poll_interval

    def _read(self, checkpoint_id: int) -> tuple[AckProgress, float] | None:
        """The checkpoint's acks and its deadline; None when storage does not answer,
        which is "not yet": the operator tasks retry through an S3 restart and ack, and
        the sensor's timeout (the checkpoint's) bounds the wait."""
        try:
            coordinator = self.coordinator(self.pipeline)
            pending = coordinator.get_checkpoint(checkpoint_id)
            progress = coordinator.progress(checkpoint_id)
        except StorageUnavailable as exc:
            self.log.warning("checkpoint %s: %s; looking again", checkpoint_id, exc)
            return None
        self.log.info("checkpoint %s: %s", checkpoint_id, progress_line(progress))
        return progress, pending.deadline

    def _look(self, context: Context) -> dict[str, Any] | None:
        """One look at the acks: the event that ends the wait, or None."""
        read = self._read(self.require_checkpoint_id(context))
        return None if read is None else ack_event(*read, time.time())

    def execute(self, context: Context) -> Any:
        checkpoint_id = self.require_checkpoint_id(context)
        read = self._read(checkpoint_id)
        event = None if read is None else ack_event(*read, time.time())
        if event is not None:
            return self.execute_complete(context, event)
        if not self.deferrable:
            return super().execute(context)
        deadline = read[1] if read is not None else self._unread_deadline(context)
        self.log.info(
            "checkpoint %s: waiting for acks until %s",
            checkpoint_id,
            time.strftime("%H:%M:%S", time.localtime(deadline)),
        )
        self.defer(
            trigger=CheckpointAckTrigger(
                pipeline=self.pipeline,
                checkpoint_id=checkpoint_id,
                deadline=deadline,
                aws_conn_id=self.aws_conn_id,
                poll_interval=self.poll_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=max(1.0, deadline - time.time()) + DEFERRAL_GRACE),
        )

    def _unread_deadline(self, context: Context) -> float:
        """The trigger's deadline when storage did not answer: the checkpoint's own, as
        the run's trigger task returned it, else now + the checkpoint timeout (the
        trigger moves it to the checkpoint's once storage answers). Never the sensor's
        own timeout: that is the checkpoint timeout plus the cleanup grace, and counted
        from now it would outlast the run's dagrun_timeout (the same sum counted from
        the run's start), so Airflow would time the run out before its cleanup ran."""
        now = time.time()
        found = context["ti"].xcom_pull(task_ids=self.trigger_task_id)
        if isinstance(found, dict) and found.get("deadline") is not None:
            return min(float(found["deadline"]), now + float(self.timeout))
        return now + min(self.settings().checkpoint.timeout, float(self.timeout))

    def poke(self, context: Context) -> bool | PokeReturnValue:
        event = self._look(context)
        if event is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self.execute_complete(context, event))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        event = event or {}
        status = event.get("status")
        message = event.get("message", "")
        checkpoint_id = event.get("checkpoint_id")
        if status == DONE:
            self.log.info("checkpoint %s: %s", checkpoint_id, message)
            return event
        if status in (DECLINED, ABORTED):
            # The decline aborted the checkpoint already; a retry could not revive it.
            raise AirflowFailException(f"checkpoint {checkpoint_id} {status}: {message}")
        if status == TIMEOUT:
            return self._expire(int(checkpoint_id), event)
        raise AirflowException(f"checkpoint {checkpoint_id}: {message or event}")

    def _expire(self, checkpoint_id: int, event: dict[str, Any]) -> Any:
        # The tasks missing now, all of them, not the event's capped list.
        outcome = expire(self.coordinator(self.pipeline), checkpoint_id)
        if outcome.status is CheckpointStatus.COMPLETED:
            return {**event, "status": DONE, "message": "completed at the deadline"}
        raise AirflowSensorTimeout(f"checkpoint {checkpoint_id} expired: {outcome.message}")
