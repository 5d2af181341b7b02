"""Runs one operator (all its subtasks) of one checkpoint as a PySpark micro-job.

    align     wait until every upstream task of this epoch acknowledged, and the base
              checkpoint completed (its state is what this epoch starts from)
    restore   read the base checkpoint's state of this operator, rescaled by key group
    process   call the operator function on this epoch's input
    snapshot  write new state, and output for each consumer, per subtask, from executors
    ack       one ack per subtask; a later attempt learns DUPLICATE and cleans up

Any error before the acks declines the subtasks that have not acknowledged, so the
checkpoint aborts at once and nothing of it is ever published.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

from batchpoint.errors import BatchpointError, CheckpointError
from batchpoint.protocol.checkpoint import (
    SHARED_FROM_META,
    CheckpointStatus,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
    TaskMetrics,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import split_task_name
from batchpoint.runtime.adopted_channels import adopt_channel
from batchpoint.runtime.api import OperatorContext, OperatorDef, Pipeline, SinkDef, SourceDef
from batchpoint.runtime.faults import maybe_fail, spark_task_fault, spark_task_pause
from batchpoint.runtime.incremental import (
    SnapshotPlan,
    base_state_files,
    mark_churn,
    plan_state_snapshot,
    state_write,
)
from batchpoint.runtime.streams import (
    CONSUMERS_META,
    SINK_STREAM,
    StreamWrite,
    channel_stream,
    reads_channel,
    state_stream,
)
from batchpoint.runtime.task_metrics import channel_rows_by_subtask
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Log = Callable[[str], None]


class OperatorFailed(BatchpointError):
    """The operator could not process the epoch; its subtasks declined."""


class CheckpointAlreadySettled(CheckpointError):
    pass


class AttemptInterrupted(BatchpointError):
    """The attempt was interrupted from outside (Airflow's kill, a timeout): it declines
    nothing, so that a retry may still complete the checkpoint."""


#: Seconds between "still writing" lines of a snapshot's writes.
PROGRESS_EVERY = 30.0


@dataclass
class OperatorRunReport:
    checkpoint_id: int
    operator: str
    attempt: str
    results: dict[str, TaskAcknowledgeResult] = field(default_factory=dict)
    skipped: str = ""  # why nothing ran, when nothing did
    seconds: float = 0.0
    sync_ms: float = 0.0
    async_ms: float = 0.0
    records_in: dict[int, int] = field(default_factory=dict)  # subtask -> channel rows

    def timed_sync(self, aligned: float) -> float:
        """The sync part ends (the writes start) now; returns now."""
        now = time.monotonic()
        self.sync_ms = (now - aligned) * 1000.0
        return now

    def timed_async(self, writing: float) -> None:
        self.async_ms = (time.monotonic() - writing) * 1000.0


class OperatorRunner:
    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        spark: SparkSession,
        *,
        config: CheckpointConfig | None = None,
        attempt: str | None = None,
        align_timeout: float = 600.0,
        poll_interval: float = 0.5,
        log: Log = print,
    ) -> None:
        self.pipeline = pipeline
        self.store = store_ref.open()
        self.spark = spark
        # Over Connect (no JVM here) pyspark's Connect classes live in their own package.
        self.remote = type(spark).__module__.startswith("pyspark.sql.connect")
        if self.remote:
            from batchpoint.spark.remote import prepare_remote

            # Over Connect the tasks run in the server's environment: ship explicit
            # settings and credentials, and check its workers' version once.
            store_ref = prepare_remote(spark, store_ref)
        self.store_ref = store_ref
        self.coordinator = CheckpointCoordinator(self.store, pipeline.name, config)
        self.attempt = attempt or f"a{uuid.uuid4().hex[:12]}"
        self.align_timeout = align_timeout
        self.poll_interval = poll_interval
        self.log = log
        self._interrupted = threading.Event()

    # -- entry point ----------------------------------------------------------------------

    def tag(self, checkpoint_id: int, name: str) -> str:
        """The Spark job tag of this attempt of operator `name` in `checkpoint_id`: what
        interrupt_attempt (an Airflow on_kill, a SIGTERM) interrupts."""
        from batchpoint.spark.remote import attempt_tag

        return attempt_tag(self.pipeline.name, checkpoint_id, name, self.attempt)

    def interrupt(self, checkpoint_id: int, name: str) -> list[str]:
        """Stop this attempt's Spark work on the server, from another thread or a signal
        handler: the attempt then ends with AttemptInterrupted and declines nothing."""
        self._interrupted.set()
        stop = getattr(self.spark, "interruptTag", None)
        return list(stop(self.tag(checkpoint_id, name))) if stop is not None else []

    def run(self, checkpoint_id: int, name: str) -> OperatorRunReport:
        tag = self.tag(checkpoint_id, name)
        add = getattr(self.spark, "addTag", None)
        if add is None:
            return self._run(checkpoint_id, name)
        # Every Spark job of the attempt carries the tag. Acks are written here, after
        # the jobs returned, so a server-side job whose client died can never ack.
        add(tag)
        try:
            return self._run(checkpoint_id, name)
        finally:
            self.spark.removeTag(tag)

    def _run(self, checkpoint_id: int, name: str) -> OperatorRunReport:
        started = time.monotonic()
        node = self.pipeline.node(name)
        if isinstance(node, SourceDef):
            raise CheckpointError(f"'{name}' is a source: sources run no task")
        report = OperatorRunReport(checkpoint_id, name, self.attempt)
        pending = self._pending_or_skip(checkpoint_id, report)
        if pending is None:
            return report
        tasks = [t for t in pending.expected_tasks if split_task_name(t)[0] == name]
        if not tasks:
            raise CheckpointError(f"checkpoint {checkpoint_id} expects no task of '{name}'")
        acked = self.coordinator.acks(checkpoint_id)
        if all(t in acked for t in tasks):
            report.skipped = "every subtask acknowledged already (a retry after the ack)"
            report.results = {t: TaskAcknowledgeResult.DUPLICATE for t in tasks}
            return report
        try:
            handles = self._process_and_snapshot(pending, node, len(tasks), report)
        except Exception as exc:
            if self._interrupted.is_set():
                raise AttemptInterrupted(
                    f"{name} was interrupted in checkpoint {checkpoint_id} (attempt {self.attempt})"
                ) from exc
            self._fail(pending, tasks, name, exc)
        maybe_fail(name, "after-snapshot", checkpoint_id)
        if self._interrupted.is_set():  # the kill came between the last job and the ack
            raise AttemptInterrupted(f"{name} was interrupted in checkpoint {checkpoint_id}")
        report.results = self._acknowledge(pending, tasks, handles, report)
        maybe_fail(name, "after-ack", checkpoint_id)
        report.seconds = time.monotonic() - started
        return report

    def _fail(
        self, pending: PendingCheckpoint, tasks: list[str], name: str, exc: Exception
    ) -> NoReturn:
        """Decline for an operator that raised; a Connect server that went away is not
        the operator's fault and declines nothing."""
        checkpoint_id = pending.checkpoint_id
        if isinstance(exc, BatchpointError):
            self._decline(pending, tasks, str(exc))
            raise OperatorFailed(f"{name} failed in checkpoint {checkpoint_id}: {exc}") from exc
        reason = f"{type(exc).__name__}: {exc}"
        if self.remote:
            from batchpoint.spark.remote import error_line
            from batchpoint.spark.session import remote_of, server_went_away, unreachable_error

            if server_went_away(remote_of(self.spark), exc):
                # Not the operator's fault: no decline, so that a retry once the server
                # is back can still complete the checkpoint.
                raise unreachable_error(remote_of(self.spark), exc) from None
            reason = error_line(exc)
        self._decline(pending, tasks, reason)
        raise OperatorFailed(f"{name} failed in checkpoint {checkpoint_id}: {reason}") from exc

    def _pending_or_skip(
        self, checkpoint_id: int, report: OperatorRunReport
    ) -> PendingCheckpoint | None:
        pending = self.coordinator.get_pending(checkpoint_id)
        if pending is not None:
            return pending
        outcome = self.coordinator.get_outcome(checkpoint_id)
        if outcome is None:
            raise CheckpointError(
                f"pipeline '{self.pipeline.name}' has no checkpoint {checkpoint_id}"
            )
        if outcome.status is CheckpointStatus.COMPLETED:
            report.skipped = "the checkpoint completed already"
            return None
        raise CheckpointAlreadySettled(
            f"checkpoint {checkpoint_id} was aborted ({outcome.message}); nothing to run"
        )

    # -- align ----------------------------------------------------------------------------

    def _align(
        self, pending: PendingCheckpoint, inputs: tuple[str, ...]
    ) -> CompletedCheckpoint | None:
        """Block until upstream tasks acked and the base completed; returns the base."""
        cid = pending.checkpoint_id
        upstream_ops = {i for i in inputs if i in self.pipeline.operators}
        deadline = time.monotonic() + self.align_timeout
        announced = False
        while True:
            progress = self.coordinator.progress(cid)
            if progress.status is not CheckpointStatus.PENDING:
                reason = progress.outcome.message if progress.outcome else "gone"
                raise CheckpointError(f"checkpoint {cid} was settled while aligning: {reason}")
            if progress.declines:
                d = progress.declines[0]
                raise CheckpointError(f"checkpoint {cid} was declined by {d.task}: {d.reason}")
            waiting = [t for t in progress.missing if split_task_name(t)[0] in upstream_ops]
            base = self._base_state(pending)
            if not waiting and base is not False:
                return base  # type: ignore[return-value]
            if time.monotonic() > deadline:
                what = waiting or [f"base checkpoint {pending.base_checkpoint_id}"]
                raise CheckpointError(f"alignment timed out waiting for {', '.join(what)}")
            if not announced:
                self.log(f"aligning: waiting for {', '.join(waiting) or 'the base checkpoint'}")
                announced = True
            if self._interrupted.wait(self.poll_interval):
                raise AttemptInterrupted(f"checkpoint {cid}: interrupted while aligning")

    def _base_state(self, pending: PendingCheckpoint) -> CompletedCheckpoint | bool | None:
        """The base checkpoint's metadata; None with no base; False while it is pending."""
        if pending.base_checkpoint_id is None:
            return None
        outcome = self.coordinator.get_outcome(pending.base_checkpoint_id)
        if outcome is None:
            return False
        if outcome.completed is None:
            raise CheckpointError(
                f"base checkpoint {pending.base_checkpoint_id} was aborted: {outcome.message}"
            )
        return outcome.completed

    # -- process and snapshot -------------------------------------------------------------

    def _process_and_snapshot(
        self,
        pending: PendingCheckpoint,
        node: OperatorDef | SinkDef,
        parallelism: int,
        report: OperatorRunReport,
    ) -> dict[int, list[FileHandle]]:
        from pyspark import StorageLevel

        from batchpoint.spark import keyed_io

        cid = pending.checkpoint_id
        base = self._align(pending, node.inputs)
        aligned = time.monotonic()
        channels = {name: self._channel_files(pending, name, node.name) for name in node.inputs}
        if (
            isinstance(node, SinkDef)
            and node.fn is None
            and len(node.inputs) == 1
            and node.table is None  # a table's data files hold the user's columns only
        ):
            files = channels[node.inputs[0]]
            adopted = adopt_channel(files, SINK_STREAM, node.max_parallelism, parallelism)
            if adopted is not None:
                report.timed_async(report.timed_sync(aligned))
                self.log(
                    f"snapshot: sink staged by reference: {len(files)} file(s) of "
                    f"{node.inputs[0]}'s channel, already keyed for it (no Spark job)"
                )
                return adopted
        inputs = {
            name: self._input_df(pending, name, node.name, channels[name]) for name in node.inputs
        }
        report.records_in = channel_rows_by_subtask(
            [h for files in channels.values() for h in files], node.max_parallelism, parallelism
        )
        handles: dict[int, list[FileHandle]] = {i: [] for i in range(parallelism)}
        # The attempt's job tag (run() set it on this thread), for the writes' threads.
        tag = self.tag(cid, node.name) if hasattr(self.spark, "addTag") else None

        base_key = self.coordinator.layout.operator_data_prefix(cid, node.name)
        fault = spark_task_fault(node.name, cid)
        pause = spark_task_pause(node.name, cid)

        def write(job: StreamWrite) -> dict[int, list[FileHandle]]:
            spec = keyed_io.WriteSpec(
                base_key=base_key,
                stream=job.stream,
                attempt=self.attempt,
                key_columns=job.key_columns,
                max_parallelism=job.max_parallelism,
                parallelism=parallelism,
                layer=job.layer,
                plain=job.plain,
                hooks=keyed_io.SubtaskHooks(before=pause, after=fault),
            )
            return keyed_io.write_keyed(job.df, self.store_ref, spec)

        if isinstance(node, SinkDef):
            df = inputs[node.inputs[0]] if len(inputs) == 1 else _union(list(inputs.values()))
            if node.fn is not None:
                ctx = OperatorContext(self.spark, cid, node.name, inputs, {}, pending.properties)
                df = node.fn(ctx) or df
            maybe_fail(node.name, "before-snapshot", cid)
            sink = StreamWrite(
                df, SINK_STREAM, node.key_columns, node.max_parallelism,
                plain=node.table is not None,
            )  # fmt: skip
            writing = report.timed_sync(aligned)
            self._run_writes([sink], write, handles, tag)
            report.timed_async(writing)
            return handles

        base_files = {state: base_state_files(base, node.name, state) for state in node.states}
        states = {
            state: self._restored_state(base, node, state, schema, base_files[state])
            for state, schema in node.states.items()
        }
        ctx = OperatorContext(self.spark, cid, node.name, inputs, states, pending.properties)
        output = node.fn(ctx)
        maybe_fail(node.name, "before-snapshot", cid)
        plans = {
            state: plan_state_snapshot(
                pending, base_files[state], ctx.new_state(state), node, parallelism,
                self.coordinator.config.changelog_chain,
            )
            for state in node.states
        }  # fmt: skip
        # New state and output usually share most of their plan, and each is written
        # once per consumer: computing them once (spilling to disk if large) saves work.
        # A changelog compares the new state with the base's, read once for both.
        cached = [ctx.new_state(s).persist(StorageLevel.MEMORY_AND_DISK) for s in node.states]
        cached += [states[s].persist(StorageLevel.MEMORY_AND_DISK) for s, p in plans.items()
                   if not p.full]  # fmt: skip
        if output is not None:
            output = output.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(output)
        try:
            writes = self._operator_writes(node, ctx, output, plans)
            writing = report.timed_sync(aligned)
            self._run_writes(writes, write, handles, tag)
            report.timed_async(writing)
        finally:
            for frame in cached:
                frame.unpersist()
        for state, plan in plans.items():
            self.log(f"snapshot: state '{state}': {plan.why}")
            mark_churn(handles, state_stream(state), plan)
            for subtask, shared in plan.shared_by_subtask().items():
                handles[subtask].extend(shared)
        return handles

    def _run_writes(
        self,
        writes: list[StreamWrite],
        write: Callable[[StreamWrite], dict[int, list[FileHandle]]],
        handles: dict[int, list[FileHandle]],
        tag: str | None,
    ) -> None:
        """Each stream (a state, a consumer's channel, a sink) is one Spark job. They are
        independent, so they run at once: on a warm Spark most of a small job's time is
        fixed latency (scheduling, a Python worker round trip), which then overlaps. Job
        tags are per thread: each thread carries the attempt's `tag`. The files go into
        `handles` in the streams' order, whichever job finished first."""

        def written(job: StreamWrite) -> dict[int, list[FileHandle]]:
            files = write(job)
            if len(job.consumers) < 2:
                return files
            meta = {CONSUMERS_META: list(job.consumers)}
            return {i: [replace(f, meta={**f.meta, **meta}) for f in fs] for i, fs in files.items()}

        def tagged(job: StreamWrite) -> dict[int, list[FileHandle]]:
            if tag is None:
                return written(job)
            self.spark.addTag(tag)
            try:
                return written(job)
            finally:
                self.spark.removeTag(tag)

        started = time.monotonic()
        if len(writes) <= 1:
            results = [written(job) for job in writes]
        else:
            with ThreadPoolExecutor(len(writes), thread_name_prefix="batchpoint-write") as pool:
                futures = {pool.submit(tagged, job): job.stream for job in writes}
                self._log_write_progress(futures, started)
            results = [future.result() for future in futures]  # the first failure, in order
        for stream_files in results:
            for subtask, files in stream_files.items():
                handles[subtask].extend(files)

    def _log_write_progress(self, futures: dict[Future[Any], str], started: float) -> None:
        """A line per stream written, and one every PROGRESS_EVERY seconds naming the
        streams still being written: a long snapshot shows it is alive."""
        waiting = set(futures)
        total = len(futures)
        while waiting:
            done, waiting = wait(waiting, timeout=PROGRESS_EVERY, return_when=FIRST_COMPLETED)
            elapsed = time.monotonic() - started
            for future in done:
                if future.exception() is None:
                    files = [f for fs in future.result().values() for f in fs]
                    self.log(
                        f"snapshot: {futures[future]} written ({len(files)} file(s), "
                        f"{sum(f.size for f in files)} bytes), {total - len(waiting)} of "
                        f"{total} streams, {elapsed:.1f}s"
                    )
            if not done:
                still = ", ".join(sorted(futures[f] for f in waiting))
                self.log(f"snapshot: still writing {still} after {elapsed:.0f}s")

    def _operator_writes(
        self,
        node: OperatorDef,
        ctx: OperatorContext,
        output: DataFrame | None,
        plans: dict[str, SnapshotPlan],
    ) -> list[StreamWrite]:
        """What an operator writes: each state (in full or its changelog), then its
        output once per consumer."""
        writes = [
            state_write(ctx, s, state_stream(s), node.key_columns, node.max_parallelism, plans[s])
            for s in node.states
        ]
        consumers = [
            c
            for c in (*self.pipeline.operators.values(), *self.pipeline.sinks.values())
            if node.name in c.inputs
        ]
        if not consumers:
            return writes
        if output is None:
            raise CheckpointError(
                f"operator '{node.name}' returned no output but feeds "
                f"{', '.join(c.name for c in consumers)}"
            )
        # Consumers that key the output alike (key columns and max parallelism; the files
        # are split by this operator's subtasks) read one channel, written once.
        alike: dict[tuple[tuple[str, ...], int], list[str]] = {}
        for c in consumers:
            alike.setdefault((c.key_columns, c.max_parallelism), []).append(c.name)
        writes += [
            StreamWrite(output, channel_stream(names[0]), key, max_par, tuple(names))
            for (key, max_par), names in alike.items()
        ]
        return writes

    def _input_df(
        self, pending: PendingCheckpoint, name: str, consumer: str, channel: list[FileHandle]
    ) -> DataFrame:
        """Input `name` of `consumer`: the source's new files, or `channel`, the files
        operator `name` wrote for it (from _channel_files)."""
        from batchpoint.spark import keyed_io

        node = self.pipeline.node(name)
        if isinstance(node, SourceDef):
            source = node.files(self.store, with_schema=True)
            splits = source.files_between(
                pending.base_barrier.get(name), pending.barrier.get(name, {})
            )
            self.log(f"{consumer}: reading {len(splits)} new file(s) of source '{name}'")
            return keyed_io.read_source(self.spark, node.store_ref(self.store_ref), node, splits)
        return keyed_io.read_keyed(self.spark, self.store_ref, channel)

    def _channel_files(
        self, pending: PendingCheckpoint, name: str, consumer: str
    ) -> list[FileHandle]:
        """What operator `name` wrote for `consumer` in this checkpoint (none: a source)."""
        if isinstance(self.pipeline.node(name), SourceDef):
            return []
        acks = self.coordinator.acks(pending.checkpoint_id)
        return [
            h
            for task, ack in acks.items()
            if split_task_name(task)[0] == name
            for h in ack.handles
            if reads_channel(h, consumer)
        ]

    def _restored_state(
        self,
        base: CompletedCheckpoint | None,
        node: OperatorDef,
        state: str,
        schema,
        files: list[FileHandle],
    ) -> DataFrame:
        from batchpoint.spark import keyed_io

        if base is None or not files:
            return keyed_io.empty(self.spark, schema)
        return keyed_io.read_keyed(
            self.spark,
            self.store_ref,
            files,
            schema=schema,
            what=f"state '{state}' of '{node.name}' in checkpoint {base.checkpoint_id}",
        )

    # -- ack and decline ------------------------------------------------------------------

    def _acknowledge(
        self,
        pending: PendingCheckpoint,
        tasks: list[str],
        handles: dict[int, list[FileHandle]],
        report: OperatorRunReport,
    ) -> dict[str, TaskAcknowledgeResult]:
        def ack(task: str) -> tuple[str, TaskAcknowledgeResult]:
            subtask = split_task_name(task)[1]
            files = handles.get(subtask, [])
            metrics = TaskMetrics(
                sync_ms=report.sync_ms,
                async_ms=report.async_ms,
                records_in=report.records_in.get(subtask, 0),
                records_out=sum(f.rows for f in files if SHARED_FROM_META not in f.meta),
            )
            result = self.coordinator.acknowledge(
                pending.checkpoint_id, task, self.attempt, files, metrics
            )
            return task, result

        with ThreadPoolExecutor(max_workers=min(8, len(tasks))) as pool:
            results = dict(pool.map(ack, tasks))
        summary = ", ".join(f"{t}={r.value}" for t, r in results.items())
        self.log(f"checkpoint {pending.checkpoint_id}: acks {summary}")
        written = [f for fs in handles.values() for f in fs if SHARED_FROM_META not in f.meta]
        self.log(
            f"checkpoint {pending.checkpoint_id}: records in {sum(report.records_in.values())}"
            f" (from upstream operators), records out {sum(f.rows for f in written)}, "
            f"{sum(f.size for f in written)} bytes in {len(written)} file(s); "
            f"sync {report.sync_ms:.0f} ms, async {report.async_ms:.0f} ms"
        )
        return results

    def _decline(self, pending: PendingCheckpoint, tasks: list[str], reason: str) -> None:
        for task in tasks:
            self.coordinator.decline(pending.checkpoint_id, task, self.attempt, reason)
        self.log(
            f"checkpoint {pending.checkpoint_id}: declined by {tasks[0].split('#')[0]}: {reason}"
        )


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
