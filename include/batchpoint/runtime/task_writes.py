"""The Spark jobs of a snapshot: each stream (a state, a consumer's channel, a sink) is
one job writing every subtask's files from executors, under the attempt's folder of the
checkpoint. The jobs are independent, so they run at once: on a warm Spark most of a
small job's time is fixed latency (scheduling, a Python worker round trip), which then
overlaps. A long snapshot says it is alive every PROGRESS_EVERY seconds."""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING, Any

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
        base_key=attempt.env.coordinator.layout.operator_data_prefix(
            attempt.checkpoint_id, attempt.operator
        ),
        stream=job.stream,
        attempt=attempt.attempt,
        key_columns=job.key_columns,
        max_parallelism=job.max_parallelism,
        parallelism=attempt.parallelism,
        layer=job.layer,
        plain=job.plain,
        hooks=SubtaskHooks()
        if hooks is None
        else hooks.spark_tasks(attempt.operator, attempt.checkpoint_id),
    )


def run_writes(attempt: TaskAttempt, writes: list[StreamWrite]) -> Handles:
    """Every write, at once when there are several; the files go into the result in the
    streams' order, whichever job finished first. Job tags are per thread: each thread
    carries the attempt's tag (run() set it on the calling thread)."""
    tag = attempt.job_tag
    started = time.monotonic()
    if len(writes) <= 1:
        results = [_written(attempt, job) for job in writes]
    else:
        with ThreadPoolExecutor(len(writes), thread_name_prefix="batchpoint-write") as pool:
            futures = {pool.submit(_tagged, attempt, tag, job): job.stream for job in writes}
            _log_progress(attempt, futures, started)
        results = [future.result() for future in futures]  # the first failure, in order
    handles: Handles = {i: [] for i in range(attempt.parallelism)}
    for stream_files in results:
        for subtask, files in stream_files.items():
            handles[subtask].extend(files)
    return handles


def write_nothing(attempt: TaskAttempt, writes: list[StreamWrite]) -> Handles:
    """The writes of streams known to hold no rows: every subtask's empty files, written
    here on the driver (no Spark job), in the streams' order."""
    handles: Handles = {i: [] for i in range(attempt.parallelism)}
    for job in writes:
        for subtask, files in _written(attempt, job, empty=True).items():
            handles[subtask].extend(files)
    return handles


def _written(attempt: TaskAttempt, job: StreamWrite, *, empty: bool = False) -> Handles:
    from batchpoint.spark import keyed_io

    spec = write_spec(attempt, job)
    if empty:
        files = keyed_io.write_empty(job.df.schema, attempt.env.store_ref, spec)
    else:
        files = keyed_io.write_keyed(job.df, attempt.env.store_ref, spec)
    if len(job.consumers) < 2:
        return files
    meta = {CONSUMERS_META: list(job.consumers)}
    return {i: [replace(f, meta={**f.meta, **meta}) for f in fs] for i, fs in files.items()}


def _tagged(attempt: TaskAttempt, tag: str | None, job: StreamWrite) -> Handles:
    from batchpoint.spark.job_count import tagged

    with tagged(attempt.env.session, tag):
        return _written(attempt, job)


def _log_progress(attempt: TaskAttempt, futures: dict[Future[Any], str], started: float) -> None:
    """A line per stream written, and one every PROGRESS_EVERY seconds naming the
    streams still being written."""
    waiting = set(futures)
    total = len(futures)
    while waiting:
        done, waiting = wait(waiting, timeout=PROGRESS_EVERY, return_when=FIRST_COMPLETED)
        elapsed = time.monotonic() - started
        for future in done:
            if future.exception() is None:
                files = [f for fs in future.result().values() for f in fs]
                attempt.log(
                    f"snapshot: {futures[future]} written ({len(files)} file(s), "
                    f"{sum(f.size for f in files)} bytes), {total - len(waiting)} of "
                    f"{total} streams, {elapsed:.1f}s"
                )
        if not done:
            still = ", ".join(sorted(futures[f] for f in waiting))
            attempt.log(f"snapshot: still writing {still} after {elapsed:.0f}s")
