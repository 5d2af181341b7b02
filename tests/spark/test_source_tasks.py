"""A source epoch's files are read by Spark tasks packed as Spark packs its own scans
(sources/split_packing): a few small files take one wave of tasks on a session's cores,
and the rows come back as every file read alone, in the files' order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from batchpoint.runtime.nodes import SourceDef
from batchpoint.sources import SourceSplit
from batchpoint.sources.split_packing import pack_splits
from batchpoint.spark.keyed_io import read_source
from batchpoint.spark.task_rows import task_slots
from batchpoint.storage import StoreRef
from batchpoint.storage.local import LocalObjectStore

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([pa.field("k", pa.string(), nullable=False), pa.field("n", pa.int64())])


def _epoch(root: Path, files: list[int]) -> list[SourceSplit]:
    """Files of `rows` lines each, in name order; their splits as a barrier lists them."""
    store = LocalObjectStore(root)
    splits = []
    for i, rows in enumerate(files):
        data = "".join(json.dumps({"k": f"f{i}-{r}", "n": r}) + "\n" for r in range(rows))
        key = f"in/p0/{i:05d}.jsonl"
        store.put(key, data.encode())
        splits.append(SourceSplit("p0", i, key, len(data.encode())))
    return splits


@pytest.mark.parametrize("files", [[50, 40, 30, 20], [7], [5] * 9])
def test_files_are_read_in_packed_tasks_in_their_order(
    spark: Any, tmp_path: Path, files: list[int]
) -> None:
    splits = _epoch(tmp_path / "store", files)
    source = SourceDef("events", "in", "jsonl", SCHEMA)
    frame = read_source(spark, StoreRef.of((tmp_path / "store").as_uri()), source, splits)

    slots = task_slots(spark)
    assert slots == spark.sparkContext.defaultParallelism
    assert frame.rdd.getNumPartitions() == len(pack_splits(splits, slots)) <= max(slots, 1)
    expected = [(f"f{i}-{r}", r) for i, rows in enumerate(files) for r in range(rows)]
    assert [(row.k, row.n) for row in frame.collect()] == expected
