"""A Spark Connect server that cannot be reached, told apart from an operator's own error
that merely says "Connection refused" (spark/connect.py is_unreachable, server_went_away):
an error a Spark task raised never reads as the server gone (the server ran the task), nor
does one no RPC raised. No Spark here: a listening socket stands in for a server that
answers, a closed port for one that is gone, and a real pyspark client meets the closed
port in a child process (a Connect client switches its whole process to Connect)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from pyspark.errors.exceptions.connect import (
    PythonException,
    SparkConnectGrpcException,
    SparkException,
)

from batchpoint.errors import ConfigError
from batchpoint.jobs.run_operator import job_status_of
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.job_status import JobStatus
from batchpoint.runtime.task_ack import fail
from batchpoint.runtime.task_attempt import (
    OperatorFailed,
    OperatorRunReport,
    TaskAttempt,
    TaskEnvironment,
)
from batchpoint.spark.connect import connect_session, is_unreachable, server_went_away
from batchpoint.storage import StoreRef
from batchpoint.storage.local import LocalObjectStore
from support.connect_ports import answering, gone

#: A UDF's HTTP call, refused by the service it called: raised in a Spark task.
UDF_REFUSED = (
    "[PYTHON_EXCEPTION] Traceback (most recent call last):\n"
    '  File "payments.py", line 31, in enrich\n'
    "requests.exceptions.ConnectionError: HTTPConnectionPool(host='fx-rates', port=80): "
    "Max retries exceeded (Caused by NewConnectionError: [Errno 111] Connection refused)"
)
#: The scheduler's wrapper of a task that failed so, as the server sends it.
STAGE_FAILED = (
    "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent "
    "failure: Lost task 0.0 (TID 7): java.net.ConnectException: Connection refused"
)
#: What pyspark's client raises once its retries of a dead server are spent.
DEAD_SERVER = (
    "<_InactiveRpcError of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n"
    '\tdetails = "failed to connect to all addresses; last error: UNKNOWN: '
    'ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused"\n>'
)


def _task_errors() -> list[BaseException]:
    return [
        PythonException(UDF_REFUSED),
        # as the server sends one: an INTERNAL status, whatever the text says
        PythonException(UDF_REFUSED, grpc_status_code=grpc.StatusCode.INTERNAL),
        SparkException(STAGE_FAILED, grpc_status_code=grpc.StatusCode.INTERNAL),
        SparkConnectGrpcException(STAGE_FAILED),
        RuntimeError(f"StatusCode.UNAVAILABLE {UDF_REFUSED}"),
    ]


@pytest.mark.parametrize("error", _task_errors(), ids=lambda e: type(e).__name__)
def test_an_error_raised_in_a_spark_task_is_never_the_server_gone(error: BaseException) -> None:
    assert not is_unreachable(error)
    with answering() as up:
        assert not server_went_away(up, error, settle=0.2)
    # not even with the server gone too: the server ran the task, the task failed
    assert not server_went_away(gone(), error, settle=0.2)


def test_an_outage_met_while_handling_a_task_error_is_an_outage() -> None:
    """User code that retries Spark in an `except` around a task's error: the outage it
    then meets carries that error as its context only, and is still the server gone."""
    try:
        try:
            raise PythonException(UDF_REFUSED)
        except PythonException:
            raise SparkConnectGrpcException(
                DEAD_SERVER, grpc_status_code=grpc.StatusCode.UNAVAILABLE
            ) from None
    except SparkConnectGrpcException as outage:
        assert isinstance(outage.__context__, PythonException)
        assert is_unreachable(outage)
    # raised *from* a task's error, it is that error
    wrapped = SparkConnectGrpcException(DEAD_SERVER)
    wrapped.__cause__ = PythonException(UDF_REFUSED)
    assert not is_unreachable(wrapped)


def test_the_operators_own_refused_call_is_no_rpc_and_not_the_server() -> None:
    """Code of the operator in the client process, refused by another service."""
    refused = ConnectionRefusedError(111, "Connection refused")
    assert not is_unreachable(refused)
    assert not server_went_away(gone(), refused, settle=0.2)


def test_the_rpcs_own_status_decides() -> None:
    dead = SparkConnectGrpcException(DEAD_SERVER, grpc_status_code=grpc.StatusCode.UNAVAILABLE)
    assert is_unreachable(dead)
    timed_out = SparkConnectGrpcException(
        "deadline", grpc_status_code=grpc.StatusCode.DEADLINE_EXCEEDED
    )
    assert is_unreachable(timed_out)
    # The server answered the RPC (it refused a setting, say): its text is no outage.
    answered = SparkConnectGrpcException(
        "could not set: Connection refused", grpc_status_code=grpc.StatusCode.INTERNAL
    )
    assert not is_unreachable(answered)
    with answering() as up:
        assert server_went_away(up, dead, settle=0.2)
        assert not server_went_away(up, answered, settle=0.2)
    assert server_went_away(gone(), answered, settle=0.2)  # and then it stopped answering


def _world(tmp_path: Path) -> tuple[CheckpointCoordinator, int, Pipeline]:
    p = Pipeline("classify", max_parallelism=8)
    p.source("events", root="sources/events", schema="k string, v bigint")
    p.operator("up", inputs=["events"], key=["k"], parallelism=2)(lambda ctx: None)
    coordinator = CheckpointCoordinator(LocalObjectStore(tmp_path), "classify", CheckpointConfig())
    coordinator.register(p.spec())
    return coordinator, coordinator.trigger({"events": {"p0": 1}}).checkpoint_id, p


class _Session:
    """What connect_session returns, as far as fail() reads it (the server's address)."""

    def __init__(self, remote: str) -> None:
        self._batchpoint_remote = remote


def test_a_udfs_refused_call_over_connect_fails_the_operator_and_declines(
    tmp_path: Path,
) -> None:
    coordinator, cid, pipeline = _world(tmp_path / "store")
    pending = coordinator.get_pending(cid)
    assert pending is not None
    tasks = tuple(t for t in pending.expected_tasks if t.operator == "up")
    with answering() as up:
        env = TaskEnvironment(
            pipeline, coordinator, coordinator.store, _Session(up), StoreRef.of(tmp_path.as_uri()),  # type: ignore[arg-type]
            log=lambda line: None, remote=True,
        )  # fmt: skip
        report = OperatorRunReport(cid, "up", "a1")
        attempt = TaskAttempt(env, pending, pipeline.node("up"), tasks, "a1", report)  # type: ignore[arg-type]
        said = f"up failed in checkpoint {cid}: PythonException"
        with pytest.raises(OperatorFailed, match=said) as failed:
            fail(attempt, PythonException(UDF_REFUSED))
    assert job_status_of(failed.value) is JobStatus.OPERATOR_FAILED
    assert coordinator.progress(cid).declines  # the checkpoint aborts at once
    assert coordinator.get_pending(cid) is None


def test_a_real_client_of_a_closed_port_is_still_unreachable() -> None:
    """pyspark's own client and gRPC, a few quick retries: SparkUnreachable in one line."""
    remote = gone()
    code = (
        "import sys\n"
        "from batchpoint.spark import connect\n"
        "connect.CONNECT_RETRY_POLICY.update(max_retries=1, initial_backoff=10)\n"
        "try:\n"
        "    connect.connect_session(sys.argv[1], 'classify')\n"
        "except connect.SparkUnreachable as exc:\n"
        "    print('unreachable:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, remote],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"unreachable: Spark Connect server at {remote} is unreachable")


@pytest.mark.parametrize(
    "remote",
    ["sc://spark:15O02/;token=SECRETTOKEN42", "sc://[spark/;token=SECRETTOKEN42"],
)
def test_a_malformed_address_is_a_config_error_without_its_token(remote: str) -> None:
    """The backstop behind every caller's own check: connect.py parses the address before
    pyspark's client would, and a ValueError of it is a ConfigError."""
    with pytest.raises(ConfigError, match="is malformed") as failed:
        connect_session(remote, "classify")
    assert "SECRETTOKEN42" not in str(failed.value) and "\n" not in str(failed.value)
