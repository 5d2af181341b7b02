"""One Airflow Asset per pipeline: an event for every completed checkpoint and savepoint,
so that a downstream DAG can be scheduled on "a new checkpoint of pipeline P":

    from batchpoint.airflow.assets import batchpoint_asset

    with DAG("report", schedule=[batchpoint_asset("payments")]): ...

The event's extra names the checkpoint: {"pipeline", "checkpoint_id", "type"}. The
finalize task emits it (it succeeds exactly when the checkpoint completed); in the rare
run where finalize failed and the cleanup task completed the checkpoint instead, the
cleanup emits it through an alias, so each completed checkpoint has one event."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias, Context

from batchpoint.protocol.checkpoint import PendingCheckpoint

URI_SCHEME = "x-batchpoint"  # Airflow's convention for a scheme of one's own


def batchpoint_asset(pipeline: str) -> Asset:
    return Asset(
        name=f"batchpoint-{pipeline}", uri=f"{URI_SCHEME}://{pipeline}", group="batchpoint"
    )


def cleanup_alias(pipeline: str) -> AssetAlias:
    return AssetAlias(name=f"batchpoint-{pipeline}-completed-by-cleanup", group="batchpoint")


def event_extra(pending: PendingCheckpoint) -> dict[str, Any]:
    return {
        "pipeline": pending.pipeline,
        "checkpoint_id": pending.checkpoint_id,
        "type": pending.type.value,
    }


def emit_completed(context: Context, pending: PendingCheckpoint) -> None:
    """The finalize task's event: its outlet is the pipeline's asset."""
    context["outlet_events"][batchpoint_asset(pending.pipeline)].extra = event_extra(pending)


def emit_completed_by_cleanup(context: Context, pending: PendingCheckpoint) -> None:
    alias = cleanup_alias(pending.pipeline)
    context["outlet_events"][alias].add(
        batchpoint_asset(pending.pipeline), extra=event_extra(pending)
    )
