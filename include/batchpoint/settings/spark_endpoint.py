"""The Spark endpoint of work that does not say which (a restore's quality gate, built by
user code that only knows `Settings.from_env()`): the BATCHPOINT_SPARK_* variables,
unless the front end running that work found the endpoint elsewhere (the restore check
task in its Spark connection, the CLI in the connection `--spark-conn-id` names). Such a
front end runs the work under `spark_endpoint(resolve)`; `resolve` is called on the first
Spark session asked for, so work that needs no Spark looks nothing up."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from batchpoint.settings.settings import Settings

Resolve = Callable[[], Settings]

_RESOLVE: ContextVar[Resolve | None] = ContextVar("batchpoint_spark_endpoint", default=None)


@contextmanager
def spark_endpoint(resolve: Resolve) -> Iterator[None]:
    """Within the block, `spark_settings_here()` is what `resolve` returns (called once)."""
    token = _RESOLVE.set(functools.cache(resolve))
    try:
        yield
    finally:
        _RESOLVE.reset(token)


def spark_settings_here() -> Settings:
    """The settings (Spark endpoint and conf) of Spark work started here: see the module."""
    resolve = _RESOLVE.get()
    return resolve() if resolve is not None else Settings.from_env()
