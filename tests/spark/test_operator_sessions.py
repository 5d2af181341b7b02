"""Which server session and scheduler pool an operator's Connect client takes (issue 28):
one session per operator, the same for every client of it, and a pool of its own."""

from __future__ import annotations

from batchpoint.spark.connect import operator_pool, operator_session_id, pipeline_session_id


def test_each_operator_of_a_pipeline_has_its_own_stable_session() -> None:
    remote = "sc://spark:15002"
    dedup = operator_session_id("payments", "dedup", remote)
    assert dedup == operator_session_id("payments", "dedup", "sc://spark:15002/;user_agent=x")
    others = {
        operator_session_id("payments", "balances", remote),
        operator_session_id("orders", "dedup", remote),
        operator_session_id("payments", "dedup", "sc://other:15002"),
        pipeline_session_id("payments", remote),
    }
    assert dedup not in others and len(others) == 4


def test_pools_are_per_pipeline_and_operator_and_safe_names() -> None:
    assert operator_pool("payments", "dedup") == "batchpoint.payments.dedup"
    assert operator_pool("payments", "dedup") != operator_pool("orders", "dedup")
    assert operator_pool("my pipe", "a/b") == "batchpoint.my_pipe.a_b"
