"""Run one operator (all its subtasks) of one pipeline for one checkpoint.

    spark-submit <site-packages>/batchpoint/jobs/run_operator.py \
        --pipeline batchpoint.demo.payments:pipeline --checkpoint-id 7 --operator dedup \
        [--master local[2]] [--attempt ID]

    python -m batchpoint.jobs.run_operator --remote sc://spark:15002 \
        --pipeline batchpoint.demo.payments:pipeline --checkpoint-id 7 --operator dedup

With --remote the process is a thin Spark Connect client (no JVM here): it joins the
pipeline's session on the server (batchpoint.spark.session.pipeline_session_id), runs its
Spark work under the attempt's job tag, and on SIGTERM interrupts that tag before it
exits, so that a killed task's work stops on the server too.

The file ships inside the package (`batchpoint.airflow.config.default_spark_job()` finds
it), so an installed batchpoint needs no checkout; the repository's
spark_jobs/run_operator.py only calls `main` here.

Storage and checkpoint settings come from BATCHPOINT_* environment variables
(batchpoint.settings). Exit codes: 0 acknowledged (or nothing to do), 2 bad usage or
configuration (and a Spark Connect server that cannot be reached), 3 the operator failed
and declined the checkpoint; 143 after SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.runtime.loader import load_pipeline
from batchpoint.runtime.runner import AttemptInterrupted, OperatorFailed, OperatorRunner
from batchpoint.runtime.task_hooks import AttemptHooks
from batchpoint.settings import Settings


def _interrupt_on_sigterm(runner: OperatorRunner, checkpoint_id: int, name: str) -> None:
    """On SIGTERM (Airflow's kill, a timeout): interrupt the attempt's server-side jobs,
    then die at once. No decline: a retry of the task may still complete the checkpoint."""

    def handler(signum: int, frame: object) -> None:
        try:
            stopped = runner.interrupt(checkpoint_id, name)
            print(f"[{name}] SIGTERM: interrupted {len(stopped)} Spark operation(s)", flush=True)
        except Exception as exc:  # dying anyway: say why it did not work
            tag = runner.tag(checkpoint_id, name)
            print(f"[{name}] SIGTERM: could not interrupt {tag}: {exc}", file=sys.stderr)
        sys.stdout.flush()
        os._exit(143)

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", required=True, help="module:attribute of the Pipeline")
    parser.add_argument("--checkpoint-id", required=True, type=int)
    parser.add_argument("--operator", required=True)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", default=None, help="Spark master (default local[2])")
    where.add_argument("--remote", default=None, help="Spark Connect server, sc://host:port")
    parser.add_argument("--attempt", default=None, help="attempt id (default: a new one)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env(spark_master=args.master or "")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_job(
        args.pipeline,
        args.checkpoint_id,
        args.operator,
        settings,
        remote=args.remote,
        attempt=args.attempt,
        log=lambda line: print(f"[{args.operator}] {line}", flush=True),
        error=lambda line: print(line, file=sys.stderr, flush=True),
        on_start=_interrupt_on_sigterm,
    )


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
    on_start: Callable[[OperatorRunner, int, str], None] | None = None,
) -> int:
    """One operator attempt, on a Spark Connect session (`remote`) or a classic one
    (settings.spark_master); returns the exit code (see the module). Over Connect,
    `on_start` gets the runner before the work starts: what stops the attempt
    (OperatorRunner.interrupt) on a kill."""
    try:
        pipeline = load_pipeline(pipeline_ref)
        app_name = f"batchpoint-{pipeline.name}-{operator}"
        if remote:
            from batchpoint.spark.session import connect_session, pipeline_session_id

            spark = connect_session(
                remote, app_name, session_id=pipeline_session_id(pipeline.name, remote)
            )
        else:
            from batchpoint.spark.session import spark_session

            spark = spark_session(app_name, settings.spark_master)
        runner = OperatorRunner(
            pipeline,
            settings.store_ref,
            spark,
            config=settings.checkpoint,
            attempt=attempt,
            log=log,
            hooks=_injected_faults(),
        )
        if remote and on_start is not None:
            on_start(runner, checkpoint_id, operator)
        report = runner.run(checkpoint_id, operator)
    except AttemptInterrupted as exc:
        error(f"error: {exc}")
        return 143
    except ConfigError as exc:
        error(f"error: {exc}")
        return 2
    except OperatorFailed as exc:
        error(f"error: {exc}")
        return 3
    except BatchpointError as exc:
        from batchpoint.spark.session import SparkUnreachable

        error(f"error: {exc}")
        return 2 if isinstance(exc, SparkUnreachable) else 3
    if report.skipped:
        log(f"nothing to do: {report.skipped}")
    return 0


def _injected_faults() -> AttemptHooks | None:
    """The fault-injecting hooks when BATCHPOINT_FAULT (runtime.faults.ENV) tells this job
    to fail (tests, the soak, the demo); none otherwise, and faults.py is not imported."""
    if not os.environ.get("BATCHPOINT_FAULT"):
        return None
    from batchpoint.runtime.faults import faults_from_env

    return faults_from_env()


if __name__ == "__main__":
    sys.exit(main())
