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
from typing import Any

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.runtime.loader import load_pipeline
from batchpoint.runtime.runner import OperatorFailed, OperatorRunner
from batchpoint.settings import Settings


def _interrupt_on_sigterm(spark: Any, tag: str, name: str) -> None:
    """On SIGTERM (Airflow's kill, a timeout): interrupt the attempt's server-side jobs,
    then die at once. No decline: a retry of the task may still complete the checkpoint."""

    def handler(signum: int, frame: object) -> None:
        try:
            stopped = spark.interruptTag(tag)
            print(f"[{name}] SIGTERM: interrupted {len(stopped)} Spark operation(s)", flush=True)
        except Exception as exc:  # dying anyway: say why it did not work
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
        pipeline = load_pipeline(args.pipeline)
        app_name = f"batchpoint-{pipeline.name}-{args.operator}"
        if args.remote:
            from batchpoint.spark.session import connect_session, pipeline_session_id

            spark = connect_session(
                args.remote,
                app_name,
                session_id=pipeline_session_id(pipeline.name, args.remote),
            )
        else:
            from batchpoint.spark.session import spark_session

            spark = spark_session(app_name, settings.spark_master)
        runner = OperatorRunner(
            pipeline,
            settings.store_ref,
            spark,
            config=settings.checkpoint,
            attempt=args.attempt,
            log=lambda line: print(f"[{args.operator}] {line}", flush=True),
        )
        if args.remote:
            tag = runner.tag(args.checkpoint_id, args.operator)
            _interrupt_on_sigterm(spark, tag, args.operator)
        report = runner.run(args.checkpoint_id, args.operator)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OperatorFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except BatchpointError as exc:
        from batchpoint.spark.session import SparkUnreachable

        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, SparkUnreachable) else 3
    if report.skipped:
        print(f"[{args.operator}] nothing to do: {report.skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
