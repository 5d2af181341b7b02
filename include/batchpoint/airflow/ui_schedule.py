"""What Airflow's scheduler does to a pipeline, for its Checkpoints page: whether its
checkpoint DAG is paused, and what that means for the checkpoints it left pending.

A paused DAG gets no new run, and the runs in flight get no task scheduled either, so a
pending checkpoint waits for acks that cannot come until its deadline passes, and nothing
says so in Airflow's own pages: this one does, with the deadline."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from batchpoint.protocol.pipeline_ports import PipelineHistory


def paused_dags(dag_ids: Iterable[str]) -> set[str]:
    """The DAGs among `dag_ids` that are paused, read from Airflow's database (the
    plugin runs in the api-server, which has it)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    wanted = list(dag_ids)
    query = select(DagModel.dag_id).where(DagModel.dag_id.in_(wanted), DagModel.is_paused)
    with create_session() as session:
        return set(session.scalars(query))


def pending_deadlines(c: PipelineHistory) -> dict[int, float]:
    """Each pending checkpoint's deadline (epoch seconds), by id."""
    return {p.checkpoint_id: p.deadline for p in c.pending_checkpoints()}


def _utc(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class PausedNotice:
    """The page's word on a paused checkpoint DAG: `text`, and `overdue` when a pending
    checkpoint's deadline has passed already."""

    text: str
    overdue: bool


def paused_notice(
    dag_id: str, paused: bool, pending: Mapping[int, float], now: float
) -> PausedNotice | None:
    """None while the DAG runs; else what pausing it does to the checkpoints."""
    if not paused:
        return None
    if not pending:
        return PausedNotice(
            f"{dag_id} is paused: no checkpoint is taken until it is unpaused.", False
        )
    waits = []
    for cid, deadline in sorted(pending.items()):
        verb = "expired at" if deadline <= now else "expires at"
        waits.append(f"checkpoint {cid} is pending and {verb} {_utc(deadline)} UTC")
    return PausedNotice(
        f"{dag_id} is paused: {'; '.join(waits)}. Its run gets no task scheduled while "
        "the DAG is paused, so its acks cannot come: unpause the DAG to let the run "
        "finish before the deadline; past it, the run (once unpaused) or `batchpoint gc` "
        "aborts the checkpoint as expired and the next run starts again from the head.",
        any(deadline <= now for deadline in pending.values()),
    )
