"""The Spark action of a snapshot: every stream (each state, each consumers' channel, a
sink) of an attempt written in one pass (spark/stream_writer), each subtask's files of
every stream by one Spark task, under the attempt's folder of the checkpoint. One action
reads the operator's new state and output once: no stream waits on another's job, and a
small snapshot pays Spark's fixed latency (scheduling, a Python worker round trip) once.
A long snapshot says it is alive every PROGRESS_EVERY seconds."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING

from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.runtime.streams import CONSUMERS_META, StreamWrite
from batchpoint.runtime.task_attempt import TaskAttempt

if TYPE_CHECKING:
    from batchpoint.spark.state_writer import WriteSpec

#: Seconds between "still writing" lines of a snapshot's writes.
PROGRESS_EVERY = 30.0

#: subtask -> the files written (or referenced) for it
Handles = dict[int, list[FileHandle]]


def write_spec(attempt: TaskAttempt, job: StreamWrite) -> WriteSpec:
    """The keyed write of `job` by this attempt, with the hooks' Spark task calls (none
    in production)."""
    from batchpoint.spark.keyed_io import SubtaskHooks, WriteSpec

    hooks = attempt.env.hooks
    return WriteSpec(
        base_key=attempt.env.layout.operator_data_prefix(attempt.checkpoint_id, attempt.operator),
        stream=job.stream,
        attempt=attempt.attempt,
        key_columns=job.key_columns,
        max_parallelism=job.max_parallelism,
        parallelism=attempt.parallelism,
        layer=job.layer,
        plain=job.plain,
        declared=job.declared,
        what=job.what,
        hooks=SubtaskHooks()
        if hooks is None
        else hooks.spark_tasks(attempt.operator, attempt.checkpoint_id),
    )


def run_writes(attempt: TaskAttempt, writes: list[StreamWrite]) -> Handles:
    """Every write in one Spark action (a lone one as a plain keyed write); the files go
    into the result in the streams' order. The action runs on a thread of its own so the
    snapshot can say it is alive; job tags are per thread, so it carries the attempt's
    tag (run() set it on the calling thread)."""
    started = time.monotonic()
    with ThreadPoolExecutor(1, thread_name_prefix="batchpoint-write") as pool:
        future = pool.submit(_tagged, attempt, attempt.job_tag, writes)
        while not wait([future], timeout=PROGRESS_EVERY).done:
            still = ", ".join(job.stream for job in writes)
            attempt.log(f"snapshot: still writing {still} after {time.monotonic() - started:.0f}s")
        results = future.result()
    elapsed = time.monotonic() - started
    handles: Handles = {i: [] for i in range(attempt.parallelism)}
    for n, (job, stream_files) in enumerate(zip(writes, results, strict=True), start=1):
        files = [f for fs in stream_files.values() for f in fs]
        attempt.log(
            f"snapshot: {job.stream} written ({len(files)} file(s), "
            f"{sum(f.size for f in files)} bytes), {n} of {len(writes)} streams, "
            f"in one pass, {elapsed:.1f}s"
        )
        for subtask, subtask_files in stream_files.items():
            handles[subtask].extend(subtask_files)
    return handles


def write_nothing(attempt: TaskAttempt, writes: list[StreamWrite]) -> Handles:
    """The writes of streams known to hold no rows: every subtask's empty files, written
    here on the driver (no Spark job), in the streams' order."""
    handles: Handles = {i: [] for i in range(attempt.parallelism)}
    for stream_files in _written(attempt, writes, empty=True):
        for subtask, files in stream_files.items():
            handles[subtask].extend(files)
    return handles


def _written(
    attempt: TaskAttempt, writes: list[StreamWrite], *, empty: bool = False
) -> list[Handles]:
    from batchpoint.spark import keyed_io

    specs = [write_spec(attempt, job) for job in writes]
    store, requests = attempt.env.store_ref, attempt.report.requests
    pairs = list(zip(writes, specs, strict=True))
    if empty:
        files = [keyed_io.write_empty(j.df.schema, store, s, requests) for j, s in pairs]
    elif len(writes) <= 1:  # a lone stream needs no common shape
        files = [keyed_io.write_keyed(j.df, store, s, requests) for j, s in pairs]
    else:
        files = keyed_io.write_keyed_streams([(j.df, s) for j, s in pairs], store, requests)
    return [_with_consumers(job, f) for job, f in zip(writes, files, strict=True)]


def _with_consumers(job: StreamWrite, files: Handles) -> Handles:
    if len(job.consumers) < 2:
        return files
    meta = {CONSUMERS_META: list(job.consumers)}
    return {i: [replace(f, meta={**f.meta, **meta}) for f in fs] for i, fs in files.items()}


def _tagged(attempt: TaskAttempt, tag: str | None, writes: list[StreamWrite]) -> list[Handles]:
    from batchpoint.spark.job_count import tagged

    with tagged(attempt.env.session, tag):
        return _written(attempt, writes)
