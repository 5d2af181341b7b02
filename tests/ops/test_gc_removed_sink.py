"""GC keeps honouring the table of a sink the code no longer declares (invariant 14,
issue 26): its binding comes from the topologies of the retained checkpoints that had
the sink, not only from the spec the new code registered. Fake epochs: the sink's
table binding is what the records say; no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.ops.maintenance import sink_tables
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
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
    # once no retained checkpoint has the sink, its binding goes with it
    for _ in range(without.config.num_retained + 1):
        fake_epochs.epoch(without)
    assert first not in without.coordinator.completed.retained_ids()
    assert sink_tables(without.coordinator, without.coordinator.store) is None
