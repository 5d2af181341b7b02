"""What an operator attempt cost Spark: how many jobs and stages ran under its job tag.

Every Spark operation of an attempt runs under the attempt's tag (`attempt_tag`), on
each thread that starts one (`tagged`). On a classic session the tag is also a
SparkContext job tag, so the driver's status tracker lists the attempt's jobs by it;
over Connect the server turns each operation's tag into job tags of its own (ending
`_Tag_<tag>`), and its UI's REST API lists each job with its tags. A stage counts when
it ran (a stage whose shuffle output an earlier job left is skipped, as Spark's UI
says). Counting is best effort: when the tracker or the API cannot answer, the attempt
records no count rather than a wrong one.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Seconds a Connect client waits for the server's REST API before giving up the count
#: (its first answer, loading the API, takes seconds on a busy server).
REST_TIMEOUT = 30.0
#: Pauses between reads of the REST API until its count settles (see _rest_work).
REST_SETTLE = (0.2, 0.5, 1.0, 2.0, 4.0)


class SparkWork(NamedTuple):
    """The Spark jobs an attempt ran and the stages they ran (skipped ones left out)."""

    jobs: int
    stages: int


def is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextlib.contextmanager
def tagged(spark: SparkSession, tag: str | None) -> Iterator[None]:
    """Every Spark job this thread starts inside carries `tag` (tags are per thread)."""
    if tag is None or not hasattr(spark, "addTag"):
        yield
        return
    context = None if is_connect(spark) else spark.sparkContext
    spark.addTag(tag)
    if context is not None:
        context.addJobTag(tag)
    try:
        yield
    finally:
        spark.removeTag(tag)
        if context is not None:
            context.removeJobTag(tag)


def spark_work(spark: SparkSession, tag: str) -> SparkWork | None:
    """The jobs and stages that ran under `tag`; None when Spark cannot say."""
    try:
        return _rest_work(spark, tag) if is_connect(spark) else _tracked_work(spark, tag)
    except Exception:  # a count is a figure, never a reason to fail an epoch
        return None


def _tracked_work(spark: SparkSession, tag: str) -> SparkWork:
    jvm = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    # The tracker reads the status store, which Spark's listener bus fills after a job
    # ends: drain it first, or the last job's stages may be missing.
    jvm.listenerBus().waitUntilEmpty()
    tracker = jvm.statusTracker()
    jobs = list(tracker.getJobIdsForTag(tag))
    stages: set[int] = set()
    for job in jobs:
        info = tracker.getJobInfo(job)
        if info.isEmpty():
            continue
        for stage in info.get().stageIds():
            found = tracker.getStageInfo(stage)
            if not found.isEmpty() and found.get().submissionTime() > 0:
                stages.add(int(stage))
    return SparkWork(len(jobs), len(stages))


def _rest_work(spark: SparkSession, tag: str) -> SparkWork | None:
    """Over Connect: the server's UI lists each job with its tags, a client's tag as
    `SparkConnect_..._User_<user>_Session_<id>_Tag_<tag>` (Spark's ExecuteHolder and
    ExecuteSessionTag); None when the server runs no UI."""
    conf = spark.conf
    if (conf.get("spark.ui.enabled", "true") or "true").lower() == "false":
        return None
    host = conf.get("spark.driver.host", None) or "127.0.0.1"
    port = conf.get("spark.ui.port", None) or "4040"
    app = conf.get("spark.app.id", None)
    if not app:
        return None
    url = f"http://{host}:{port}/api/v1/applications/{app}"
    # The UI learns of jobs from the server's listener bus, after they ran, and a client
    # cannot drain that bus: the count is read until two reads agree with no job of the
    # tag still running, or not given.
    last = None
    for pause in (*REST_SETTLE, None):
        work, running = _listed_work(url, tag)
        if not running and work == last:
            return work
        last = work
        if pause is None:
            break
        time.sleep(pause)
    return None


def _listed_work(app_url: str, tag: str) -> tuple[SparkWork, bool]:
    """The jobs and stages the REST API lists under `tag`, and whether one still runs.
    A stage counts, as on a classic session, when it was submitted (a skipped one never
    is): judged by the stage's own record, as a job's count of skipped stages leaves out
    a stage no job end has marked yet."""
    jobs = [
        j
        for j in _get(f"{app_url}/jobs")
        if any(t.endswith(f"_Tag_{tag}") for t in j.get("jobTags", ()))
    ]
    ids = {int(s) for j in jobs for s in j.get("stageIds", ())}
    ran = {
        int(s["stageId"])
        for s in (_get(f"{app_url}/stages") if ids else ())
        if int(s["stageId"]) in ids and s.get("submissionTime")
    }
    running = any(j.get("status") not in ("SUCCEEDED", "FAILED") for j in jobs)
    return SparkWork(len(jobs), len(ran)), running


def _get(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url, timeout=REST_TIMEOUT) as answer:
        return json.load(answer)
