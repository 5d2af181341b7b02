"""An operator task whose Spark Connect server or S3 did not answer waits, inside the
task, until it answers again, then fails for a retry that Airflow runs at once.

A fixed retry delay is the wrong measure of an outage: a Connect server restarting
takes from seconds to a minute or two (a JVM, its executors, its warm-up job), an S3
restart a few seconds. A retry that comes too early meets the outage again and spends
a try; one that comes too late leaves the checkpoint waiting. So the task watches the
endpoint itself (a connection to the server's port; a read of the store) for at most
OUTAGE_WAIT seconds, and once it answers raises OutageEnded, which the operator tasks'
retry policy retries after RETRY_AT_ONCE (Airflow 3.3 and newer: `retry_policy`; older
versions keep the task's own retry delay). A new try is a new attempt, so nothing of the
failed one is reused. An outage that outlasts the wait fails the task as before, for a
retry after the usual delay."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from batchpoint.airflow.compat import AirflowException
from batchpoint.errors import BatchpointError, StorageUnavailable
from batchpoint.runtime.job_status import JobStatus
from batchpoint.settings import Settings

#: How long a task waits for the endpoint to answer again.
OUTAGE_WAIT = 300.0
#: The retry after OutageEnded: once the endpoint answers, at once.
RETRY_AT_ONCE = timedelta(seconds=1)
POLL_EVERY = 1.0
SAY_EVERY = 15.0


class OutageEnded(AirflowException):
    """The try met an outage of its Connect server or store, which has ended: retry now."""


def endpoint_probe(settings: Settings, status: JobStatus) -> Callable[[], bool] | None:
    """What answers when the outage that `status` names is over (None: nothing to watch,
    as for a classic session's master)."""
    if status is JobStatus.SPARK_UNREACHABLE and settings.spark_remote:
        from batchpoint.spark.connect import server_answers

        remote = settings.spark_remote
        return lambda: server_answers(remote)
    if status is JobStatus.STORAGE_UNAVAILABLE:
        return _StoreProbe(settings)
    return None


class _StoreProbe:
    """A read of the store: opened once (a client per poll would be a new connection pool
    each second), then asked until it answers."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._store: Any = None

    def __call__(self) -> bool:
        try:
            if self._store is None:
                self._store = self._settings.store_ref.open()
            self._store.exists("_batchpoint_probe")
        except (BatchpointError, OSError):
            return False
        return True


def wait_until_answers(
    probe: Callable[[], bool],
    say: Callable[[str], None],
    limit: float = OUTAGE_WAIT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float | None:
    """Poll `probe` until it answers: the seconds waited, or None after `limit`."""
    started = said = clock()
    while True:
        if probe():
            return clock() - started
        now = clock()
        if now - started >= limit:
            return None
        if now - said >= SAY_EVERY:
            say(f"still waiting for it to answer ({now - started:.0f}s of {limit:.0f}s)")
            said = now
        sleep(POLL_EVERY)


#: Client libraries whose errors may be the store not answering (a refused connection, a
#: 5xx after boto's retries): the store's own probe then says whether it is.
_STORE_CLIENTS = ("botocore", "boto3", "urllib3", "pyarrow", "s3transfer")


def may_be_store_outage(exc: BaseException) -> bool:
    """Whether `exc`, raised by work against the store, may be an outage of the store:
    batchpoint's StorageUnavailable, or an error of the network or of an S3 client library
    that batchpoint's own store did not translate (pyiceberg's and pyarrow's file I/O).
    batchpoint's other errors (a refusal, bad configuration) are not."""
    if isinstance(exc, StorageUnavailable):
        return True
    if isinstance(exc, BatchpointError):
        return False
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in _STORE_CLIENTS


def outage_over(settings: Settings, status: JobStatus, log: logging.Logger) -> bool:
    """Wait for the endpoint of the outage `status` names to answer again: whether it
    does within OUTAGE_WAIT."""
    probe = endpoint_probe(settings, status)
    if probe is None:
        return False
    log.warning("%s: waiting for it to answer again", status.value)
    waited = wait_until_answers(probe, log.info)
    if waited is not None:
        log.info("it answers again after %.1fs: retrying now", waited)
    return waited is not None


def outage_retry_policy() -> dict[str, Any]:
    """The operator tasks' `retry_policy` argument: OutageEnded retried after
    RETRY_AT_ONCE; empty where Airflow has no retry policies (before 3.3)."""
    try:
        from airflow.sdk.definitions.retry_policy import (
            ExceptionRetryPolicy,
            RetryAction,
            RetryRule,
        )
    except ImportError:
        return {}
    rule = RetryRule(
        exception=f"{OutageEnded.__module__}.{OutageEnded.__qualname__}",
        action=RetryAction.RETRY,
        retry_delay=RETRY_AT_ONCE,
        reason="the outage ended: retry at once",
    )
    return {"retry_policy": ExceptionRetryPolicy(rules=[rule])}


__all__ = [
    "OUTAGE_WAIT",
    "RETRY_AT_ONCE",
    "OutageEnded",
    "endpoint_probe",
    "may_be_store_outage",
    "outage_over",
    "outage_retry_policy",
    "wait_until_answers",
]
