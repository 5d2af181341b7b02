"""Payments with one more sink, `fresh`: every event dedup passes on, appended once
ever. With no new input, dedup passes nothing on and `fresh` has nothing new to stage
(tests/runtime/test_nothing_to_do.py, tests/spark/test_connect_job_counts.py)."""

from __future__ import annotations

from typing import Any

from batchpoint.runtime.api import OperatorContext, Pipeline, SinkMode
from demo.payments import build_pipeline


def fresh_events(ctx: OperatorContext) -> Any:
    """What the `fresh` sink stages: each event dedup passes on, once ever."""
    return ctx.input("dedup").select("event_id", "account_id", "amount")


def pipeline() -> Pipeline:
    """Payments and its `fresh` sink (a Connect client loads it as support.fresh_sink:pipeline)."""
    built = build_pipeline()
    built.sink("fresh", inputs=["dedup"], key=["event_id"], mode=SinkMode.APPEND, fn=fresh_events)
    return built
