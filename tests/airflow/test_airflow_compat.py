"""batchpoint.airflow.compat on this checkout's Airflow (3.3): every name is the one of
the Task SDK, so that a task raises what its runner catches; the provider's modules take
the moved names from compat alone. Airflow 3.0 runs the same code in the compatibility job
(bench/compat.py, tests/packaging/test_compat.py)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from batchpoint.airflow import compat
from support.python_source import parse_file

pytestmark = pytest.mark.airflow

PACKAGE = Path(compat.__file__).parent
#: Where Airflow 3.3 keeps each name of compat (its Task SDK).
NEWEST = {
    "AirflowException": "airflow.sdk.exceptions",
    "AirflowFailException": "airflow.sdk.exceptions",
    "AirflowNotFoundException": "airflow.sdk.exceptions",
    "AirflowSensorTimeout": "airflow.sdk.exceptions",
    "AirflowSkipException": "airflow.sdk.exceptions",
    "AirflowPlugin": "airflow.sdk.plugins_manager",
    "BaseHook": "airflow.sdk",
    "CronTriggerTimetable": "airflow.sdk",
    "DeltaTriggerTimetable": "airflow.sdk",
    "SkipMixin": "airflow.sdk",
    "TriggerRule": "airflow.sdk",
    "conf": "airflow.sdk",
}


@pytest.mark.parametrize("name", sorted(NEWEST))
def test_each_name_is_the_task_sdks(name):
    assert getattr(compat, name) is getattr(importlib.import_module(NEWEST[name]), name)


def test_stats_is_the_task_sdks():
    from airflow.sdk.observability.stats import Stats

    assert compat.stats() is Stats


def test_the_provider_imports_the_moved_names_from_compat_alone():
    moved = set(NEWEST)
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "compat.py":
            continue
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow"):
                names = {alias.name for alias in node.names}
                bad = names & moved or names & {"Stats"}
                if bad or node.module in ("airflow.sdk.exceptions", "airflow.exceptions"):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.module}")
    assert offenders == []
