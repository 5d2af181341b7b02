"""A stand-in for `spark-submit spark_jobs/run_operator.py ...` that acknowledges the
operator's subtasks with one small file each, in a fraction of a second. It honours the
same contract as the real job (argv, BATCHPOINT_* environment, attempt folders, the
status line it prints last and exit codes 0/2/3) so the DAG logic around it can be
tested quickly; the real job is covered by the slow end-to-end test.

Failure switches (environment): FAKE_JOB_FAIL=<operator> declines and exits 3, like the
runner when the operator raises; FAKE_JOB_KILL=<operator> exits 137 without declining,
like a job killed by the OS (no status line).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.protocol.checkpoint import CheckpointStatus, FileHandle
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import parse_checkpoint_dir_name
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
        for task in tasks:
            key = c.layout.task_data_prefix(cid, task, args.attempt) + "state-fake/part-0.bin"
            data = f"{task} checkpoint {cid} attempt {args.attempt}\n".encode()
            c.store.put(key, data)
            handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows=1)
            results.append(f"{task}={c.acknowledge(cid, task, args.attempt, [handle]).value}")
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return JobReport(JobStatus.OPERATOR_FAILED, cid, args.operator, str(exc))
    print(f"[{args.operator}] checkpoint {cid}: acks {', '.join(results)}")
    return JobReport(JobStatus.ACKNOWLEDGED, cid, args.operator, f"acks {', '.join(results)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
