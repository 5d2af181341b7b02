"""Writes tests/data/payments-records-v1.tar.gz: a real payments store written by
batchpoint records of version 1 (the last release before the version-2 checkpoint and
ack records): three completed checkpoints over input epochs 0-2 (an incremental chain:
checkpoints 2 and 3 share their base's files), checkpoint 4 a savepoint over epoch 3,
exported to savepoints/payments/sp-4 under the root, and the source files of epochs
0-3. Run once, by batchpoint 2d0c60a (records of version 1); kept for provenance."""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.savepoints import SavepointLocation, export_savepoint
from batchpoint.spark.session import spark_session
from support.payments import PaymentsRun


def main(out: Path) -> None:
    spark = spark_session("records-v1-fixture", "local[2,2]")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        run = PaymentsRun.on(spark, root)
        for epoch in range(3):
            result = run.epoch(epoch)
            assert result.outcome is not None and result.outcome.completed is not None
        run.add_input(3)
        run.clock.advance(1)
        result = run.runner.run_epoch(CheckpointType.SAVEPOINT)
        assert result.outcome is not None and result.outcome.completed is not None
        run.assert_matches_reference()
        c = run.runner.driver.coordinator
        target = SavepointLocation(run.store, "savepoints/payments/sp-4")
        export_savepoint(c, result.checkpoint_id, target, description="records v1 fixture")
        with tarfile.open(out, "w:gz") as archive:
            archive.add(root, arcname=".")
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
