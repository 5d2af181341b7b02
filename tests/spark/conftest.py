"""The store that state tests write to (the `spark` session fixture is in tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore


def _state_backends() -> list[object]:
    # BATCHPOINT_STATE_STORES=local,s3 runs every state test on SeaweedFS as well
    # (`s3_store` comes from tests/conftest.py).
    names = os.environ.get("BATCHPOINT_STATE_STORES", "local").split(",")
    return [pytest.param(n, marks=pytest.mark.s3) if n == "s3" else n for n in names if n]


@pytest.fixture(params=_state_backends())
def state_store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalObjectStore(tmp_path / "store")
    return request.getfixturevalue(f"{request.param}_store")
