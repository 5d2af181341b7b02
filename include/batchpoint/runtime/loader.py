"""Finding a pipeline definition from a `module:attribute` reference."""

from __future__ import annotations

import importlib

from batchpoint.errors import ConfigError
from batchpoint.runtime.api import Pipeline


def load_pipeline(reference: str) -> Pipeline:
    """`package.module:name`, where name is a Pipeline or a function returning one."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"pipeline reference {reference!r}: expected 'package.module:name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"pipeline reference {reference!r}: cannot import: {exc}") from None
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise ConfigError(
            f"pipeline reference {reference!r}: module '{module_name}' has no '{attribute}'"
        ) from None
    if callable(value) and not isinstance(value, Pipeline):
        value = value()
    if not isinstance(value, Pipeline):
        raise ConfigError(
            f"pipeline reference {reference!r} is a {type(value).__name__}, not a Pipeline"
        )
    return value
