"""Everything the batchpoint DAGs are configured by, in one place, validated when the DAG
file is parsed so that a bad value fails the import with a message naming the setting.

Storage and checkpointing come from `batchpoint.settings.Settings` (BATCHPOINT_ROOT,
BATCHPOINT_S3_*, BATCHPOINT_CHECKPOINT_TIMEOUT, ...). At task run time the storage part
may be replaced by the Airflow connection `batchpoint_storage` (see hooks.py); this
module reads only the environment, as parsing must not depend on connections.

  BATCHPOINT_PIPELINE_REF         `module:attr` of the Pipeline(s), comma-separated
                                  (default batchpoint.demo.payments:pipeline)
  BATCHPOINT_CHECKPOINT_INTERVAL  seconds (300, 90s, 5m, 1h), a cron expression or
                                  preset, or `none` (default 300)
  BATCHPOINT_SPARK_SUBMIT         the spark-submit executable (default: pyspark's, next
                                  to this Python)
  BATCHPOINT_SPARK_JOB            spark_jobs/run_operator.py (default: beside include/)
  BATCHPOINT_SPARK_SUBMIT_ARGS    extra spark-submit arguments, shell syntax
  BATCHPOINT_PYSPARK_PYTHON       Python of the Spark driver and executors (this one)
  BATCHPOINT_ACK_SENSOR_MODE      deferrable (default), reschedule or poke
  BATCHPOINT_ACK_POLL_INTERVAL    seconds between looks at the acks (5)
  BATCHPOINT_TASK_RETRIES         Airflow retries of operator tasks (1)
  BATCHPOINT_TASK_RETRY_DELAY     seconds (30)
  BATCHPOINT_CLEANUP_GRACE        seconds a run may outlive its checkpoint's timeout (120)
  BATCHPOINT_STORAGE_CONN_ID      storage connection id (batchpoint_storage)
  BATCHPOINT_API_CONN_ID          REST API connection id (batchpoint_airflow_api)
  BATCHPOINT_QUALITY_GATE         `module:attr` of a restore quality gate (none)
  BATCHPOINT_AUDIT                true: audited checkpoints (write-audit-publish), the
                                  pipeline's quality suites run before each scheduled
                                  checkpoint completes; true or false (false)
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import batchpoint
from batchpoint.errors import ConfigError
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.settings import _CHECKPOINT_OPTIONS, _S3_OPTIONS, Settings

#: Every variable the DAGs read (the deployment descriptions are checked against it).
AIRFLOW_VARIABLES = (
    "BATCHPOINT_PIPELINE_REF",
    "BATCHPOINT_CHECKPOINT_INTERVAL",
    "BATCHPOINT_SPARK_SUBMIT",
    "BATCHPOINT_SPARK_JOB",
    "BATCHPOINT_SPARK_SUBMIT_ARGS",
    "BATCHPOINT_PYSPARK_PYTHON",
    "BATCHPOINT_ACK_SENSOR_MODE",
    "BATCHPOINT_ACK_POLL_INTERVAL",
    "BATCHPOINT_TASK_RETRIES",
    "BATCHPOINT_TASK_RETRY_DELAY",
    "BATCHPOINT_CLEANUP_GRACE",
    "BATCHPOINT_STORAGE_CONN_ID",
    "BATCHPOINT_API_CONN_ID",
    "BATCHPOINT_QUALITY_GATE",
    "BATCHPOINT_AUDIT",
)
SETTINGS_VARIABLES = (
    "BATCHPOINT_ROOT",
    "BATCHPOINT_SPARK_MASTER",
    *_S3_OPTIONS,
    *_CHECKPOINT_OPTIONS,
)
KNOWN_VARIABLES = frozenset(AIRFLOW_VARIABLES + SETTINGS_VARIABLES)

DEFAULT_PIPELINE_REF = "batchpoint.demo.payments:pipeline"
DEFAULT_INTERVAL = "300"
SENSOR_MODES = ("deferrable", "reschedule", "poke")
#: Fixed so that DAG definitions do not change between parses (a moving start_date
#: would make every parse a new DAG version).
START_DATE = datetime(2025, 1, 1, tzinfo=UTC)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_UNITS = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
# Airflow's presets (airflow.sdk resolves them the same way when building the timetable).
_CRON_PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}


def package_root() -> Path:
    """include/ (the folder holding the batchpoint package): the Spark driver gets it on
    PYTHONPATH, so a deployment that mounts the code instead of installing it works."""
    return Path(batchpoint.__file__).resolve().parents[1]


def _default_spark_job() -> Path:
    return package_root().parent / "spark_jobs" / "run_operator.py"


def _default_spark_submit() -> str | None:
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("spark-submit")


@dataclass(frozen=True)
class AirflowDeployment:
    """The validated configuration of the batchpoint DAGs."""

    pipeline_refs: tuple[str, ...]
    settings: Settings
    schedule: timedelta | str | None  # interval, cron expression, or None (manual)
    spark_submit: str
    spark_job: str
    spark_submit_args: tuple[str, ...] = ()
    pyspark_python: str = sys.executable
    sensor_mode: str = "deferrable"
    poll_interval: float = 5.0
    task_retries: int = 1
    retry_delay: float = 30.0
    cleanup_grace: float = 120.0
    storage_conn_id: str = "batchpoint_storage"
    api_conn_id: str = "batchpoint_airflow_api"
    quality_gate_ref: str | None = None
    audit: bool = False
    start_date: datetime = START_DATE

    @property
    def checkpoint(self) -> CheckpointConfig:
        return self.settings.checkpoint

    @property
    def spark_conf(self) -> dict[str, str]:
        """The `--conf key=value` pairs of BATCHPOINT_SPARK_SUBMIT_ARGS, for a Spark
        session started inside a task (the audit): on a cluster the same settings (the
        driver's host, executor memory) let the executors reach that driver too."""
        conf: dict[str, str] = {}
        args = iter(self.spark_submit_args)
        for arg in args:
            if arg == "--conf":
                pair = next(args, "")
            elif arg.startswith("--conf="):
                pair = arg.removeprefix("--conf=")
            else:
                continue
            key, sep, value = pair.partition("=")
            if sep and key:
                conf[key] = value
        return conf

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AirflowDeployment:
        """Read and check every setting; raises ConfigError naming the first bad one."""
        env = os.environ if env is None else env
        settings = _settings(env)
        refs = tuple(
            r.strip()
            for r in env.get("BATCHPOINT_PIPELINE_REF", DEFAULT_PIPELINE_REF).split(",")
            if r.strip()
        )
        if not refs:
            raise ConfigError("BATCHPOINT_PIPELINE_REF is empty: name a module:attribute")
        for ref in refs:
            module, _, attribute = ref.partition(":")
            if not module or not attribute:
                raise ConfigError(
                    f"BATCHPOINT_PIPELINE_REF={ref!r}: expected 'package.module:attribute'"
                )
        spark_submit = env.get("BATCHPOINT_SPARK_SUBMIT") or _default_spark_submit()
        if not spark_submit:
            raise ConfigError(
                "BATCHPOINT_SPARK_SUBMIT is not set and no spark-submit was found next to "
                f"{sys.executable} or on PATH (install pyspark, or set it)"
            )
        resolved = shutil.which(spark_submit) if "/" not in spark_submit else spark_submit
        if not resolved or not (os.path.isfile(resolved) and os.access(resolved, os.X_OK)):
            raise ConfigError(f"BATCHPOINT_SPARK_SUBMIT={spark_submit!r} is not an executable file")
        spark_job = env.get("BATCHPOINT_SPARK_JOB") or str(_default_spark_job())
        if not os.path.isfile(spark_job):
            raise ConfigError(f"BATCHPOINT_SPARK_JOB={spark_job!r} does not exist")
        try:
            submit_args = tuple(shlex.split(env.get("BATCHPOINT_SPARK_SUBMIT_ARGS", "")))
        except ValueError as exc:
            raise ConfigError(f"BATCHPOINT_SPARK_SUBMIT_ARGS: {exc}") from None
        mode = env.get("BATCHPOINT_ACK_SENSOR_MODE", "deferrable").strip().lower()
        if mode not in SENSOR_MODES:
            raise ConfigError(
                f"BATCHPOINT_ACK_SENSOR_MODE={mode!r}: use one of {', '.join(SENSOR_MODES)}"
            )
        gate = env.get("BATCHPOINT_QUALITY_GATE", "").strip() or None
        if gate is not None and ":" not in gate:
            raise ConfigError(f"BATCHPOINT_QUALITY_GATE={gate!r}: expected 'package.module:attr'")
        return cls(
            pipeline_refs=refs,
            settings=settings,
            schedule=parse_interval(
                env.get("BATCHPOINT_CHECKPOINT_INTERVAL", DEFAULT_INTERVAL),
                "BATCHPOINT_CHECKPOINT_INTERVAL",
            ),
            spark_submit=resolved,
            spark_job=spark_job,
            spark_submit_args=submit_args,
            pyspark_python=env.get("BATCHPOINT_PYSPARK_PYTHON") or sys.executable,
            sensor_mode=mode,
            poll_interval=_number(env, "BATCHPOINT_ACK_POLL_INTERVAL", 5.0, minimum=0.1),
            task_retries=int(_number(env, "BATCHPOINT_TASK_RETRIES", 1, minimum=0, integer=True)),
            retry_delay=_number(env, "BATCHPOINT_TASK_RETRY_DELAY", 30.0, minimum=0),
            cleanup_grace=_number(env, "BATCHPOINT_CLEANUP_GRACE", 120.0, minimum=0),
            storage_conn_id=env.get("BATCHPOINT_STORAGE_CONN_ID") or "batchpoint_storage",
            api_conn_id=env.get("BATCHPOINT_API_CONN_ID") or "batchpoint_airflow_api",
            quality_gate_ref=gate,
            audit=parse_bool(env.get("BATCHPOINT_AUDIT"), "BATCHPOINT_AUDIT"),
        )


def _settings(env: Mapping[str, str]) -> Settings:
    # Check each checkpoint variable on its own first, so the message names the variable
    # rather than the config field it feeds.
    for var, name in _CHECKPOINT_OPTIONS.items():
        if env.get(var):
            try:
                CheckpointConfig.from_mapping({name: env[var]})
            except ConfigError as exc:
                detail = str(exc).removeprefix("checkpoint config: ")
                raise ConfigError(f"{var}={env[var]!r}: {detail}") from None
    return Settings.from_env(env)


def _number(
    env: Mapping[str, str], var: str, default: float, *, minimum: float, integer: bool = False
) -> float:
    text = env.get(var, "").strip()
    if not text:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{var}={text!r} is not {kind}") from None
    if value < minimum:
        raise ConfigError(f"{var}={text!r} must be at least {minimum:g}")
    return value


def parse_bool(text: str | None, var: str, default: bool = False) -> bool:
    """`true`/`false` (any case; empty: the default). Nothing looser: a typo such as
    `ture` must fail the import rather than quietly mean false."""
    value = (text or "").strip().lower()
    if not value:
        return default
    if value not in ("true", "false"):
        raise ConfigError(f"{var}={text!r}: use true or false")
    return value == "true"


def parse_interval(text: str | None, var: str = "interval") -> timedelta | str | None:
    """`300`, `90s`, `5m`, `1.5h`, `1d` -> timedelta; `none`/`manual` -> None; anything
    else must be a cron expression or preset (`@hourly`), returned as text."""
    text = (text or "").strip()
    if not text:
        text = DEFAULT_INTERVAL
    if text.lower() in ("none", "manual", "off"):
        return None
    match = _DURATION.match(text)
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2) and match.group(2).lower()]
        if seconds <= 0:
            raise ConfigError(f"{var}={text!r}: the interval must be positive")
        return timedelta(seconds=seconds)
    if text == "@once":
        raise ConfigError(f"{var}={text!r}: a checkpoint schedule must repeat")
    from croniter import croniter  # an Airflow dependency; only needed for cron text

    if not croniter.is_valid(_CRON_PRESETS.get(text, text)):
        raise ConfigError(
            f"{var}={text!r} is neither a duration (300, 90s, 5m, 1h) nor a cron expression"
        )
    return text
