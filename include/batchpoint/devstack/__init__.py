"""Local stand-ins for production services, used by the tests, the demo and the benches."""

from __future__ import annotations

from typing import Any

__all__ = ["SeaweedError", "SeaweedServer", "find_weed"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `python -m batchpoint.devstack.seaweed` does not import the module
    # twice (runpy warns when the package has already imported it).
    if name in __all__:
        from batchpoint.devstack import seaweed

        return getattr(seaweed, name)
    raise AttributeError(f"module 'batchpoint.devstack' has no attribute {name!r}")
