"""The Airflow Assets of a pipeline, so that a downstream DAG can be scheduled on its data:

- one per pipeline (`batchpoint_asset`, `x-batchpoint://<pipeline>`): an event for every
  completed checkpoint and savepoint, its extra {"pipeline", "checkpoint_id", "type"};
- one per sink (`batchpoint_sink_asset`, `x-batchpoint://<pipeline>/sinks/<sink uid>`):
  an event for every completed checkpoint that published the sink, its extra
  {"pipeline", "sink", "checkpoint_id", "restore_generation", "type"}. A pipeline that
  reads another's sink (`Pipeline.source(..., upstream=, sink=)`) can have its checkpoint
  DAG scheduled on these (BATCHPOINT_CHECKPOINT_INTERVAL=upstream, `upstream_sink_assets`).

    from batchpoint.airflow.assets import batchpoint_asset, batchpoint_sink_asset

    with DAG("report", schedule=[batchpoint_asset("payments")]): ...
    with DAG("ledger", schedule=batchpoint_sink_asset("payments", "balances_table")): ...

The finalize task emits them (it succeeds exactly when the checkpoint completed): the
pipeline's asset as its outlet, the sinks' through an alias, one event per sink that the
checkpoint published (a completion a restore overtook publishes none). In the rare run
where finalize failed and the cleanup task completed the checkpoint instead, the cleanup
emits the same events through its alias, so each completed checkpoint has one of each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, AssetAlias, Context

from batchpoint.errors import ConfigError
from batchpoint.ops.epoch import PublishedSink
from batchpoint.protocol.checkpoint import PendingCheckpoint
from batchpoint.runtime.api import Pipeline

URI_SCHEME = "x-batchpoint"  # Airflow's convention for a scheme of one's own


def batchpoint_asset(pipeline: str) -> Asset:
    return Asset(
        name=f"batchpoint-{pipeline}", uri=f"{URI_SCHEME}://{pipeline}", group="batchpoint"
    )


def batchpoint_sink_asset(pipeline: str, sink_uid: str) -> Asset:
    """Sink `sink_uid` of `pipeline` (its uid: the asset stays the same across a rename
    that keeps the uid; a sink's uid is its name unless it declares one)."""
    return Asset(
        name=f"batchpoint-{pipeline}-sink-{sink_uid}",
        uri=f"{URI_SCHEME}://{pipeline}/sinks/{sink_uid}",
        group="batchpoint",
    )


def sinks_alias(pipeline: str) -> AssetAlias:
    """The finalize task's way to its sinks' assets: only the sinks it published."""
    return AssetAlias(name=f"batchpoint-{pipeline}-published-sinks", group="batchpoint")


def cleanup_alias(pipeline: str) -> AssetAlias:
    return AssetAlias(name=f"batchpoint-{pipeline}-completed-by-cleanup", group="batchpoint")


def event_extra(pending: PendingCheckpoint) -> dict[str, Any]:
    return {
        "pipeline": pending.pipeline,
        "checkpoint_id": pending.checkpoint_id,
        "type": pending.type.value,
    }


def sink_event_extra(pending: PendingCheckpoint, sink_uid: str) -> dict[str, Any]:
    return {
        "pipeline": pending.pipeline,
        "sink": sink_uid,
        "checkpoint_id": pending.checkpoint_id,
        "restore_generation": pending.restore_generation,
        "type": pending.type.value,
    }


def emit_completed(
    context: Context, pending: PendingCheckpoint, sinks: Iterable[PublishedSink] = ()
) -> None:
    """The finalize task's events: its outlets are the pipeline's asset and `sinks_alias`."""
    context["outlet_events"][batchpoint_asset(pending.pipeline)].extra = event_extra(pending)
    _add_sinks(context, sinks_alias(pending.pipeline), pending, sinks)


def emit_completed_by_cleanup(
    context: Context, pending: PendingCheckpoint, sinks: Iterable[PublishedSink] = ()
) -> None:
    alias = cleanup_alias(pending.pipeline)
    context["outlet_events"][alias].add(
        batchpoint_asset(pending.pipeline), extra=event_extra(pending)
    )
    _add_sinks(context, alias, pending, sinks)


def _add_sinks(
    context: Context, alias: AssetAlias, pending: PendingCheckpoint, sinks: Iterable[PublishedSink]
) -> None:
    for sink in sinks:
        asset = batchpoint_sink_asset(pending.pipeline, sink.uid)
        context["outlet_events"][alias].add(asset, extra=sink_event_extra(pending, sink.uid))


def upstream_sink_assets(
    pipeline: Pipeline, deployed: Mapping[str, Pipeline] | None = None
) -> list[Asset]:
    """The assets of the upstream sinks `pipeline`'s sources read, in declaration order,
    each once. A source names its sink by name or uid; the asset is the uid's, found in
    the upstream pipeline when `deployed` (pipelines by name) has it, else the name as
    given (a sink whose uid differs from its name must then be named by its uid)."""
    out: list[Asset] = []
    for source in pipeline.sources.values():
        binding = source.upstream
        if binding is None:
            continue
        upstream = (deployed or {}).get(binding.pipeline)
        uid = binding.sink if upstream is None else _sink_uid(upstream, binding.sink)
        asset = batchpoint_sink_asset(binding.pipeline, uid)
        if asset not in out:
            out.append(asset)
    return out


def _sink_uid(upstream: Pipeline, sink: str) -> str:
    """As `sources.upstream.PipelineSinkSource.sink_uid` finds it in the registered spec."""
    for declared in upstream.sinks.values():
        if sink in (declared.uid, declared.name):
            return declared.uid
    names: Sequence[str] = sorted(upstream.sinks)
    raise ConfigError(
        f"pipeline '{upstream.name}' has no sink '{sink}' (its sinks: {', '.join(names) or 'none'})"
    )
