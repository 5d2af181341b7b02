"""Checkpoint metrics through Airflow's own Stats: StatsD, Datadog or OpenTelemetry,
whichever the deployment configured in `[metrics]`, with nothing of batchpoint's own to
set up. Every name starts with `batchpoint.<pipeline>.` (plain StatsD has no tags); the
pipeline is also a tag for the backends that have them.

    batchpoint.<p>.checkpoint.duration        timing, ms, trigger to completion
    batchpoint.<p>.checkpoint.state_size      gauge, bytes of the completed checkpoint
    batchpoint.<p>.checkpoint.acks            gauge, task acks of the completed checkpoint
    batchpoint.<p>.checkpoint.completed       counter, with .<type> (checkpoint|savepoint)
    batchpoint.<p>.checkpoint.failed          counter, with .<reason> (declined, expired...)
    batchpoint.<p>.restore                    counter, restores applied
    batchpoint.<p>.gate.rejected              counter, candidates the quality gate failed

A metric that cannot be sent is logged and dropped: metrics never fail a task.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from batchpoint.protocol.checkpoint import CheckpointOutcome

log = logging.getLogger(__name__)


def _name(pipeline: str, metric: str) -> str:
    return f"batchpoint.{_name_part(pipeline)}.{metric}"


def _name_part(text: str) -> str:
    # StatsD names allow [a-zA-Z0-9_.-]: anything else becomes "_", and no "." inside.
    return re.sub(r"[^a-zA-Z0-9_-]", "_", text)


def _send(action: Callable[[Any], None]) -> None:
    try:
        from batchpoint.airflow.compat import stats

        action(stats())
    except Exception:
        log.warning("batchpoint: could not emit a metric", exc_info=True)


def checkpoint_completed(outcome: CheckpointOutcome) -> None:
    completed = outcome.completed
    if completed is None:
        return
    pending = outcome.pending
    p, tags = pending.pipeline, {"pipeline": pending.pipeline, "type": pending.type.value}
    duration_ms = max(0.0, (completed.completed_at - pending.trigger_time) * 1000.0)

    def send(stats: Any) -> None:
        stats.timing(_name(p, "checkpoint.duration"), duration_ms, tags=tags)
        stats.gauge(_name(p, "checkpoint.state_size"), completed.state_size, tags=tags)
        stats.gauge(_name(p, "checkpoint.acks"), len(completed.acks), tags=tags)
        stats.incr(_name(p, "checkpoint.completed"), tags=tags)
        stats.incr(_name(p, f"checkpoint.completed.{pending.type.value}"), tags=tags)

    _send(send)


def checkpoint_failed(outcome: CheckpointOutcome) -> None:
    p = outcome.pending.pipeline
    reason = outcome.reason.code if outcome.reason else "unknown"
    tags = {"pipeline": p, "reason": reason}

    def send(stats: Any) -> None:
        stats.incr(_name(p, "checkpoint.failed"), tags=tags)
        stats.incr(_name(p, f"checkpoint.failed.{_name_part(reason)}"), tags=tags)

    _send(send)


def restored(pipeline: str) -> None:
    _send(lambda stats: stats.incr(_name(pipeline, "restore"), tags={"pipeline": pipeline}))


def gate_rejected(pipeline: str, count: int) -> None:
    if count <= 0:
        return
    tags = {"pipeline": pipeline}
    _send(lambda stats: stats.incr(_name(pipeline, "gate.rejected"), count, tags=tags))
