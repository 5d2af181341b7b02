"""Run one operator (all its subtasks) of one pipeline for one checkpoint.

    spark-submit <site-packages>/batchpoint/jobs/run_operator.py \
        --pipeline batchpoint.demo.payments:pipeline --checkpoint-id 7 --operator dedup \
        [--master local[2]] [--attempt ID]

The file ships inside the package (`batchpoint.airflow.config.default_spark_job()` finds
it), so an installed batchpoint needs no checkout; the repository's
spark_jobs/run_operator.py only calls `main` here.

Storage and checkpoint settings come from BATCHPOINT_* environment variables
(batchpoint.settings). Exit codes: 0 acknowledged (or nothing to do), 2 bad usage or
configuration, 3 the operator failed and declined the checkpoint.
"""

from __future__ import annotations

import argparse
import sys

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.runtime.loader import load_pipeline
from batchpoint.runtime.runner import OperatorFailed, OperatorRunner
from batchpoint.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", required=True, help="module:attribute of the Pipeline")
    parser.add_argument("--checkpoint-id", required=True, type=int)
    parser.add_argument("--operator", required=True)
    parser.add_argument("--master", default=None, help="Spark master (default local[2])")
    parser.add_argument("--attempt", default=None, help="attempt id (default: a new one)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env(spark_master=args.master or "")
        pipeline = load_pipeline(args.pipeline)
        from batchpoint.spark.session import spark_session

        spark = spark_session(f"batchpoint-{pipeline.name}-{args.operator}", settings.spark_master)
        runner = OperatorRunner(
            pipeline,
            settings.store_ref,
            spark,
            config=settings.checkpoint,
            attempt=args.attempt,
            log=lambda line: print(f"[{args.operator}] {line}", flush=True),
        )
        report = runner.run(args.checkpoint_id, args.operator)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OperatorFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    if report.skipped:
        print(f"[{args.operator}] nothing to do: {report.skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
