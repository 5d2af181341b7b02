"""The one `module:attribute` loader: pipelines (the CLI, the DAG factory, the Spark job,
the Airflow hooks) and quality gates (the CLI, the restore DAG) are all named this way.

It lives in runtime/, the lowest layer that names a Pipeline, so that quality/ and the
Spark entry point can use it without importing the use-case layer above them;
`batchpoint.ops` re-exports it."""

from __future__ import annotations

import importlib
import traceback
from typing import Any

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.runtime.api import Pipeline

#: The optional packages batchpoint imports as it needs them, and the extra that has
#: each: a missing one is an install hint (cli/main.py), not the pipeline's mistake.
EXTRAS = {
    "pyspark": "spark",
    "pandas": "spark",
    "airflow": "airflow",
    "great_expectations": "quality",
    "pyiceberg": "tables",
    "deltalake": "tables",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra that has the optional package `exc` misses, or None for any other."""
    return EXTRAS.get((exc.name or "").split(".")[0])


def load_object(reference: str, what: str = "reference", attr: str = "attr") -> Any:
    """The attribute `reference` (`package.module:attr`) names. Every mistake is one
    ConfigError line that starts with `what` and the reference."""
    module_name, _, attribute = reference.strip().partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{what} {reference!r}: expected 'package.module:{attr}'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} {reference!r}: cannot import: {exc}") from None
    except BatchpointError:
        raise  # the module built something batchpoint refused: its own message
    except Exception as exc:  # the user's module raised as it ran (a SyntaxError too)
        raise ConfigError(f"{what} {reference!r}: importing it failed: {raised(exc)}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(
            f"{what} {reference!r}: module '{module_name}' has no '{attribute}'"
        ) from None


def load_pipeline(reference: str) -> Pipeline:
    """`package.module:name`, where name is a Pipeline or a function returning one."""
    value = load_object(reference, "pipeline reference", "name")
    if callable(value) and not isinstance(value, Pipeline):
        try:
            value = value()
        except BatchpointError:
            raise  # batchpoint's own message
        except Exception as exc:
            if isinstance(exc, ModuleNotFoundError) and missing_extra(exc) is not None:
                raise  # a missing extra: its install hint (cli/main); any other is theirs
            raise ConfigError(
                f"pipeline reference {reference!r}: calling it failed: {raised(exc)}"
            ) from None
    if not isinstance(value, Pipeline):
        raise ConfigError(
            f"pipeline reference {reference!r} is a {type(value).__name__}, not a Pipeline"
        )
    return value


def raised(exc: BaseException) -> str:
    """An error of the user's code as one line, with where it was raised (the innermost
    frame: their file and line), instead of a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    if isinstance(exc, SyntaxError):
        where = f" (at {exc.filename}:{exc.lineno})"
        return f"SyntaxError: {exc.msg}{where}"
    return f"{type(exc).__name__}: {exc}{where}"
