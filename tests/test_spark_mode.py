"""BATCHPOINT_SPARK_MODE is read into a `SparkMode`, whose value is the variable's text:
the front ends compare members, and a child process gets the same text back."""

from __future__ import annotations

import pytest

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.errors import ConfigError
from batchpoint.settings import Settings, SparkMode


@pytest.mark.parametrize("text", ["connect", "Submit", " LOCAL "])
def test_each_mode_reads_as_its_member_and_goes_back_as_its_text(text: str, tmp_path) -> None:
    env = {
        "BATCHPOINT_ROOT": tmp_path.as_uri(),
        "BATCHPOINT_SPARK_MODE": text,
        "BATCHPOINT_SPARK_REMOTE": "sc://spark:15002",
    }
    settings = Settings.from_env(env)
    mode = SparkMode(text.strip().lower())
    assert settings.spark_mode is mode
    assert settings.as_env()["BATCHPOINT_SPARK_MODE"] == mode.value == text.strip().lower()
    assert Settings.from_env(settings.as_env()).spark_mode is mode
    assert AirflowDeployment.from_env(env).spark_mode is mode


def test_a_mode_given_as_text_becomes_the_member(tmp_path) -> None:
    assert Settings(tmp_path.as_uri(), spark_mode="submit").spark_mode is SparkMode.SUBMIT  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'cluster' is not a valid SparkMode"):
        Settings(tmp_path.as_uri(), spark_mode="cluster")  # type: ignore[arg-type]


def test_an_unknown_mode_names_the_members(tmp_path) -> None:
    env = {"BATCHPOINT_ROOT": tmp_path.as_uri(), "BATCHPOINT_SPARK_MODE": "cluster"}
    with pytest.raises(
        ConfigError, match="BATCHPOINT_SPARK_MODE='cluster': use one of connect, submit or local"
    ):
        Settings.from_env(env)
