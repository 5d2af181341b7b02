"""Which server session and scheduler pool an operator's Connect client takes: its
pipeline's, the same for every operator and client of it, and a pool per pipeline."""

from __future__ import annotations

from batchpoint.spark.connect import pipeline_pool, pipeline_session_id


def test_a_pipeline_has_one_stable_session_per_server() -> None:
    remote = "sc://spark:15002"
    payments = pipeline_session_id("payments", remote)
    assert payments == pipeline_session_id("payments", "sc://spark:15002/;user_agent=x")
    others = {pipeline_session_id("orders", remote), pipeline_session_id("payments", "sc://x:1")}
    assert payments not in others and len(others) == 2


def test_pools_are_per_pipeline_with_safe_names() -> None:
    assert pipeline_pool("payments") == "batchpoint.payments"
    assert pipeline_pool("payments") != pipeline_pool("orders")
    assert pipeline_pool("my pipe/x") == "batchpoint.my_pipe_x"
