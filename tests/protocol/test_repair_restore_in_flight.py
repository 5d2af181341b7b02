"""Model seed 8038 (Delta): a restore to an imported savepoint moved the head (its
compare-and-swap), then the control record was cut short before the restore's
roll-forward wrote anything (no aborted trigger, no rewound sink, no restore record).
`repair` must not rebuild the head on the checkpoint the restore left (invariant 14:
it derives only what the records prove): it proves the import from another record, or
refuses naming what to do.
"""

from __future__ import annotations

import pytest

from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.repair import RepairStatus
from batchpoint.protocol.savepoints import SavepointLocation
from batchpoint.storage.base import ObjectStore
from support.protocol_steps import complete, coordinator


@pytest.mark.xfail(
    strict=True,
    reason="open: only the damaged control record knows of a restore whose roll-forward "
    "wrote nothing; repair rebuilds the head on the old timeline (seed 8038)",
)
def test_repair_never_loses_a_restore_to_an_import_its_roll_forward_did_not_record(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = coordinator(store, num_retained=5)
    complete(c)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    old_head = complete(c)
    c.savepoints.export(savepoint, SavepointLocation(store, "savepoints/old"))
    imported = c.savepoints.import_folder(SavepointLocation(store, "savepoints/old"))
    examined = c.restorer.choose(imported.checkpoint_id).target
    with monkeypatch.context() as m:
        m.setattr(c.restorer, "finish", lambda: None)  # the roll-forward never starts
        moved = c.restorer.restore(examined)
    assert (moved.checkpoint_id, moved.restore_generation) == (imported.checkpoint_id, 1)
    data = store.get(c.layout.head).data
    store.put(c.layout.head, data[: len(data) // 2])  # the control record cut short

    report = c.repair()
    if report.status is RepairStatus.REFUSED:
        assert f"checkpoint {imported.checkpoint_id}" in report.reason
        assert "batchpoint restore" in report.reason
    else:
        assert report.status is RepairStatus.WRITTEN
        assert c.head.get().checkpoint_id == imported.checkpoint_id, (old_head, report.findings)
