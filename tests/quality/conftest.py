"""Fixtures for the quality gate's tests: stores with a few good payments epochs (built
once per session, copied by each test that corrupts one), and gates over them.

The payments helpers (PaymentsRun, make_run, FakeClock) live in tests/runtime/conftest.py;
they are loaded from there by path, so both suites share one definition.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from batchpoint.demo.payments import SOURCE_ROOT, build_pipeline
from batchpoint.demo.payments_data import write_epoch_files
from batchpoint.ops.epoch import LocalEpochRunner
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.suites import PipelineQuality
from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore


def _runtime_helpers() -> ModuleType:
    path = Path(__file__).parents[1] / "runtime" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_batchpoint_runtime_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_helpers = _runtime_helpers()
PaymentsRun = _helpers.PaymentsRun
FakeClock = _helpers.FakeClock
DATA = _helpers.DATA
make_run = _helpers.make_run  # the fixture, re-exported for this directory

GOOD_EPOCHS = 2  # checkpoints 1 and 2, over input epochs 0 and 1
LAYOUT = PipelineLayout("payments")

#: Integrity only: no state is read, so no Spark job runs.
INTEGRITY_ONLY = PipelineQuality(count_rows=False)


@pytest.fixture(scope="session")
def good_epochs(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with GOOD_EPOCHS completed payments checkpoints: tests copy it."""
    root = tmp_path_factory.mktemp("good-epochs") / "store"
    ref = StoreRef.of(root.as_uri())
    clock = FakeClock()
    runner = LocalEpochRunner(build_pipeline(), ref, spark, CheckpointConfig(), clock=clock)
    for epoch in range(GOOD_EPOCHS):
        write_epoch_files(ref.open(), SOURCE_ROOT, epoch, **DATA)
        clock.advance(1)
        result = runner.run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None
    return root


@pytest.fixture
def good_run(make_run: Callable[..., Any], good_epochs: Path) -> Any:
    """A fresh copy of the good store, as a PaymentsRun that can go on with epochs."""
    return make_run(copy_from=good_epochs)


@pytest.fixture
def make_gate(spark: Any) -> Callable[..., QualityGate]:
    def make(run: Any, **options: Any) -> QualityGate:
        options.setdefault("clock", run.clock)
        return QualityGate(run.runner.pipeline, run.store_ref, spark=spark, **options)

    return make


# -- tampering with stored records -------------------------------------------------------


def rewrite_outcome(store: ObjectStore, checkpoint_id: int, change: Callable[[dict], None]) -> None:
    key = LAYOUT.outcome(checkpoint_id)
    document = json.loads(store.get(key).data)
    change(document)
    store.put(key, json.dumps(document).encode())


def state_handles(store: ObjectStore, checkpoint_id: int, operator: str, state: str) -> list[dict]:
    document = json.loads(store.get(LAYOUT.outcome(checkpoint_id)).data)
    return [
        h
        for ack in document["acks"]
        if ack["task"].startswith(f"{operator}#")
        for h in ack["handles"]
        if h["name"] == f"state-{state}"
    ]
