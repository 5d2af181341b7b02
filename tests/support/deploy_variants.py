"""The payments pipeline as a later deploy changes it, by `module:attr` reference for
the `batchpoint plan` tests (`support.deploy_variants:renamed_without_uid`, ...)."""

from __future__ import annotations

from dataclasses import replace

from batchpoint.runtime.api import Pipeline
from demo.payments import build_pipeline


def renamed(uid: str | None) -> Pipeline:
    """`dedup` renamed `dedup2`; with `uid`, its identity kept."""
    pipeline = build_pipeline()
    dedup = pipeline.operators.pop("dedup")
    pipeline.operators = {
        "dedup2": replace(dedup, name="dedup2", uid=uid or "dedup2"),
        **pipeline.operators,
    }
    pipeline.operators["balances"] = replace(pipeline.operators["balances"], inputs=("dedup2",))
    return pipeline


def without_alerts(*, dropped: bool) -> Pipeline:
    """The `alerts` sink removed (declared dropped or not)."""
    pipeline = build_pipeline()
    del pipeline.sinks["alerts"]
    if dropped:
        pipeline.drop_sink("alerts")
    return pipeline


renamed_without_uid = renamed(None)
renamed_with_uid = renamed("dedup")
alerts_removed = without_alerts(dropped=False)
alerts_dropped = without_alerts(dropped=True)
