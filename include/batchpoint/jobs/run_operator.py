"""Run one operator (all its subtasks) of one pipeline for one checkpoint.

    spark-submit <site-packages>/batchpoint/jobs/run_operator.py \
        --pipeline demo.payments:pipeline --checkpoint-id 7 --operator dedup \
        [--master local[2]] [--attempt ID]

    python -m batchpoint.jobs.run_operator --remote sc://spark:15002 \
        --pipeline demo.payments:pipeline --checkpoint-id 7 --operator dedup

(--connect instead of --remote: the server of BATCHPOINT_SPARK_REMOTE.) With --remote
the process is a thin Spark Connect client (no JVM here): it joins the
pipeline's session on the server (batchpoint.spark.connect.pipeline_session_id), runs its
Spark work under the attempt's job tag, and on SIGTERM interrupts that tag before it
exits, so that a killed task's work stops on the server too.

The file ships inside the package (`batchpoint.airflow.config.default_spark_job()` finds
it), so an installed batchpoint needs no checkout; the repository's
spark_jobs/run_operator.py only calls `main` here.

Storage and checkpoint settings come from BATCHPOINT_* environment variables
(batchpoint.settings). The job ends with one status line and its exit code (a
batchpoint.runtime.job_status.JobStatus): 0 acknowledged (or nothing to do), 2 bad usage
or configuration (and a Spark Connect server that cannot be reached), 3 the operator
failed and declined the checkpoint, or the checkpoint was aborted before or while the
attempt ran (its acks DISCARDED), or the storage did not answer, declining nothing;
143 after SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from batchpoint.errors import BatchpointError, ConfigError, StorageUnavailable
from batchpoint.protocol.checkpoint import CheckpointStatus, TaskAcknowledgeResult
from batchpoint.runtime.job_status import JobReport, JobStatus
from batchpoint.runtime.loader import load_pipeline
from batchpoint.runtime.runner import AttemptInterrupted, OperatorRunner
from batchpoint.runtime.task_attempt import OperatorRunReport
from batchpoint.runtime.task_hooks import AttemptHooks
from batchpoint.settings import Settings
from batchpoint.settings.values import check_spark_remote
from batchpoint.storage.redaction import redact_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OnStart = Callable[[OperatorRunner, int, str], None]


def _interrupt_on_sigterm(runner: OperatorRunner, checkpoint_id: int, name: str) -> None:
    """On SIGTERM (Airflow's kill, a timeout): interrupt the attempt's server-side jobs,
    then die at once. No decline: a retry of the task may still complete the checkpoint."""

    def handler(signum: int, frame: object) -> None:
        try:
            stopped = runner.interrupt(checkpoint_id, name)
            message = f"SIGTERM: interrupted {len(stopped)} Spark operation(s)"
            print(f"[{name}] {message}", flush=True)
        except Exception as exc:  # dying anyway: say why it did not work
            message = f"SIGTERM: could not interrupt {runner.tag(checkpoint_id, name)}: {exc}"
            print(f"[{name}] {message}", file=sys.stderr)
        print(JobReport(JobStatus.INTERRUPTED, checkpoint_id, name, message).line(), flush=True)
        sys.stdout.flush()
        os._exit(JobStatus.INTERRUPTED.exit_code)

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", required=True, help="module:attribute of the Pipeline")
    parser.add_argument("--checkpoint-id", required=True, type=int)
    parser.add_argument("--operator", required=True)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", default=None, help="Spark master (default local[2])")
    where.add_argument("--remote", default=None, help="Spark Connect server, sc://host:port")
    where.add_argument(
        "--connect",
        action="store_true",
        help="a client of BATCHPOINT_SPARK_REMOTE (its token stays off the command line)",
    )
    parser.add_argument("--attempt", default=None, help="attempt id (default: a new one)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env(spark_master=args.master or "")
        remote = _checked_remote(args.remote) if args.remote else None
        remote = remote or (_remote_of(settings) if args.connect else None)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        report = JobReport(JobStatus.BAD_CONFIG, args.checkpoint_id, args.operator, str(exc))
    else:
        report = run_job(
            args.pipeline,
            args.checkpoint_id,
            args.operator,
            settings,
            remote=remote,
            attempt=args.attempt,
            log=lambda line: print(f"[{args.operator}] {line}", flush=True),
            error=lambda line: print(line, file=sys.stderr, flush=True),
            on_start=_interrupt_on_sigterm,
        )
    sys.stderr.flush()
    print(report.line(), flush=True)  # last: what the launcher reads
    return report.exit_code


def _checked_remote(remote: str) -> str:
    """--remote checked as BATCHPOINT_SPARK_REMOTE is: a malformed address (a port that
    is no number, an unclosed IPv6 bracket) is a setting to fix (exit 2), not a crash
    that a retry might get past. The reason never repeats a token."""
    try:
        return check_spark_remote(remote)
    except ValueError as exc:
        raise ConfigError(f"--remote: {redact_uri(str(exc))}") from None


def _remote_of(settings: Settings) -> str:
    if not settings.spark_remote:
        raise ConfigError("--connect: BATCHPOINT_SPARK_REMOTE is not set")
    return settings.spark_remote


def run_job(
    pipeline_ref: str,
    checkpoint_id: int,
    operator: str,
    settings: Settings,
    *,
    remote: str | None = None,
    attempt: str | None = None,
    log: Callable[[str], None] = print,
    error: Callable[[str], None] = print,
    on_start: OnStart | None = None,
) -> JobReport:
    """One operator attempt, on a Spark Connect session (`remote`) or a classic one
    (settings.spark_master); returns how it ended (see the module). Over Connect,
    `on_start` gets the runner before the work starts: what stops the attempt
    (OperatorRunner.interrupt) on a kill."""
    try:
        runner = _runner(pipeline_ref, operator, settings, remote, attempt, log)
        if remote and on_start is not None:
            on_start(runner, checkpoint_id, operator)
        report = runner.run(checkpoint_id, operator)
    except BatchpointError as exc:
        error(f"error: {exc}")
        return JobReport(job_status_of(exc), checkpoint_id, operator, str(exc))
    if report.skipped:
        log(f"nothing to do: {report.skipped}")
        return JobReport(JobStatus.NOTHING_TO_DO, checkpoint_id, operator, report.skipped)
    acks = ", ".join(f"{t}={r.value}" for t, r in report.results.items())
    refused = _acks_refused(runner, report)
    if refused:
        error(f"error: {refused}")
        return JobReport(JobStatus.OPERATOR_FAILED, checkpoint_id, operator, refused)
    return JobReport(JobStatus.ACKNOWLEDGED, checkpoint_id, operator, f"acks {acks}")


#: Ack results that count no ack (ack_accounting): the attempt's files were deleted.
_NOT_ACKNOWLEDGED = (TaskAcknowledgeResult.DISCARDED, TaskAcknowledgeResult.UNKNOWN)


def _acks_refused(runner: OperatorRunner, report: OperatorRunReport) -> str:
    """Why the checkpoint took none of the attempt's acks, in one line ("" if it took
    them): an ack the checkpoint DISCARDED (it was aborted while the attempt ran) or did
    not know (UNKNOWN) ends the job as an abort seen before the attempt started does
    (CheckpointAlreadySettled: operator-failed), never as acknowledged."""
    refused = sorted(t for t, r in report.results.items() if r in _NOT_ACKNOWLEDGED)
    if not refused:
        return ""
    cid, name = report.checkpoint_id, report.operator
    try:
        outcome = runner.coordinator.get_outcome(cid)
    except BatchpointError:  # storage gone again: the acks' results still say enough
        outcome = None
    results = ", ".join(f"{t}={report.results[t].value}" for t in refused)
    if outcome is not None and outcome.status is CheckpointStatus.ABORTED:
        return f"checkpoint {cid} was aborted while {name} ran ({outcome.message})"
    if TaskAcknowledgeResult.DISCARDED in (report.results[t] for t in refused):
        return f"checkpoint {cid} was aborted while {name} ran (acks {results})"
    return f"checkpoint {cid} no longer expects these subtasks of {name} (acks {results})"


def job_status_of(exc: BatchpointError) -> JobStatus:
    """How a job that raised `exc` ends. Any error but a setting, an interrupt, an
    unreachable server or storage that did not answer ends it as a failed operator
    (OperatorFailed declined the checkpoint; a checkpoint settled meanwhile, or one that
    expects no such task, would meet a retry the same way). StorageUnavailable reaches
    here only undeclined: before the attempt began, at its ack, or when the decline
    itself found no storage; a retry once S3 is back may still complete the checkpoint."""
    from batchpoint.spark.connect import SparkUnreachable

    if isinstance(exc, AttemptInterrupted):
        return JobStatus.INTERRUPTED
    if isinstance(exc, ConfigError):
        return JobStatus.BAD_CONFIG
    if isinstance(exc, SparkUnreachable):
        return JobStatus.SPARK_UNREACHABLE
    if isinstance(exc, StorageUnavailable):
        return JobStatus.STORAGE_UNAVAILABLE
    return JobStatus.OPERATOR_FAILED


def _runner(
    pipeline_ref: str,
    operator: str,
    settings: Settings,
    remote: str | None,
    attempt: str | None,
    log: Callable[[str], None],
) -> OperatorRunner:
    """The pipeline's runner on its Spark session (a Connect client of `remote`, else a
    classic session on settings.spark_master)."""
    pipeline = load_pipeline(pipeline_ref)
    spark = operator_session(pipeline.name, operator, settings, remote)
    return OperatorRunner(
        pipeline,
        settings.store_ref,
        spark,
        config=settings.checkpoint,
        attempt=attempt,
        log=log,
        hooks=_injected_faults(),
    )


def operator_session(
    pipeline: str, operator: str, settings: Settings, remote: str | None = None
) -> SparkSession:
    """The Spark session an operator's job runs on: a Connect client of `remote` in the
    pipeline's server session, its jobs in the pipeline's scheduler pool (unless
    BATCHPOINT_SPARK_CONF names one), else a classic session on settings.spark_master.
    Both apply settings.spark_conf (BATCHPOINT_SPARK_CONF), over batchpoint's defaults."""
    app_name = f"batchpoint-{pipeline}-{operator}"
    if remote:
        from batchpoint.spark.connect import (
            POOL_SETTING,
            connect_session,
            pipeline_pool,
            pipeline_session_id,
        )

        session_id = pipeline_session_id(pipeline, remote)
        conf = {POOL_SETTING: pipeline_pool(pipeline), **settings.spark_conf}
        return connect_session(remote, app_name, session_id=session_id, conf=conf)
    from batchpoint.spark.session import spark_session

    return spark_session(app_name, settings.spark_master, conf=settings.spark_conf)


def _injected_faults() -> AttemptHooks | None:
    """The fault-injecting hooks when BATCHPOINT_FAULT (runtime.faults.ENV) tells this job
    to fail (tests, the soak, the demo); none otherwise, and faults.py is not imported."""
    if not os.environ.get("BATCHPOINT_FAULT"):
        return None
    from batchpoint.runtime.faults import faults_from_env

    return faults_from_env()


if __name__ == "__main__":
    sys.exit(main())
