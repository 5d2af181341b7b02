"""The chained pipelines of support/chained.py (`ledger` -> `reports` -> `trends`) with
fake epochs (support/fake_epochs.py: tasks ack small stand-in files, no Spark): real
records, barriers and published sink manifests in a fraction of a second, for what
reads the records only (lineage, the CLI, the UI)."""

from __future__ import annotations

from dataclasses import dataclass

from batchpoint.ops.epoch import finalize
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.storage import StoreRef
from support.chained import SOURCE_ROOT, ledger_pipeline, reports_pipeline, trends_pipeline
from support.fake_epochs import ack_all


@dataclass
class FakeChain:
    ledger: PipelineDriver
    reports: PipelineDriver
    trends: PipelineDriver

    @classmethod
    def on(cls, root: str | StoreRef) -> FakeChain:
        store = root if isinstance(root, StoreRef) else StoreRef.of(root)
        config = CheckpointConfig(skip_idle=False, num_retained=20)
        drivers = [
            PipelineDriver(p(), store, config)
            for p in (ledger_pipeline, reports_pipeline, trends_pipeline)
        ]
        for driver in drivers:
            driver.coordinator.register(driver.pipeline.spec())
        return cls(*drivers)

    def epoch(self, driver: PipelineDriver) -> int:
        return fake_epoch(driver)

    def restore(self, driver: PipelineDriver, checkpoint_id: int) -> None:
        run = restore_checkpoint(driver, checkpoint_id)
        assert run.checkpoint_id == checkpoint_id, run


def fake_epoch(driver: PipelineDriver) -> int:
    """One completed, published checkpoint of `driver`'s pipeline; its id. The ledger
    gets a new (empty) source file first, so a deployment that skips idle epochs runs
    it; a pipeline source's barrier is the upstream's published checkpoint, as ever."""
    if driver.pipeline.name == "ledger":
        count = sum(1 for _ in driver.store.list(f"{SOURCE_ROOT}/p0/"))
        driver.store.put(f"{SOURCE_ROOT}/p0/fake-{count:06d}.jsonl", b"")
    pending = driver.trigger()
    ack_all(driver, pending)
    outcome = finalize(driver, pending.checkpoint_id).outcome
    assert outcome is not None and outcome.completed is not None, outcome
    return pending.checkpoint_id
