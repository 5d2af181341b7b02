"""GC keeps honouring the table of a sink the code no longer declares (invariant 14,
issue 26): its binding comes from the topologies of the retained checkpoints that had
the sink, not only from the spec the new code registered, and then from the sink's
manifest, which outlives them. Fake epochs: the sink's
table binding is what the records say; no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.ops.maintenance import gc, sink_tables
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.sink_tables import TableReferences
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.references import PipelineTables
from demo.payments import build_pipeline
from support import fake_epochs


def test_a_removed_table_sink_keeps_its_binding_while_a_checkpoint_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = StoreRef.of((tmp_path / "store").as_uri())
    with_table = PipelineDriver(build_pipeline(balances_table="payments.balances"), root)
    with_table.coordinator.register(with_table.pipeline.spec())
    monkeypatch.setattr(PipelineDriver, "sync_tables", lambda self: [])  # no catalog needed
    first = fake_epochs.epoch(with_table)
    # the next deploy drops the table sink, on purpose
    pipeline = build_pipeline()
    del pipeline.sinks["balances_table"]
    pipeline.drop_sink("balances_table")
    without = PipelineDriver(pipeline, root)
    fake_epochs.epoch(without)
    assert "balances_table" not in {op.name for op in without.coordinator.load_spec().operators}
    tables = sink_tables(without.coordinator, without.coordinator.store)
    assert tables is not None, "GC would forget the table's references"
    assert tables.bindings == {"balances_table": TableBinding("payments.balances")}  # type: ignore[attr-defined]
    # No retained checkpoint has the sink any more, yet its table's snapshots still
    # read its files (a reviewer's finding: GC forgot the table here, pruned its
    # manifest and deleted files an unexpired snapshot read). The binding is kept while
    # the manifest stands, found through the checkpoint it shows.
    for _ in range(without.config.num_retained + 1):
        fake_epochs.epoch(without)
    assert first not in without.coordinator.completed.retained_ids()
    tables = sink_tables(without.coordinator, without.coordinator.store)
    assert tables is not None, "GC would forget the table's references"
    assert tables.bindings == {"balances_table": TableBinding("payments.balances")}  # type: ignore[attr-defined]
    asked: list[dict[str, TableBinding]] = []
    monkeypatch.setattr(PipelineTables, "expire", lambda self: None)
    monkeypatch.setattr(
        PipelineTables, "references", lambda self: asked.append(self.bindings) or TableReferences()
    )
    gc(without.coordinator, without.coordinator.store, history_limit=0)
    assert asked == [{"balances_table": TableBinding("payments.balances")}]
    assert sink_tables(without.coordinator, without.coordinator.store) is not None


def test_gc_reads_the_table_sinks_when_its_pass_runs_not_when_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrency model seed 71118: a GC started before the pipeline registered its
    table sink judged "no table sinks", then the pipeline registered, completed and
    synced a checkpoint, and the GC's pass deleted a file the table's snapshot read
    (invariant 14). The pass now reads the table sinks after the control record that
    fences it."""
    root = StoreRef.of((tmp_path / "store").as_uri())
    driver = PipelineDriver(build_pipeline(balances_table="payments.balances"), root)
    monkeypatch.setattr(PipelineDriver, "sync_tables", lambda self: [])  # no catalog needed
    asked: list[dict[str, TableBinding]] = []
    monkeypatch.setattr(PipelineTables, "expire", lambda self: None)
    monkeypatch.setattr(
        PipelineTables, "references", lambda self: asked.append(self.bindings) or TableReferences()
    )
    # Another process's GC, started while nothing is registered yet.
    collector_side = CheckpointCoordinator(driver.coordinator.store, driver.pipeline.name)
    roll_forward = collector_side.restorer.finish

    def meanwhile_the_pipeline_runs() -> None:  # the pass's first step
        driver.coordinator.register(driver.pipeline.spec())
        fake_epochs.epoch(driver)
        roll_forward()

    monkeypatch.setattr(collector_side.restorer, "finish", meanwhile_the_pipeline_runs)
    gc(collector_side, collector_side.store)
    assert asked == [{"balances_table": TableBinding("payments.balances")}]
