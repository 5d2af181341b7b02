"""File integrity checked by Spark executors: each task downloads and hashes a share of
the checkpoint's files, so checksumming a large state neither funnels every byte through
the driver nor holds any of it in the driver's memory. Only the problems come back."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.protocol.verify import FileProblem, check_handle
from batchpoint.quality.integrity import FileChecker
from batchpoint.spark.remote import for_workers
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_PROBLEMS = pa.schema([pa.field("path", pa.string()), pa.field("problem", pa.string())])


def _check_task(
    store_ref: StoreRef, checksums: bool, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    store = store_ref.open()
    for batch in batches:
        problems = []
        for text in batch.column("handle").to_pylist():
            body = json.loads(text)
            handle = FileHandle.from_json(body, body["path"])
            problem = check_handle(store, handle, checksums)
            if problem is not None:
                problems.append(problem)
        yield pa.RecordBatch.from_pydict(
            {"path": [p.path for p in problems], "problem": [p.problem for p in problems]},
            schema=_PROBLEMS,
        )


def executor_file_checker(
    spark: SparkSession, store_ref: StoreRef, *, checksums: bool = True
) -> FileChecker:
    def check(handles: Sequence[FileHandle]) -> list[FileProblem]:
        from batchpoint.spark.compat import repartition_by_id

        if not handles:
            return []
        rows = [(i, json.dumps(h.to_json())) for i, h in enumerate(handles)]
        # The session's shuffle width stands for the cluster's size: readable over Spark
        # Connect too, where there is no SparkContext to ask.
        width = int(spark.conf.get("spark.sql.shuffle.partitions", "4") or 4)
        tasks = max(1, min(len(rows), 2 * width))
        frame = spark.createDataFrame(rows, "idx int, handle string")
        frame = repartition_by_id(frame, tasks, "idx")
        task = functools.partial(_check_task, for_workers(store_ref), checksums)
        found = frame.mapInArrow(task, "path string, problem string").collect()
        return sorted((FileProblem(r.path, r.problem) for r in found), key=lambda p: p.path)

    return check
