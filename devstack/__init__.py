"""Local stand-ins for production services, used by the tests, the demo and the benches:
SeaweedFS (S3) and a Spark Connect server, each in its own process group that dies with
its parent (devstack.processes)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

#: The checkout's root, which holds this package and the demo's (neither is in the
#: installed batchpoint): on the PYTHONPATH of the Python processes started from here.
PROJECT_ROOT = Path(__file__).resolve().parents[1]

_WHERE = {
    "SeaweedError": "seaweed",
    "SeaweedServer": "seaweed",
    "find_weed": "seaweed",
    "SparkConnectError": "spark_connect",
    "SparkConnectServer": "spark_connect",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    # Lazy, so that `python -m devstack.seaweed` does not import the module
    # twice (runpy warns when the package has already imported it).
    if name in _WHERE:
        module = importlib.import_module(f"devstack.{_WHERE[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'devstack' has no attribute {name!r}")
