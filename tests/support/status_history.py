"""A payments history (fake epochs, no Spark) with a checkpoint in every status the front
ends show: discarded (subsumed, and a disposed savepoint), retained (a checkpoint and a
savepoint), quarantined (a retained one and a discarded one), the head, one aborted at
its trigger (a refused deploy, so no pending record) and one pending."""

from __future__ import annotations

import time

from batchpoint.errors import TriggerRefused
from batchpoint.ops.savepoints import dispose
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.quarantine import QuarantineCause, QuarantineRecord
from batchpoint.runtime.driver import PipelineDriver
from support import fake_epochs

#: Each checkpoint's status once `every_status` has run (with three retained, as default).
EXPECTED = {
    1: "quarantined",  # a discarded checkpoint the gate quarantined: the mark wins
    2: "discarded",  # a savepoint, disposed
    3: "retained",  # a savepoint
    4: "retained",
    5: "quarantined",  # retained, quarantined by a restore
    6: "head",
    7: "aborted",  # at its trigger: the deploy was refused
    8: "pending",
}
QUARANTINE_REASON = "missing file pipelines/payments/checkpoints/chk-5/x"
REFUSAL = "operator 'dedup' changed its key"


def every_status(driver: PipelineDriver) -> None:
    c = driver.coordinator
    savepoint = CheckpointType.SAVEPOINT
    for kind in (None, savepoint, savepoint, None, None, None):
        fake_epochs.epoch(driver, kind or CheckpointType.CHECKPOINT)
    dispose(c, 2)
    now = time.time()
    c.quarantine.mark(QuarantineRecord(1, now, QuarantineCause.QUALITY_GATE, "3 keys differ"))
    c.quarantine.mark(QuarantineRecord(5, now, QuarantineCause.RESTORE, QUARANTINE_REASON))
    fake_epochs.land_a_file(driver)
    try:
        c.trigger(driver.capture_barrier(), check_base=lambda base: [REFUSAL])
    except TriggerRefused:
        pass
    else:
        raise AssertionError("the deploy was to be refused")
    fake_epochs.land_a_file(driver)
    driver.trigger()  # 8, left pending
