"""What a window of work cost a classic Spark session: the jobs that started in it and the
stages they ran (skipped stages left out, as Spark's UI counts them).

For engines that tag nothing, e.g. Structured Streaming's micro-batch on its own thread:
when engines take turns on one session, every job in an engine's window is that engine's.
Read from the driver's status store (what the UI's REST API serves, present with the UI
off). A sibling of the scripts (their folder is on sys.path), as bench_peer uses it.
"""

from __future__ import annotations

import statistics
from typing import Any, NamedTuple


class JobCount(NamedTuple):
    jobs: int
    stages: int


def _jobs(spark: Any) -> list[Any]:
    context = spark.sparkContext._jsc.sc()
    # The store is filled by the listener bus after a job ends: drain it first, or the
    # window's last job (or its stages) may be missing.
    context.listenerBus().waitUntilEmpty()
    listed = context.statusStore().jobsList(None)  # None: jobs of every status
    return [listed.apply(i) for i in range(listed.size())]


def last_job(spark: Any) -> int:
    """The id of the newest job so far (-1: none yet); job ids only grow."""
    return max((job.jobId() for job in _jobs(spark)), default=-1)


def jobs_since(spark: Any, last: int) -> JobCount:
    """The jobs started after job `last`, and the stages they ran."""
    new = [job for job in _jobs(spark) if job.jobId() > last]
    stages = sum(job.stageIds().size() - job.numSkippedStages() for job in new)
    return JobCount(len(new), stages)


def jobs(row: dict[str, Any], engine: str) -> str:
    """An engine's `jobs/stages` in a row of bench_peer's epochs."""
    return f"{row[f'{engine} jobs']}/{row[f'{engine} stages']}"


def median_work(rows: list[dict[str, Any]], engine: str) -> tuple[float, float]:
    """An engine's median Spark jobs and stages per epoch of `rows`."""
    return (
        statistics.median(r[f"{engine} jobs"] for r in rows),
        statistics.median(r[f"{engine} stages"] for r in rows),
    )
