"""What Airflow's providers manager learns about batchpoint (the
`apache_airflow_provider` entry point), in the shape of Airflow's provider-info schema
(`airflow/provider_info.schema.json`, checked in tests/airflow/test_provider.py). The UI
plugin is registered through its own `airflow.plugins` entry point, not listed here, so
Airflow loads it once.

No `connection-types`: batchpoint defines no connection type of its own. Its storage
connection is the Amazon provider's `aws` type and its REST API connection the `http`
type, each registered by the provider that owns it.

The `config` section documents every BATCHPOINT_* setting, generated from their
declarations (`batchpoint.settings`, the S3 store's options) and their meanings
(`batchpoint.settings.docs`). batchpoint reads them from the environment, the same way in
every Airflow component, the Spark jobs and the CLI: the section is their reference
(`airflow config list --include-providers`, the provider's docs), not another place to
set them."""

from __future__ import annotations

from dataclasses import MISSING, fields
from datetime import timedelta
from enum import Enum
from importlib.metadata import PackageNotFoundError, version
from typing import Any, get_args

PACKAGE = "batchpoint"
INTEGRATION = "batchpoint"
SECTION = "batchpoint"

# Plain text: `airflow providers list` drops every backquote, underscore and angle
# bracket of an RST description, so none is used.
DESCRIPTION = (
    "Flink-style checkpoints, savepoints and quality-gated restores for stateful PySpark "
    "batch pipelines: the checkpoint, savepoint and restore DAGs, their operators, ack "
    "sensor and trigger, and the Checkpoints UI."
)

SECTION_DESCRIPTION = (
    "Every BATCHPOINT_* setting. batchpoint reads each from its environment variable "
    "(named in the option's description), the same way in the DAG processor, workers, "
    "triggerer, Spark jobs and CLI; a value set in this section is not read."
)


def _version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        return "0+unknown"


def _option_type(annotation: Any) -> str:
    """Airflow's option type of a field; durations take units (90s, 5m), so are text."""
    kinds = {a for a in (get_args(annotation) or (annotation,)) if a is not type(None)}
    if kinds == {bool}:
        return "boolean"
    return "integer" if kinds == {int} else "string"


def _as_text(value: Any) -> str | None:
    """A default as the variable would spell it."""
    if value is None or value is MISSING:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


def _option(variable: str, meaning: str, kind: str, default: Any, sensitive: bool) -> dict:
    return {
        "description": f"{meaning} Environment variable: {variable}.",
        "version_added": None,
        "type": kind,
        "example": None,
        "default": _as_text(default),
        "sensitive": sensitive,
    }


def config_options() -> dict[str, dict[str, Any]]:
    """An option per BATCHPOINT_* setting: the model's fields, then the S3 store's
    other options (BATCHPOINT_S3_<OPTION>), by the name of the field it is read into."""
    from batchpoint.settings import BatchpointEnvironment, variable
    from batchpoint.settings.docs import S3_OPTIONS, SETTINGS
    from batchpoint.storage.s3.settings import S3Settings

    options = {}
    for name, f in BatchpointEnvironment.model_fields.items():
        default = None if f.default_factory else f.default
        kind = _option_type(f.annotation)
        options[name] = _option(variable(name), SETTINGS[name], kind, default, not f.repr)
    for f in fields(S3Settings):
        if f.name in S3_OPTIONS:
            kind = _option_type(type(f.default))
            var = variable("s3_" + f.name)
            options["s3_" + f.name] = _option(var, S3_OPTIONS[f.name], kind, f.default, False)
    return options


def _modules(*names: str) -> list[dict[str, Any]]:
    return [{"integration-name": INTEGRATION, "python-modules": list(names)}]


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE,
        "name": "batchpoint",
        "description": DESCRIPTION,
        "versions": [_version()],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "operators": _modules("batchpoint.airflow.operators", "batchpoint.airflow.dag_factory"),
        "sensors": _modules("batchpoint.airflow.sensors"),
        "triggers": _modules("batchpoint.airflow.triggers"),
        "hooks": _modules("batchpoint.airflow.hooks"),
        "extra-links": ["batchpoint.airflow.links.CheckpointPageLink"],
        "config": {SECTION: {"description": SECTION_DESCRIPTION, "options": config_options()}},
    }
