"""The gate that audits checkpoints before they complete (write-audit-publish): the
pipeline's declared suites and checks, on a Spark session it starts on first use and
stops when done, so a task process that audits leaves no JVM behind.

The audit itself (validate, then complete-and-publish or abort) is
`batchpoint.ops.audit.audit_then_finalize`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from batchpoint.quality.gate import QualityGate

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from batchpoint.runtime.api import Pipeline
    from batchpoint.storage import StoreRef


class _AuditGate(QualityGate):
    """A QualityGate whose Spark session, started on first use, runs on the master (and
    settings) it is given rather than the environment's, and is stopped by `close` if
    this gate started it."""

    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        *,
        spark_master: str,
        spark_conf: Mapping[str, str],
        log: Callable[[str], None],
    ) -> None:
        super().__init__(pipeline, store_ref, log=log)
        self.spark_master = spark_master
        self.spark_conf = dict(spark_conf)
        self._owns_spark = False

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from pyspark.sql import SparkSession

            from batchpoint.spark.session import spark_session

            self._owns_spark = SparkSession.getActiveSession() is None
            self._spark = spark_session("batchpoint-audit", self.spark_master, self.spark_conf)
        return self._spark

    def close(self) -> None:
        # A session someone else started (a test's, a notebook's) is theirs to stop.
        if self._spark is not None and self._owns_spark:
            self._spark.stop()
        self._spark = None
        self._validator = None


@contextmanager
def audit_gate(
    pipeline: Pipeline,
    store_ref: StoreRef,
    spark_master: str,
    *,
    spark_conf: Mapping[str, str] | None = None,
    log: Callable[[str], None] = print,
) -> Iterator[QualityGate]:
    """The gate that audits `pipeline`'s checkpoints: the suites and checks it declares
    (`declare_quality`), as the restore gate of the same pipeline would run them. Spark
    starts on first use with `spark_master`; a session it started is stopped on exit, so
    a task process that audits leaves no JVM behind."""
    gate = _AuditGate(
        pipeline, store_ref, spark_master=spark_master, spark_conf=spark_conf or {}, log=log
    )
    try:
        yield gate
    finally:
        gate.close()
