"""How an operator job ends, as the job says it and as its launcher reads it.

The job (jobs/run_operator.py) ends with its `JobStatus`'s exit code and, last on its
standard output, one status line:

    batchpoint-status: {"status": "operator-failed", "checkpoint_id": 7,
                        "operator": "dedup", "message": "..."}   (on one line)

The launcher (airflow/launchers.py) reads that line instead of scraping the job's other
output; a job that died before printing it (killed, out of memory, a crash) is read by
its exit code alone. Exit codes are what they always were: 0 done, 2 bad configuration
or an unreachable Spark Connect server, 3 the operator failed and declined (or the
storage did not answer: only the status line tells them apart), 143 after SIGTERM (137:
killed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

#: What starts the job's status line.
STATUS_PREFIX = "batchpoint-status: "


class JobStatus(StrEnum):
    """The end of an operator job. Each member carries its exit code and whether a
    retry of the task may help."""

    ACKNOWLEDGED = "acknowledged"  # every subtask acknowledged (SUCCESS or DUPLICATE)
    NOTHING_TO_DO = "nothing-to-do"  # the checkpoint completed, or the acks were in
    BAD_CONFIG = "bad-config"  # a setting, the pipeline or the operator is wrong
    SPARK_UNREACHABLE = "spark-unreachable"  # the Spark Connect server is not there
    # the operator raised and declined the checkpoint, or the checkpoint was aborted
    # before the attempt started or while it ran (its acks DISCARDED or UNKNOWN)
    OPERATOR_FAILED = "operator-failed"
    STORAGE_UNAVAILABLE = "storage-unavailable"  # S3 did not answer: nothing declined
    INTERRUPTED = "interrupted"  # SIGTERM or a kill: nothing declined
    DIED = "died"  # the job ended without saying how (killed, a crash): launcher side only

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]

    @property
    def succeeded(self) -> bool:
        return self in (JobStatus.ACKNOWLEDGED, JobStatus.NOTHING_TO_DO)

    @property
    def retry_may_help(self) -> bool:
        """A bad setting or a declined checkpoint stays so; a server or storage that
        comes back, or a job that was killed, may do better next time."""
        return self in (
            JobStatus.SPARK_UNREACHABLE,
            JobStatus.STORAGE_UNAVAILABLE,
            JobStatus.INTERRUPTED,
            JobStatus.DIED,
        )

    @classmethod
    def from_exit_code(cls, code: int) -> JobStatus:
        """The status of a job that printed no status line: its exit code's, and DIED
        for any code a job does not exit with itself (137, a signal, a crash). Exit 2
        reads as BAD_CONFIG: only the status line tells an unreachable server apart."""
        return {
            0: cls.ACKNOWLEDGED,
            2: cls.BAD_CONFIG,
            3: cls.OPERATOR_FAILED,
            143: cls.INTERRUPTED,
        }.get(code, cls.DIED)


_EXIT_CODES = {
    JobStatus.ACKNOWLEDGED: 0,
    JobStatus.NOTHING_TO_DO: 0,
    JobStatus.BAD_CONFIG: 2,
    JobStatus.SPARK_UNREACHABLE: 2,
    JobStatus.OPERATOR_FAILED: 3,
    JobStatus.STORAGE_UNAVAILABLE: 3,
    JobStatus.INTERRUPTED: 143,
    JobStatus.DIED: 1,
}


@dataclass(frozen=True)
class JobReport:
    """What the status line carries."""

    status: JobStatus
    checkpoint_id: int | None = None
    operator: str = ""
    message: str = ""

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def line(self) -> str:
        body: dict[str, Any] = {
            "status": self.status.value,
            "checkpoint_id": self.checkpoint_id,
            "operator": self.operator,
            "message": self.message,
        }
        return STATUS_PREFIX + json.dumps(body, sort_keys=False)

    @classmethod
    def parse(cls, line: str) -> JobReport | None:
        """The report of a status line; None for any other line (or a garbled one)."""
        if not line.startswith(STATUS_PREFIX):
            return None
        try:
            body = json.loads(line[len(STATUS_PREFIX) :])
            status = JobStatus(body["status"])
        except (ValueError, KeyError, TypeError):
            return None
        cid = body.get("checkpoint_id")
        return cls(
            status,
            cid if isinstance(cid, int) else None,
            str(body.get("operator") or ""),
            str(body.get("message") or ""),
        )

    @classmethod
    def last_in(cls, lines: Iterable[str]) -> JobReport | None:
        """The last status line among `lines` (a job prints one, last)."""
        found = None
        for line in lines:
            found = cls.parse(line.strip()) or found
        return found
