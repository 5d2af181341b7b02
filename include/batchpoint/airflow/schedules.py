"""A checkpoint DAG's schedule in Airflow's terms, and in its doc's words.

- an interval: DeltaTriggerTimetable; a cron expression: CronTriggerTimetable (both
  passed explicitly: a bare timedelta schedule in Airflow 3.3.2 picks its timetable from
  the wrong config option, [scheduler] create_cron_data_intervals);
- None: by hand only;
- UPSTREAM (BATCHPOINT_CHECKPOINT_INTERVAL=upstream, or per pipeline in
  BATCHPOINT_CHECKPOINT_INTERVALS): data-aware, on the Assets of the upstream sinks the
  pipeline's sources read (airflow/assets.py), any of them (`|`, Airflow's AssetAny):
  a run after each upstream checkpoint that published one;
- an Asset, an asset condition or a list of assets (the factory's `schedule=` only):
  Airflow's own meaning (a list: all of them).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, AssetAll, AssetAny

from batchpoint.airflow.assets import upstream_sink_assets
from batchpoint.airflow.compat import CronTriggerTimetable, DeltaTriggerTimetable
from batchpoint.errors import ConfigError
from batchpoint.runtime.api import Pipeline
from batchpoint.settings import parse_interval
from batchpoint.settings.values import UPSTREAM


@dataclass(frozen=True)
class RenderedSchedule:
    """What `DAG(schedule=...)` gets, and how the DAG's doc says it."""

    airflow: Any
    text: str


def render_schedule(
    pipeline: Pipeline,
    schedule: Any,
    deployed: Mapping[str, Pipeline] | None = None,
    setting: str = "schedule",
) -> RenderedSchedule:
    """`schedule` of `pipeline`'s checkpoint DAG (see the module's doc). `deployed`: the
    deployment's pipelines by name, to find an upstream sink's uid by its name;
    `setting`: where the schedule comes from, named in errors."""
    if isinstance(schedule, str):  # as the setting reads it: "5m", "upstream", cron
        schedule = parse_interval(schedule, setting)
    if schedule is None:
        return RenderedSchedule(None, "manual only")
    if isinstance(schedule, timedelta):
        return RenderedSchedule(DeltaTriggerTimetable(schedule), _every(schedule))
    if schedule is UPSTREAM:
        assets = upstream_sink_assets(pipeline, deployed)
        if not assets:
            raise ConfigError(
                f"{setting}=upstream: pipeline '{pipeline.name}' would run its checkpoints "
                "after each publish of the sinks its sources read from other pipelines, and "
                "it reads none (no source with upstream=): give it a duration, a cron "
                "expression or none (BATCHPOINT_CHECKPOINT_INTERVALS sets one pipeline's)"
            )
        return RenderedSchedule(functools.reduce(operator.or_, assets), _after(assets))
    if isinstance(schedule, str):
        return RenderedSchedule(
            CronTriggerTimetable(schedule, timezone="UTC"), f"cron `{schedule}`"
        )
    text = f"on the assets {_condition(schedule)}, as the DAG factory was given them"
    return RenderedSchedule(schedule, text)


def _every(interval: timedelta) -> str:
    return f"every {interval.total_seconds():g}s"


def _uris(assets: list[Asset]) -> str:
    return ", ".join(f"`{a.uri}`" for a in assets)


def _after(assets: list[Asset]) -> str:
    return f"after each publish of {'any of ' if len(assets) > 1 else ''}{_uris(assets)}"


def _condition(schedule: Any) -> str:
    """An asset condition in words: `uri`, `a` | `b` (any), `a` & `b` (all; a list)."""
    if isinstance(schedule, Asset):
        return f"`{schedule.uri}`"
    if isinstance(schedule, AssetAny | AssetAll | list | tuple):
        parts = schedule.objects if isinstance(schedule, AssetAny | AssetAll) else schedule
        joined = (" | " if isinstance(schedule, AssetAny) else " & ").join(map(_condition, parts))
        return joined if len(parts) == 1 else f"({joined})"
    return f"`{getattr(schedule, 'name', schedule)}`"  # an alias, a reference
