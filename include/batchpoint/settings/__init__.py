"""Every BATCHPOINT_* setting, read and checked in one place, the same way by the CLI, the
DAGs, the Spark jobs and the UI.

- `environment`: `BatchpointEnvironment`, the model of every variable, and
  `read_environment`, which turns a bad value into one ConfigError line; the table of
  the variables is there;
- `settings`: `Settings`, the part most code wants (storage, Spark, checkpointing);
- `values`: how each kind of value is parsed (durations, counts, roots, Spark masters,
  schedules), pure functions raising ValueError;
- `fields`: those rules bound to the model's pydantic field types;
- `variable_names`: the BATCHPOINT_* prefixes, the names that are not settings, and the
  warning for a name nothing reads (a misspelled setting);
- `docs`: what each setting means (the Airflow provider's config section shows it);
- `spark_endpoint`: the settings of Spark work that names no endpoint (a restore's
  quality gate), as the front end running it found them.

`batchpoint.airflow.config.AirflowDeployment` is the Airflow deployment's view of the same
model.
"""

from batchpoint.settings.environment import (
    KNOWN_VARIABLES,
    MISSING_REMOTE,
    NO_PIPELINE_REF,
    BatchpointEnvironment,
    parse_bool,
    parse_interval,
    read_environment,
    variable,
)
from batchpoint.settings.settings import Settings
from batchpoint.settings.values import SparkMode

__all__ = [
    "KNOWN_VARIABLES",
    "MISSING_REMOTE",
    "NO_PIPELINE_REF",
    "BatchpointEnvironment",
    "Settings",
    "SparkMode",
    "parse_bool",
    "parse_interval",
    "read_environment",
    "variable",
]
