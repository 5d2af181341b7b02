"""The Airflow versions the provider runs on (3.0 to 3.3), in one place.

Most of what the provider uses has been in the Task SDK (`airflow.sdk`) since 3.0 and is
imported from it where it is used. The names below moved there later (3.1 and 3.2): each
comes from its Task SDK home when this Airflow has it, else from its 3.0 home, so that a
task raises the exception classes its own task runner catches. What 3.0 lacks entirely
(the UI plugin's nav entry and DAG tab, 3.1) is said where it is declared (plugin.py)
and in the README's compatibility matrix."""

from __future__ import annotations

from typing import Any

try:  # Airflow 3.1 and newer
    from airflow.sdk import BaseHook, TriggerRule
except ImportError:  # 3.0
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef]
    from airflow.utils.trigger_rule import TriggerRule  # type: ignore[no-redef]

try:  # Airflow 3.2 and newer
    from airflow.sdk import CronTriggerTimetable, DeltaTriggerTimetable, SkipMixin, conf
except ImportError:  # 3.0 and 3.1: core's timetables and configuration, the standard
    # provider's SkipMixin
    from airflow.configuration import conf  # type: ignore[no-redef]
    from airflow.models.skipmixin import SkipMixin  # type: ignore[no-redef]
    from airflow.timetables.trigger import (  # type: ignore[no-redef]
        CronTriggerTimetable,
        DeltaTriggerTimetable,
    )

try:  # Airflow 3.2 and newer
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
    )
except ImportError:  # 3.0 and 3.1
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
    )

try:  # Airflow 3.2 and newer
    from airflow.sdk.plugins_manager import AirflowPlugin
except ImportError:  # 3.0 and 3.1
    from airflow.plugins_manager import AirflowPlugin  # type: ignore[no-redef]


def stats() -> Any:
    """Airflow's StatsD client, imported when a metric is first sent."""
    try:  # Airflow 3.2 and newer
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # 3.0 and 3.1
        from airflow.stats import Stats  # type: ignore[no-redef]
    return Stats


__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowPlugin",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "BaseHook",
    "CronTriggerTimetable",
    "DeltaTriggerTimetable",
    "SkipMixin",
    "TriggerRule",
    "conf",
    "stats",
]
