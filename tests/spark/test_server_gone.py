"""How a failed Spark Connect operation is told apart from a server that went away."""

from __future__ import annotations

from batchpoint.spark.session import server_answers, server_went_away
from support.connect_ports import answering, gone


class SparkConnectGrpcException(Exception):
    """Named like pyspark's: a server killed mid-RPC surfaces as one of these, with a
    status (INTERNAL, UNKNOWN, CANCELLED...) that names nothing about reachability."""


def test_an_rpc_failure_counts_as_gone_only_if_the_server_no_longer_answers() -> None:
    failure = SparkConnectGrpcException(
        "<_InactiveRpcError of RPC that terminated with:\n"
        '\tstatus = StatusCode.INTERNAL\n\tdetails = "Received RST_STREAM with error code 2"'
    )
    with answering() as up:
        assert server_answers(up)
        assert not server_went_away(up, failure, settle=0.5)
    down = gone()
    assert not server_answers(down)
    assert server_went_away(down, failure)


def test_a_python_error_is_never_the_server_going_away() -> None:
    down = gone()
    assert not server_went_away(down, ValueError("bad row"))
    assert server_went_away(down, RuntimeError("StatusCode.UNAVAILABLE: Connection refused"))


def test_a_stopping_servers_last_answers_count_as_gone_even_while_it_still_answers() -> None:
    stopping = SparkConnectGrpcException(
        "(java.lang.IllegalStateException) Cannot call methods on a stopped SparkContext."
    )
    with answering() as up:
        assert server_went_away(up, stopping)


def test_a_restarted_server_in_the_sessions_place_counts_as_gone_while_it_answers() -> None:
    """The restarted server reports a new server-side session; pyspark closes the client,
    whose later calls raise NO_ACTIVE_SESSION (the exception below is the one its closed
    client raises)."""
    from pyspark.errors.exceptions.connect import SparkConnectException

    closed_client = SparkConnectException(errorClass="NO_ACTIVE_SESSION", messageParameters={})
    changed = SparkConnectGrpcException(
        "[INVALID_HANDLE.SESSION_CHANGED] The handle 1f0e is invalid. The existing Spark "
        "server driver instance has restarted. Please reconnect."
    )
    with answering() as up:
        assert server_went_away(up, closed_client, settle=0.5)
        assert server_went_away(up, changed, settle=0.5)
