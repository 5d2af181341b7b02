"""batchpoint as an Airflow provider, in this checkout's environment (the wheel itself is
tested in tests/packaging): the provider description passes Airflow's own schema, its
config section documents every BATCHPOINT_* setting with its real default, its
description survives `airflow providers list`, the plugin is registered once whether it
comes from the entry point or the plugins folder, and the repository's entry files are the
package's, thinly wrapped."""

from __future__ import annotations

import dataclasses
import importlib.resources
import importlib.util
import json
import os
import runpy
import subprocess
import sys
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


def test_the_provider_info_passes_the_installed_schema_file():
    import jsonschema
    from airflow.sdk import BaseOperatorLink

    from batchpoint.airflow.provider import get_provider_info

    schema_file = importlib.resources.files("airflow") / "provider_info.schema.json"
    info = get_provider_info()
    jsonschema.validate(info, json.loads(schema_file.read_text()))
    integrations = {entry["integration-name"] for entry in info["integrations"]}
    for group in ("operators", "sensors", "triggers", "hooks"):
        assert {entry["integration-name"] for entry in info[group]} <= integrations
    for path in info["extra-links"]:
        module, _, name = path.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module), name), BaseOperatorLink)
    # The option schema, which Airflow's draft-07 validator leaves unchecked (the option
    # definition spells additionalProperties as additional_properties).
    option_keys = {"description", "version_added", "type", "example", "default", "sensitive"}
    for option in info["config"]["batchpoint"]["options"].values():
        assert set(option) == option_keys and option["description"].strip()


def test_the_config_section_documents_every_setting_with_its_default():
    from batchpoint.airflow.provider import get_provider_info
    from batchpoint.settings import KNOWN_VARIABLES, BatchpointEnvironment, read_environment
    from batchpoint.settings.docs import S3_OPTIONS, SETTINGS
    from batchpoint.storage.s3.settings import S3Settings

    options = get_provider_info()["config"]["batchpoint"]["options"]
    s3_fields = {f.name for f in dataclasses.fields(S3Settings)} - {"redacted"}
    passed_through = {"s3_" + name for name in s3_fields} - set(BatchpointEnvironment.model_fields)
    assert set(options) == set(BatchpointEnvironment.model_fields) | passed_through
    # and no meaning outlives its setting
    assert set(SETTINGS) == set(BatchpointEnvironment.model_fields)
    assert {"s3_" + name for name in S3_OPTIONS} == passed_through
    named = {o["description"].rsplit("Environment variable: ", 1)[1][:-1] for o in options.values()}
    assert named == KNOWN_VARIABLES | {"BATCHPOINT_" + n.upper() for n in passed_through}
    assert {n for n, o in options.items() if o["sensitive"]} == {
        "s3_secret_access_key",
        "s3_session_token",
        "table_catalog",
        "spark_conf",  # a Hadoop credential may be among the Spark settings
    }
    # Each documented default, given as the variable, reads as the model's own default.
    env = {"BATCHPOINT_ROOT": "s3://bucket/prefix"}
    model = read_environment(env)
    for name, option in options.items():
        if option["default"] is None or name in passed_through:
            continue
        given = read_environment({**env, "BATCHPOINT_" + name.upper(): option["default"]})
        assert getattr(given, name) == getattr(model, name), name
    for name in passed_through:
        option_name = name.removeprefix("s3_")
        parsed = S3Settings.from_options({option_name: options[name]["default"]})
        assert getattr(parsed, option_name) == getattr(S3Settings(), option_name), name


def test_the_provider_info_costs_no_boto3_import():
    # Airflow asks every provider for its info in each process that loads providers.
    probe = (
        "import sys\n"
        "from batchpoint.airflow.provider import get_provider_info\n"
        "get_provider_info()\n"
        "print(sorted(m for m in ('boto3', 'pyspark', 'pyarrow') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_description_survives_airflow_providers_list():
    from batchpoint.airflow.provider import DESCRIPTION

    done = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "providers", "list", "-o", "json"],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    (listed,) = [p for p in json.loads(done.stdout) if p["package_name"] == "batchpoint"]
    # Airflow strips the final period and every RST mark; nothing else may be lost.
    assert listed["description"] == DESCRIPTION.removesuffix(".")


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
        "BATCHPOINT_PIPELINE_REF": "demo.payments:pipeline",
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
            "BATCHPOINT_PIPELINE_REF": "demo.payments:pipeline",
            "BATCHPOINT_SPARK_REMOTE": "sc://spark-connect:15002",
            "BATCHPOINT_AUDIT": "true",
        }
    )
    assert sorted(dags) == ["payments_checkpoint", "payments_restore", "payments_savepoint"]
    assert "audit" in dags["payments_checkpoint"].task_dict
    assert list(tmp_path.iterdir()) == []  # building DAGs writes nothing to storage
