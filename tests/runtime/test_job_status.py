"""The typed end of an operator job (runtime.job_status): each error of an attempt maps
to one status, each status to the exit code the job always had, and the status line the
job prints last reads back as the report it was written from."""

from __future__ import annotations

import pytest

from batchpoint.errors import (
    BatchpointError,
    CheckpointError,
    ConfigError,
    PipelineSpecError,
    StorageUnavailable,
)
from batchpoint.jobs.run_operator import job_status_of
from batchpoint.runtime.job_status import STATUS_PREFIX, JobReport, JobStatus
from batchpoint.runtime.runner import AttemptInterrupted, CheckpointAlreadySettled, OperatorFailed
from batchpoint.spark.connect import SparkUnreachable

#: The exit codes jobs/run_operator.py has always used, and what launchers expect.
EXIT_CODES = {
    JobStatus.ACKNOWLEDGED: 0,
    JobStatus.NOTHING_TO_DO: 0,
    JobStatus.BAD_CONFIG: 2,
    JobStatus.SPARK_UNREACHABLE: 2,
    JobStatus.OPERATOR_FAILED: 3,
    JobStatus.STORAGE_UNAVAILABLE: 3,
    JobStatus.INTERRUPTED: 143,
}


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (ConfigError("BATCHPOINT_ROOT='x': bad"), JobStatus.BAD_CONFIG),
        (PipelineSpecError("no operator, source or sink 'nope'"), JobStatus.BAD_CONFIG),
        (
            SparkUnreachable("Spark Connect server at sc://h:1 is unreachable"),
            JobStatus.SPARK_UNREACHABLE,
        ),
        (OperatorFailed("dedup failed in checkpoint 7: boom"), JobStatus.OPERATOR_FAILED),
        (CheckpointAlreadySettled("checkpoint 7 was aborted"), JobStatus.OPERATOR_FAILED),
        (CheckpointError("checkpoint 7 expects no task of 'x'"), JobStatus.OPERATOR_FAILED),
        (BatchpointError("anything else"), JobStatus.OPERATOR_FAILED),
        (
            StorageUnavailable("S3 endpoint http://s3:8333 did not answer get s3://b/k"),
            JobStatus.STORAGE_UNAVAILABLE,
        ),
        (AttemptInterrupted("dedup was interrupted in checkpoint 7"), JobStatus.INTERRUPTED),
    ],
)
def test_each_error_of_an_attempt_maps_to_its_status(
    exc: BatchpointError, status: JobStatus
) -> None:
    assert job_status_of(exc) is status
    assert status.exit_code == EXIT_CODES[status]


def test_exit_codes_are_the_jobs_of_old_and_read_back() -> None:
    assert {s: s.exit_code for s in JobStatus if s is not JobStatus.DIED} == EXIT_CODES
    for status in (
        JobStatus.ACKNOWLEDGED,
        JobStatus.BAD_CONFIG,
        JobStatus.OPERATOR_FAILED,
        JobStatus.INTERRUPTED,
    ):
        assert JobStatus.from_exit_code(status.exit_code) is status
    # what a job never exits with itself: SIGKILL (137, or -9 from Popen), a crash
    for code in (1, 137, -9, -15, 255):
        assert JobStatus.from_exit_code(code) is JobStatus.DIED
    assert {s for s in JobStatus if s.succeeded} == {
        JobStatus.ACKNOWLEDGED,
        JobStatus.NOTHING_TO_DO,
    }
    assert {s for s in JobStatus if s.retry_may_help} == {
        JobStatus.SPARK_UNREACHABLE,
        JobStatus.STORAGE_UNAVAILABLE,
        JobStatus.INTERRUPTED,
        JobStatus.DIED,
    }


@pytest.mark.parametrize("status", list(JobStatus))
def test_the_status_line_reads_back_as_its_report(status: JobStatus) -> None:
    report = JobReport(status, 7, "dedup", 'it said "no": 100% sure\\n')
    line = report.line()
    assert line.startswith(STATUS_PREFIX) and "\n" not in line
    assert JobReport.parse(line) == report
    assert (
        JobReport.last_in(["[dedup] x", JobReport(JobStatus.DIED).line(), line, "log4j: bye"])
        == report
    )


@pytest.mark.parametrize(
    "line",
    [
        "",
        "[dedup] checkpoint 7: acks dedup#0=SUCCESS",
        STATUS_PREFIX + "{not json",
        STATUS_PREFIX + '{"status": "exploded"}',
        STATUS_PREFIX + "[1, 2]",
        "error: " + STATUS_PREFIX + '{"status": "acknowledged"}',
    ],
)
def test_anything_else_is_no_status_line(line: str) -> None:
    assert JobReport.parse(line) is None
    assert JobReport.last_in([line]) is None
