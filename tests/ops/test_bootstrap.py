"""State bootstrap (issue 26): a savepoint written from DataFrames, its state files keyed
exactly as the runtime keys them, imports and restores like any other; its state reads
back equal to the input, and the pipeline continues from it exactly once."""

from __future__ import annotations

import pandas as pd
import pytest

from batchpoint.errors import CheckpointError, PipelineSpecError
from batchpoint.ops.dataframes import read_state, write_savepoint
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.savepoints import SavepointLocation, check_savepoint, read_savepoint
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.settings import Settings
from batchpoint.spark import keyed_io
from batchpoint.state.keygroups import key_group_range_for_subtask
from batchpoint.storage import StoreRef
from support.deploys import TOTALS_V1, Deploys, reference

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_bootstrapped_savepoint_restores_and_continues_exactly_once(
    spark, table_store: StoreRef
) -> None:
    run = Deploys(spark, table_store)
    pipeline = run.deploy(parallelism=2)
    # The state another system computed over epochs 0..2 (their files are not here).
    before = reference(range(3)).astype({"n": "int32"})
    totals = spark.createDataFrame(before, keyed_io.spark_schema(TOTALS_V1))
    store = table_store.open()
    folder = SavepointLocation(store, "savepoints/boot")
    metadata = write_savepoint(
        spark, pipeline, {"aggregate": {"totals": totals.select("total", "n", "user")}},
        folder, parallelism=3,
    )  # fmt: skip

    # Self-contained, as an export writes it: relative paths, `_metadata` last, every
    # file there; each subtask's files tile its key-group range as the runtime's do.
    assert read_savepoint(folder).encode() == metadata.encode()
    assert check_savepoint(folder, checksums=True) == []
    assert sorted(metadata.pending.expected_tasks) == [TaskId("aggregate", i) for i in range(3)]
    for ack in metadata.acks:
        subtask = ack.task.subtask
        expected = key_group_range_for_subtask(16, 3, subtask)
        assert ack.handles and all(h.path.startswith("data/aggregate/") for h in ack.handles)
        ranges = sorted(tuple(h.key_group_range) for h in ack.handles)
        assert ranges[0][0] == expected.start and ranges[-1][1] == expected.end

    assert run.runner is not None
    driver = run.runner.driver
    imported = driver.coordinator.savepoints.import_folder(folder)
    restore_checkpoint(driver, imported.checkpoint_id)
    got = run.state(imported.checkpoint_id)
    pd.testing.assert_frame_equal(got, before[list(got.columns)], check_dtype=False)

    run.epoch(3)
    run.epoch(4)
    if table_store.uri.startswith("file:"):  # read_state reads the BATCHPOINT_* settings
        settings = Settings.from_env({}, root=table_store.uri)
        read = read_state(spark, "clicks", "aggregate", "totals", imported.checkpoint_id,
                          settings=settings).toPandas()  # fmt: skip
        read = read.sort_values("user", ignore_index=True)
        pd.testing.assert_frame_equal(read, before[list(read.columns)], check_dtype=False)
    pd.testing.assert_frame_equal(run.state()[["user", "n", "total"]], reference(range(5)),
                                  check_dtype=False)  # fmt: skip

    # Bad input is refused by name, before anything is written.
    with pytest.raises(CheckpointError, match="already holds a savepoint"):
        write_savepoint(spark, pipeline, {"aggregate": {"totals": totals}}, folder)
    other = SavepointLocation(store, "savepoints/other")
    with pytest.raises(PipelineSpecError, match="no stateful operator 'aggregat'"):
        write_savepoint(spark, pipeline, {"aggregat": {"totals": totals}}, other)
    with pytest.raises(PipelineSpecError, match="no state 'total'"):
        write_savepoint(spark, pipeline, {"aggregate": {"total": totals}}, other)
    with pytest.raises(PipelineSpecError, match=r"column 'n' \(int32\) is missing"):
        write_savepoint(spark, pipeline, {"aggregate": {"totals": totals.drop("n")}}, other)
    assert not store.exists(other.metadata_key)
