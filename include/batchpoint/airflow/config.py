"""The configuration of the batchpoint DAGs, checked when the DAG file is parsed so that a
bad value fails the import with one line naming the setting.

Every value comes from `batchpoint.settings` (the one model of the BATCHPOINT_* variables,
the same the CLI and the Spark jobs read); this module adds what only a deployment can
check (the spark-submit executable and the Spark job file exist, in submit mode). At task
run time the
storage part may be replaced by the Airflow connection `batchpoint_storage` (see
hooks.py); parsing reads only the environment, as it must not depend on connections.

  BATCHPOINT_PIPELINE_REF         `module:attr` of the Pipeline(s), comma-separated
                                  (no default: the DAGs need it)
  BATCHPOINT_CHECKPOINT_INTERVAL  seconds (300, 90s, 5m, 1h), a cron expression or
                                  preset, `none`, or `upstream`: after each publish of
                                  a sink the pipeline's sources read (default 300)
  BATCHPOINT_CHECKPOINT_INTERVALS the same by pipeline, a JSON object over the above
                                  ({"reports": "upstream"})
  BATCHPOINT_SPARK_MODE           connect (default), submit or local: see
                                  batchpoint.settings
  BATCHPOINT_SPARK_REMOTE         sc://host:port of the Spark Connect server (connect)
  BATCHPOINT_SPARK_CONN_ID        the Airflow connection of the Spark endpoint (default:
                                  spark_connect_default in connect mode, spark_default in
                                  submit mode); the variables above are its fallback
  BATCHPOINT_SPARK_CONF           Spark settings of every job's session, a JSON object
  BATCHPOINT_CONNECT_CLIENT       task (default) or subprocess: see batchpoint.settings
  BATCHPOINT_SPARK_SUBMIT         the spark-submit executable (default: pyspark's, next
                                  to this Python)
  BATCHPOINT_SPARK_JOB            the Spark entry point (default: the one inside the
                                  installed package, batchpoint/jobs/run_operator.py)
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
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import batchpoint
from batchpoint.errors import ConfigError
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.settings import (
    KNOWN_VARIABLES,
    MISSING_REMOTE,
    BatchpointEnvironment,
    Settings,
    SparkMode,
    read_environment,
)
from batchpoint.settings.sensor_mode import SensorMode
from batchpoint.settings.submit_options import spark_submit_program, submit_conf
from batchpoint.settings.values import CheckpointSchedule
from batchpoint.storage.redaction import redact_uri

__all__ = [
    "KNOWN_VARIABLES",
    "SENSOR_MODES",
    "START_DATE",
    "AirflowDeployment",
    "package_root",
]

SENSOR_MODES = ("deferrable", "reschedule", "poke")
#: The Airflow tasks are thin Spark Connect clients unless BATCHPOINT_SPARK_MODE says
#: otherwise: no JVM in the worker, one warm Spark for every task.
DEFAULT_SPARK_MODE = SparkMode.CONNECT
#: Fixed so that DAG definitions do not change between parses (a moving start_date
#: would make every parse a new DAG version).
START_DATE = datetime(2025, 1, 1, tzinfo=UTC)


def package_root() -> Path:
    """The folder holding the batchpoint package (site-packages, or include/ in a
    checkout): the Spark driver gets it on PYTHONPATH, so a deployment that mounts the
    code instead of installing it works."""
    return Path(batchpoint.__file__).resolve().parents[1]


def default_spark_job() -> Path:
    """The Spark entry point shipped inside the package (found by path: importing it
    would import Spark at DAG parse time)."""
    return Path(batchpoint.__file__).resolve().parent / "jobs" / "run_operator.py"


@dataclass(frozen=True)
class AirflowDeployment:
    """The validated configuration of the batchpoint DAGs."""

    pipeline_refs: tuple[str, ...]
    settings: Settings
    #: interval, cron expression, UPSTREAM (its upstreams' publishes) or None (manual)
    schedule: CheckpointSchedule
    spark_submit: str
    spark_job: str
    spark_submit_args: tuple[str, ...] = ()
    pyspark_python: str = sys.executable
    sensor_mode: SensorMode = SensorMode.DEFERRABLE
    poll_interval: float = 5.0
    task_retries: int = 1
    retry_delay: float = 30.0
    cleanup_grace: float = 120.0
    storage_conn_id: str = "batchpoint_storage"
    api_conn_id: str = "batchpoint_airflow_api"
    quality_gate_ref: str | None = None
    audit: bool = False
    #: connect (thin Spark Connect clients of `spark_remote`), submit or local.
    spark_mode: SparkMode = SparkMode.SUBMIT
    # Shown in the repr by `settings`, without a `;token=`.
    spark_remote: str | None = field(default=None, repr=False)
    #: The Airflow connection of the Spark endpoint (None: the mode's default id).
    spark_conn_id: str | None = None
    #: task (the operator task's Connect client in its own process) or subprocess.
    connect_client: str = "task"
    start_date: datetime = START_DATE
    #: Schedules by pipeline name, over `schedule` (BATCHPOINT_CHECKPOINT_INTERVALS).
    schedules: Mapping[str, CheckpointSchedule] = field(default_factory=dict)

    def schedule_of(self, pipeline: str) -> CheckpointSchedule:
        """The schedule of `pipeline`'s checkpoint DAG: its own, else the deployment's."""
        return self.schedules.get(pipeline, self.schedule)

    def schedule_setting(self, pipeline: str) -> str:
        """The variable that gives `pipeline` its schedule, for an error to name."""
        if pipeline in self.schedules:
            return f'BATCHPOINT_CHECKPOINT_INTERVALS["{pipeline}"]'
        return "BATCHPOINT_CHECKPOINT_INTERVAL"

    @property
    def checkpoint(self) -> CheckpointConfig:
        return self.settings.checkpoint

    @property
    def spark_description(self) -> str:
        if self.spark_mode is SparkMode.CONNECT:
            return f"Spark Connect server `{redact_uri(self.spark_remote)}` (connect mode)"
        return f"master `{redact_uri(self.settings.spark_master)}` ({self.spark_mode} mode)"

    @property
    def spark_conf(self) -> dict[str, str]:
        """The `--conf key=value` pairs of BATCHPOINT_SPARK_SUBMIT_ARGS, then
        BATCHPOINT_SPARK_CONF, for a Spark session started inside a task (the audit): on
        a cluster the same settings (the driver's host, executor memory) let the
        executors reach that driver too."""
        return {**submit_conf(self.spark_submit_args), **self.settings.spark_conf}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AirflowDeployment:
        """Read and check every setting; raises ConfigError naming the first bad one."""
        return cls.of(read_environment(env), env)

    @classmethod
    def of(
        cls, model: BatchpointEnvironment, env: Mapping[str, str] | None = None
    ) -> AirflowDeployment:
        mode = model.spark_mode or DEFAULT_SPARK_MODE
        if mode is SparkMode.CONNECT and not (model.spark_remote or model.spark_conn_id):
            raise ConfigError(MISSING_REMOTE)
        settings = Settings.of(model, env)
        return cls(
            pipeline_refs=model.pipeline_ref,
            settings=replace(settings, spark_mode=mode),
            schedule=model.checkpoint_interval,
            schedules=dict(model.checkpoint_intervals),
            # Only submit mode runs spark-submit and the job file; the others must not
            # fail on a deployment (an Airflow image without Spark) that has neither.
            spark_submit=_spark_submit(model.spark_submit, required=mode is SparkMode.SUBMIT),
            spark_job=_spark_job(model.spark_job, required=mode is SparkMode.SUBMIT),
            spark_submit_args=model.spark_submit_args,
            pyspark_python=model.pyspark_python or sys.executable,
            sensor_mode=model.ack_sensor_mode,
            poll_interval=model.ack_poll_interval,
            task_retries=model.task_retries,
            retry_delay=model.task_retry_delay,
            cleanup_grace=model.cleanup_grace,
            storage_conn_id=model.storage_conn_id,
            api_conn_id=model.api_conn_id,
            quality_gate_ref=model.quality_gate,
            audit=model.audit,
            spark_mode=mode,
            spark_remote=model.spark_remote,
            spark_conn_id=model.spark_conn_id,
            connect_client=model.connect_client,
        )


def _spark_submit(given: str | None, required: bool = True) -> str:
    spark_submit = given or spark_submit_program()
    if not required and not given:
        return spark_submit or ""
    if not spark_submit:
        raise ConfigError(
            "BATCHPOINT_SPARK_SUBMIT is not set and no spark-submit was found next to "
            f"{sys.executable} or on PATH (install batchpoint[spark], or set it)"
        )
    resolved = shutil.which(spark_submit) if "/" not in spark_submit else spark_submit
    if not resolved or not (os.path.isfile(resolved) and os.access(resolved, os.X_OK)):
        raise ConfigError(f"BATCHPOINT_SPARK_SUBMIT={spark_submit!r}: not an executable file")
    return resolved


def _spark_job(given: str | None, required: bool = True) -> str:
    spark_job = given or str(default_spark_job())
    if required and not os.path.isfile(spark_job):
        raise ConfigError(f"BATCHPOINT_SPARK_JOB={spark_job!r}: no such file")
    return spark_job
