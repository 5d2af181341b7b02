"""Local stand-ins for production services, used by the tests, the demo and the benches:
SeaweedFS (S3) and a Spark Connect server, each in its own process group that dies with
its parent (devstack.processes)."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "SeaweedError": "seaweed",
    "SeaweedServer": "seaweed",
    "find_weed": "seaweed",
    "SparkConnectError": "spark_connect",
    "SparkConnectServer": "spark_connect",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    # Lazy, so that `python -m batchpoint.devstack.seaweed` does not import the module
    # twice (runpy warns when the package has already imported it).
    if name in _WHERE:
        module = importlib.import_module(f"batchpoint.devstack.{_WHERE[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'batchpoint.devstack' has no attribute {name!r}")
