"""A stand-in for `spark-submit spark_jobs/run_operator.py ...` that acknowledges the
operator's subtasks with one small file each, in a fraction of a second. It honours the
same contract as the real job (argv, BATCHPOINT_* environment, attempt folders, the
status line it prints last and exit codes 0/2/3) so the DAG logic around it can be
tested quickly; the real job is covered by the slow end-to-end test.

Failure switches (environment): FAKE_JOB_FAIL=<operator> declines and exits 3, like the
runner when the operator raises; FAKE_JOB_KILL=<operator> exits 137 without declining,
like a job killed by the OS (no status line).

FAKE_JOB_STREAMS=1 names the files as the real job names its streams (a channel per
group of consumers, each state, a sink's staged output; see runtime/streams.py), with
a row count of their own, for what reads the acks by stream (lineage's statistics).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.protocol.checkpoint import CheckpointStatus, FileHandle
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId, parse_checkpoint_dir_name
from batchpoint.protocol.pipeline import OperatorKind, PipelineSpec
from batchpoint.runtime.job_status import JobReport, JobStatus
from batchpoint.settings import Settings

KILLED = 137


def job_arguments(argv: list[str]) -> list[str]:
    """What follows the application file, as spark-submit passes it on."""
    for index, arg in enumerate(argv):
        if arg.endswith(".py"):
            return argv[index + 1 :]
    raise SystemExit("fake spark-submit: no application .py file in the arguments")


def pipeline_of(store: object, checkpoint_id: int) -> str:
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in store.list_dirs("pipelines/")]
    for name in names:
        for info in store.list(f"pipelines/{name}/active/"):
            if parse_checkpoint_dir_name(info.key.rsplit("/", 1)[-1]) == checkpoint_id:
                return name
    if len(names) == 1:
        return names[0]
    raise SystemExit(f"fake spark-submit: no pipeline has checkpoint {checkpoint_id} pending")


def streams(spec: PipelineSpec, task: TaskId) -> list[tuple[str, dict[str, object]]]:
    """(stream, handle meta) of each file a subtask of the real job acks."""
    node = spec.operator(task.operator)
    if node.kind is OperatorKind.SINK:
        return [("sink", {})]
    consumers = [op.name for op in spec.downstream(task.operator)]
    out: list[tuple[str, dict[str, object]]] = [(f"state-{s}", {}) for s in node.states]
    if consumers:  # written once for every consumer (they key it alike, in the demo)
        out.append((f"channel-{consumers[0]}", {"consumers": consumers}))
    return out


def write_files(
    c: CheckpointCoordinator, cid: int, task: TaskId, attempt: str, spec: PipelineSpec | None
) -> list[FileHandle]:
    """The subtask's files: one unnamed, or (`spec`) one a stream as the real job's."""
    handles = []
    for n, (stream, meta) in enumerate(streams(spec, task) if spec else [("", {})]):
        folder = stream or "state-fake"
        key = c.layout.task_data_prefix(cid, task, attempt) + f"{folder}/part-0.bin"
        what = f"{task} {stream}" if stream else str(task)
        data = f"{what} checkpoint {cid} attempt {attempt}\n".encode()
        c.store.put(key, data)
        digest = hashlib.sha256(data).hexdigest()
        rows = 1 + n + 10 * task.subtask if spec else 1
        handles.append(FileHandle(key, len(data), digest, rows, name=stream, meta=meta))
    return handles


def main(argv: list[str]) -> int:
    ended = run(argv)
    if isinstance(ended, int):
        return ended  # killed: no status line
    print(ended.line(), flush=True)
    return ended.exit_code


def run(argv: list[str]) -> JobReport | int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--checkpoint-id", required=True, type=int)
    parser.add_argument("--operator", required=True)
    parser.add_argument("--master")
    parser.add_argument("--attempt", required=True)
    args = parser.parse_args(job_arguments(argv))
    try:
        settings = Settings.from_env()
        store = settings.store_ref.open()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return JobReport(JobStatus.BAD_CONFIG, args.checkpoint_id, args.operator, str(exc))
    cid = args.checkpoint_id
    # The pipeline is found in storage rather than imported from --pipeline: importing
    # the pipeline's module (pyarrow, numpy, its quality suites) would cost the fake
    # more than everything else it does.
    c = CheckpointCoordinator(store, pipeline_of(store, cid), settings.checkpoint)
    pending = c.get_pending(cid)
    if pending is None:
        outcome = c.get_outcome(cid)
        if outcome is not None and outcome.status is CheckpointStatus.COMPLETED:
            print(f"[{args.operator}] nothing to do: the checkpoint completed already")
            return JobReport(JobStatus.NOTHING_TO_DO, cid, args.operator)
        print(f"error: checkpoint {cid} is not pending", file=sys.stderr)
        return JobReport(JobStatus.OPERATOR_FAILED, cid, args.operator, "not pending")
    tasks = [t for t in pending.expected_tasks if t.operator == args.operator]
    if os.environ.get("FAKE_JOB_KILL") == args.operator:
        print(f"[{args.operator}] killed (injected)", file=sys.stderr)
        return KILLED
    if os.environ.get("FAKE_JOB_FAIL") == args.operator:
        for task in tasks:
            c.decline(cid, task, args.attempt, "injected failure")
        print(f"error: {args.operator} failed (injected); declined", file=sys.stderr)
        return JobReport(JobStatus.OPERATOR_FAILED, cid, args.operator, "injected failure")
    results = []
    try:
        spec = c.load_spec() if os.environ.get("FAKE_JOB_STREAMS") == "1" else None
        for task in tasks:
            handles = write_files(c, cid, task, args.attempt, spec)
            results.append(f"{task}={c.acknowledge(cid, task, args.attempt, handles).value}")
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return JobReport(JobStatus.OPERATOR_FAILED, cid, args.operator, str(exc))
    print(f"[{args.operator}] checkpoint {cid}: acks {', '.join(results)}")
    return JobReport(JobStatus.ACKNOWLEDGED, cid, args.operator, f"acks {', '.join(results)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
