"""Runs one operator of one checkpoint under spark-submit: a thin wrapper for deployments
that mount the repository; the job itself is batchpoint/jobs/run_operator.py."""

import sys

from batchpoint.jobs.run_operator import main

if __name__ == "__main__":
    sys.exit(main())
