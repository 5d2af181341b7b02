"""Every BATCHPOINT_* setting, read and checked in one place, the same way by the CLI, the
DAGs, the Spark jobs and the UI. A bad value raises one ConfigError line naming the
variable, its value and what is wrong.

`BatchpointEnvironment` is the whole environment (a pydantic-settings model: one field
per variable, `BATCHPOINT_` + the field's name in capitals). Most code wants `Settings`
(settings.py), its storage-and-checkpointing part; `batchpoint.airflow.config.AirflowDeployment`
is its Airflow part.

  variable                          default / meaning
  BATCHPOINT_ROOT                   file://<cwd>/.batchpoint; s3://bucket/prefix or
                                    file:///absolute/path
  BATCHPOINT_S3_ENDPOINT_URL        S3 endpoint (default: boto3's, from AWS_* / ~/.aws)
  BATCHPOINT_S3_REGION, _ACCESS_KEY_ID, _SECRET_ACCESS_KEY, _SESSION_TOKEN, _PROFILE
                                    (any other BATCHPOINT_S3_<OPTION> goes to the S3 store
                                    as option <option>, checked there)
  BATCHPOINT_SPARK_MODE             how the Airflow tasks (operator jobs, the audit) reach
                                    Spark: connect (their default: thin Spark Connect
                                    clients of BATCHPOINT_SPARK_REMOTE, no JVM in the
                                    task), submit (one spark-submit per operator task, on
                                    BATCHPOINT_SPARK_MASTER) or local (a local Spark in a
                                    child process; the CLI's own commands always are)
  BATCHPOINT_SPARK_REMOTE           the Spark Connect server, sc://host:port (in connect
                                    mode, this or BATCHPOINT_SPARK_CONN_ID)
  BATCHPOINT_SPARK_CONN_ID          its Airflow connection, if any (airflow.spark_connection)
  BATCHPOINT_SPARK_CONF             Spark settings both modes apply, a JSON object
  BATCHPOINT_CONNECT_CLIENT         task (default: a connect-mode operator task's client
                                    runs in the Airflow task's process) or subprocess (a
                                    child process per task)
  BATCHPOINT_SPARK_MASTER           local[2]; in connect mode the server's own master
                                    decides and this one is not used by the tasks
  BATCHPOINT_CHECKPOINT_TIMEOUT     600 (seconds, or 90s / 5m / 1.5h / 1d; at most 30 days)
  BATCHPOINT_MIN_PAUSE              0 seconds between a completion and the next trigger
  BATCHPOINT_MAX_CONCURRENT         1 pending checkpoint at once
  BATCHPOINT_TOLERABLE_FAILED_CHECKPOINTS  3 consecutive failures before FAILED
  BATCHPOINT_NUM_RETAINED           3 completed checkpoints kept
  BATCHPOINT_VERIFY_CHECKSUMS       false: re-read every file's bytes at finalize
  BATCHPOINT_RESTORE_VERIFY_CHECKSUMS  true: check every file's sha256 before a restore
  BATCHPOINT_HISTORY_LIMIT          100 records of settled, unretained checkpoints kept
  BATCHPOINT_GC_GRACE               seconds a discarded checkpoint's folder waits before
                                    its last GC pass (default: the larger of 1 hour and
                                    timeout + cleanup grace; never less than the timeout)
  BATCHPOINT_SAVEPOINT_ROOTS        comma-separated URIs savepoints may be written to and
                                    restored from (default <root>/savepoints/)
  BATCHPOINT_QUALITY_GATE           `module:attr` of a restore quality gate (none)
  BATCHPOINT_TABLE_CATALOG          SQLAlchemy URI of the Iceberg SQL catalog of table
                                    sinks (sqlite:////shared/catalog.db,
                                    postgresql+psycopg2://...); default: pyiceberg's own
                                    config of the sink's catalog, else for a file:// root
                                    sqlite:///<root>/tables/catalog.db
  ...and the Airflow deployment's: see batchpoint.airflow.config.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from batchpoint.errors import ConfigError
from batchpoint.protocol.config import DEPLOYED_CHANGELOG_MIN_BYTES, CheckpointConfig
from batchpoint.settings import values
from batchpoint.settings.fields import (
    Bool,
    Refs,
    SavepointRoots,
    Secret,
    SparkConf,
    Text,
    count,
    default_root,
    duration,
    lowercase,
    optional,
    submit_args,
)
from batchpoint.settings.sensor_mode import SensorMode
from batchpoint.settings.values import SparkMode
from batchpoint.settings.variable_names import PREFIX, S3_PREFIX, warn_unknown_variables
from batchpoint.storage import redaction

DEFAULT_GC_GRACE = 3600.0
#: No default pipeline: the library ships none, so each deployment names its own.
NO_PIPELINE_REF = f"{PREFIX}PIPELINE_REF is not set: name the pipeline(s) as module:attribute"
MISSING_REMOTE = (
    f"{PREFIX}SPARK_MODE=connect needs {PREFIX}SPARK_REMOTE, the Spark Connect server's "
    f"address (sc://host:port), or {PREFIX}SPARK_CONN_ID, an Airflow spark_connect "
    f"connection, or set {PREFIX}SPARK_MODE=submit or local"
)


# The mapping the next model reads instead of os.environ (tests, the CLI and the Airflow
# side pass their own).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("batchpoint_environ", default=None)


class _MappingSource(EnvSettingsSource):
    def _load_env_vars(self) -> Mapping[str, str | None]:
        environ = _ENVIRON.get()
        # Variable names are matched in any case, as EnvSettingsSource does; empty
        # values count as not set (env_ignore_empty).
        return {
            name.lower(): value
            for name, value in (os.environ if environ is None else environ).items()
            if name.upper().startswith(PREFIX) and value != ""
        }


class BatchpointEnvironment(BaseSettings):
    """Every BATCHPOINT_* variable, parsed and checked. Build it with `read_environment`,
    which turns a validation failure into one ConfigError line."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, env_ignore_empty=True, extra="ignore", frozen=True
    )

    def __repr_args__(self) -> Any:
        # A Spark Connect address may carry `;token=...`: shown without it.
        for name, value in super().__repr_args__():
            yield name, redaction.redact_uri(value) if name == "spark_remote" and value else value

    # -- storage
    root: Annotated[str, BeforeValidator(values.check_root)] = Field(default_factory=default_root)
    s3_endpoint_url: Text = None
    s3_region: Text = None
    s3_access_key_id: Text = None
    s3_secret_access_key: Secret = None
    s3_session_token: Secret = None
    s3_profile: Text = None
    savepoint_roots: SavepointRoots = ()  # empty: <root>/savepoints/
    # -- Spark
    spark_master: Annotated[str, BeforeValidator(values.check_spark_master)] = "local[2]"
    # None: each front end's own default (connect for Airflow and the demo).
    spark_mode: Annotated[SparkMode | None, optional(lowercase)] = None
    spark_remote: Annotated[str | None, optional(values.check_spark_remote)] = None
    spark_conn_id: Annotated[str | None, optional(values.check_conn_id)] = None
    spark_conf: SparkConf = Field(default_factory=dict)
    connect_client: Annotated[Literal["task", "subprocess"], BeforeValidator(lowercase)] = "task"
    # -- checkpointing (CheckpointConfig)
    checkpoint_timeout: Annotated[float, duration(positive=True)] = 600.0
    min_pause: Annotated[float, duration()] = 0.0
    max_concurrent: Annotated[int, count(1)] = 1
    tolerable_failed_checkpoints: Annotated[int, count(0)] = 3
    num_retained: Annotated[int, count(1)] = 3
    verify_checksums: Bool = False
    restore_verify_checksums: Bool = True
    history_limit: Annotated[int, count(0)] = 100
    gc_grace: Annotated[float | None, optional(values.parse_duration)] = None
    changelog_chain: Annotated[int, count(0)] = 8
    changelog_min_bytes: Annotated[int, BeforeValidator(values.parse_size)] = (
        DEPLOYED_CHANGELOG_MIN_BYTES
    )
    skip_idle_epochs: Bool = True
    quality_gate: Annotated[str | None, optional(values.check_ref)] = None
    table_catalog: Secret = None  # a SQLAlchemy URI may hold a password
    # -- the Airflow deployment (batchpoint.airflow.config)
    pipeline_ref: Refs = ()  # not set (NO_PIPELINE_REF where one is needed)
    checkpoint_interval: Annotated[
        values.CheckpointSchedule, BeforeValidator(values.parse_interval)
    ] = timedelta(seconds=300)
    # per pipeline, over checkpoint_interval: {"reports": "upstream"}
    checkpoint_intervals: Annotated[
        dict[str, values.CheckpointSchedule], NoDecode, BeforeValidator(values.parse_intervals)
    ] = Field(default_factory=dict)
    spark_submit: Text = None
    spark_job: Text = None
    spark_submit_args: Annotated[tuple[str, ...], NoDecode, BeforeValidator(submit_args)] = ()
    pyspark_python: Text = None
    ack_sensor_mode: Annotated[SensorMode, BeforeValidator(lowercase)] = SensorMode.DEFERRABLE
    ack_poll_interval: Annotated[float, duration(minimum=0.1)] = 5.0
    task_retries: Annotated[int, count(0)] = 1
    task_retry_delay: Annotated[float, duration()] = 30.0
    cleanup_grace: Annotated[float, duration()] = 120.0
    storage_conn_id: Annotated[str, BeforeValidator(values.check_conn_id)] = "batchpoint_storage"
    api_conn_id: Annotated[str, BeforeValidator(values.check_conn_id)] = "batchpoint_airflow_api"
    audit: Bool = False

    @model_validator(mode="after")
    def _consistent(self) -> BatchpointEnvironment:
        if "pipeline_ref" in self.model_fields_set and not self.pipeline_ref:
            raise ValueError(f"{PREFIX}PIPELINE_REF is empty: name a module:attribute")
        if self.spark_mode is SparkMode.CONNECT and not (self.spark_remote or self.spark_conn_id):
            raise ValueError(MISSING_REMOTE)
        if self.gc_grace is not None and self.gc_grace < self.checkpoint_timeout:
            raise ValueError(
                f"{PREFIX}GC_GRACE={self.gc_grace:g}: must be at least the checkpoint timeout "
                f"({self.checkpoint_timeout:g} s): a writer may still be in flight until then"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Overrides (CLI flags) first, then the variables; no .env or secrets files.
        return (init_settings, _MappingSource(settings_cls))

    @property
    def store_options(self) -> dict[str, str]:
        return {
            name.removeprefix("s3_"): value
            for name, value in self
            if name.startswith("s3_") and value is not None
        }

    @property
    def effective_savepoint_roots(self) -> tuple[str, ...]:
        return self.savepoint_roots or (values.default_savepoint_root(self.root),)

    @property
    def effective_gc_grace(self) -> float:
        if self.gc_grace is not None:
            return self.gc_grace
        return max(DEFAULT_GC_GRACE, self.checkpoint_timeout + self.cleanup_grace)

    def checkpoint_config(self) -> CheckpointConfig:
        return CheckpointConfig(
            timeout=self.checkpoint_timeout,
            min_pause=self.min_pause,
            max_concurrent=self.max_concurrent,
            tolerable_failed_checkpoints=self.tolerable_failed_checkpoints,
            num_retained=self.num_retained,
            verify_checksums=self.verify_checksums,
            restore_verify_checksums=self.restore_verify_checksums,
            history_limit=self.history_limit,
            gc_grace=self.effective_gc_grace,
            changelog_chain=self.changelog_chain,
            changelog_min_bytes=self.changelog_min_bytes,
            skip_idle=self.skip_idle_epochs,
        )


#: Every variable of the model (the deployment descriptions are checked against it).
KNOWN_VARIABLES = frozenset(PREFIX + name.upper() for name in BatchpointEnvironment.model_fields)


def variable(field_name: str) -> str:
    """The environment variable behind a model field."""
    return PREFIX + field_name.upper()


@contextmanager
def _reading(env: Mapping[str, str] | None) -> Iterator[None]:
    token = _ENVIRON.set(env)
    try:
        yield
    finally:
        _ENVIRON.reset(token)


def read_environment(
    env: Mapping[str, str] | None = None, **overrides: Any
) -> BatchpointEnvironment:
    """The model of `env` (default os.environ); `overrides` (field names, e.g. `root`
    from a CLI flag) win over the variables; None or empty ones count as not given."""
    unknown = sorted(set(overrides) - set(BatchpointEnvironment.model_fields))
    if unknown:
        raise TypeError(f"unknown settings override(s): {', '.join(unknown)}")
    given = {k: v for k, v in overrides.items() if v is not None and v != ""}
    try:
        with _reading(env):
            model = BatchpointEnvironment(**given)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None
    _check_store_options(env, model)
    warn_unknown_variables(env, KNOWN_VARIABLES)
    return model


# One variable's text read on its own, outside the model (a deployment file's value, say),
# its name in the message as the model's own errors name theirs.


def parse_bool(text: Any, var: str, default: bool = False) -> bool:
    """`true`/`false` (any case; empty: the default), naming `var` when it is neither."""
    if text is None or not str(text).strip():
        return default
    try:
        return values.parse_bool(text)
    except ValueError as exc:
        raise ConfigError(f"{var}={text!r}: {exc}") from None


def parse_interval(text: Any, var: str = "BATCHPOINT_CHECKPOINT_INTERVAL") -> Any:
    """A checkpoint schedule (see values.parse_interval), naming `var` when bad;
    empty means the default, 300 seconds."""
    if text is None or not str(text).strip():
        text = "300"
    try:
        return values.parse_interval(text)
    except ValueError as exc:
        raise ConfigError(f"{var}={text!r}: {exc}") from None


def _one_line(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    reason = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:  # a check across variables: its message names them
        return reason
    name = variable(str(error["loc"][0]))
    if error["type"] in ("literal_error", "enum"):
        reason = "use one of " + str(error["ctx"]["expected"]).replace("'", "")
    return f"{name}={_shown(name, error['input'])}: {reason}"


#: Variables whose value never appears in a message.
_SECRET_VARIABLES = frozenset(
    [*(S3_PREFIX + o.upper() for o in redaction.CREDENTIAL_OPTIONS), PREFIX + "SPARK_CONF"]
)


def _shown(var: str, value: Any) -> str:
    """A variable's value as a message may show it: a credential masked, a URI without
    its password or token."""
    if var in _SECRET_VARIABLES:
        return repr(redaction.REDACTED)
    return redaction.redact_uri(repr(value))


def _extra_s3_variables(env: Mapping[str, str] | None) -> dict[str, str]:
    """BATCHPOINT_S3_<OPTION> variables beyond the model's fields: passed to the S3 store
    as they are, so every option a connection may set survives `as_env` in a child."""
    environ = os.environ if env is None else env
    declared = {variable(n) for n in BatchpointEnvironment.model_fields if n.startswith("s3_")}
    return {
        var: value
        for var, value in environ.items()
        if var.startswith(S3_PREFIX) and var not in declared and value.strip()
    }


def _check_store_options(env: Mapping[str, str] | None, model: BatchpointEnvironment) -> None:
    if not model.root.startswith("s3://"):
        return  # S3 options mean nothing to a file root
    from batchpoint.storage.s3 import S3Settings

    options = {**_s3_variables(model), **_extra_s3_variables(env)}
    try:
        S3Settings.from_options(_options_of(options))
    except ConfigError as exc:
        # Name the variable that is wrong on its own (a key with its partner), if one is.
        for var, value in options.items():
            alone = {var: value, **{p: options[p] for p in _PARTNERS.get(var, ()) if p in options}}
            try:
                S3Settings.from_options(_options_of(alone))
            except ConfigError as alone:
                raise ConfigError(f"{var}={_shown(var, value)}: {alone}") from None
        raise ConfigError(f"{S3_PREFIX}* variables: {exc}") from None


_PARTNERS = {
    S3_PREFIX + "ACCESS_KEY_ID": (S3_PREFIX + "SECRET_ACCESS_KEY",),
    S3_PREFIX + "SECRET_ACCESS_KEY": (S3_PREFIX + "ACCESS_KEY_ID",),
}


def _s3_variables(model: BatchpointEnvironment) -> dict[str, str]:
    return {S3_PREFIX + name.upper(): value for name, value in model.store_options.items()}


def _options_of(s3_variables: Mapping[str, str]) -> dict[str, str]:
    return {var.removeprefix(S3_PREFIX).lower(): value for var, value in s3_variables.items()}


def extra_store_options(env: Mapping[str, str] | None) -> dict[str, str]:
    """The S3 store options of the BATCHPOINT_S3_<OPTION> variables the model does not
    declare, by option name (for an s3:// root; `read_environment` has checked them)."""
    return _options_of(_extra_s3_variables(env))
