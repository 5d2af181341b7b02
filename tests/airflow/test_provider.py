"""batchpoint as an Airflow provider, in this checkout's environment (the wheel itself is
tested in tests/packaging): the provider description passes Airflow's own schema, the
plugin is registered once whether it comes from the entry point or the plugins folder,
and the repository's entry files are the package's, thinly wrapped."""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

PROJECT = Path(__file__).resolve().parents[2]


def test_the_provider_info_passes_airflows_schema():
    from airflow.providers_manager import _create_provider_info_schema_validator

    from batchpoint.airflow.provider import get_provider_info

    info = get_provider_info()
    _create_provider_info_schema_validator().validate(info)
    assert info["package-name"] == "batchpoint"
    for group in ("operators", "sensors", "triggers", "hooks"):
        for entry in info[group]:
            for module in entry["python-modules"]:
                assert importlib.util.find_spec(module) is not None, module


def test_the_plugins_folder_file_defers_to_the_entry_point(monkeypatch):
    from batchpoint.airflow import plugin

    path = str(PROJECT / "plugins" / "batchpoint_plugin.py")
    monkeypatch.setattr(plugin, "registered_by_entry_point", lambda: True)
    assert "BatchpointPlugin" not in runpy.run_path(path)
    monkeypatch.setattr(plugin, "registered_by_entry_point", lambda: False)
    assert runpy.run_path(path)["BatchpointPlugin"] is plugin.BatchpointPlugin


def test_this_environment_registers_the_plugin_by_entry_point():
    # `uv sync` installs the project, entry points included
    from batchpoint.airflow.plugin import registered_by_entry_point

    assert registered_by_entry_point() is True


def test_the_repository_entry_files_are_thin_wrappers():
    dag_file = (PROJECT / "dags" / "batchpoint_dags.py").read_text()
    assert "from batchpoint.airflow.dags import load_dags" in dag_file
    assert "globals().update(load_dags())" in dag_file
    job = (PROJECT / "spark_jobs" / "run_operator.py").read_text()
    assert "from batchpoint.jobs.run_operator import main" in job
    for text in (dag_file, job):
        code = [line for line in text.splitlines() if line and not line.startswith((" ", '"'))]
        assert len(code) <= 5, code


def test_the_dag_entry_names_a_bad_setting_in_one_line(tmp_path):
    from batchpoint.airflow.dags import load_dags
    from batchpoint.errors import ConfigError

    env = {
        "BATCHPOINT_ROOT": tmp_path.as_uri(),
        "BATCHPOINT_PIPELINE_REF": "batchpoint.demo.payments:pipeline",
        "BATCHPOINT_SPARK_REMOTE": "sc://spark-connect:15002",
        "BATCHPOINT_TASK_RETRIES": "-1",
    }
    with pytest.raises(ConfigError) as raised:
        load_dags(env)
    assert str(raised.value) == (
        "batchpoint DAGs not loaded: BATCHPOINT_TASK_RETRIES='-1': must be at least 0"
    )


def test_the_dag_entry_builds_the_dags_of_the_given_environment(tmp_path):
    from batchpoint.airflow.dags import load_dags

    dags = load_dags(
        {
            "BATCHPOINT_ROOT": tmp_path.as_uri(),
            "BATCHPOINT_PIPELINE_REF": "batchpoint.demo.payments:pipeline",
            "BATCHPOINT_SPARK_REMOTE": "sc://spark-connect:15002",
            "BATCHPOINT_AUDIT": "true",
        }
    )
    assert sorted(dags) == ["payments_checkpoint", "payments_restore", "payments_savepoint"]
    assert "audit" in dags["payments_checkpoint"].task_dict
    assert list(tmp_path.iterdir()) == []  # building DAGs writes nothing to storage
