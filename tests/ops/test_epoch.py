"""The epoch's one shape, finalize-and-publish, and expire, on the payments pipeline
with fake tasks (no Spark)."""

from __future__ import annotations

import pytest

from batchpoint.ops.audit import trigger_audited
from batchpoint.ops.epoch import epoch_tasks, expire, finalize
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs


@pytest.fixture
def driver(tmp_path) -> PipelineDriver:
    return PipelineDriver(build_pipeline(), StoreRef.of((tmp_path / "store").as_uri()))


def test_the_epoch_is_every_operator_with_tasks_in_order_with_its_upstream():
    tasks = epoch_tasks(build_pipeline().spec())
    assert [t.operator for t in tasks] == ["dedup", "balances", "balances_table", "alerts"]
    assert tasks[0].upstream == ()  # reads a source only: starts after the trigger
    assert tasks[1].upstream == ("dedup",)


def test_finalize_says_why_it_waits_then_completes_and_publishes(driver):
    pending = driver.trigger()
    waiting = finalize(driver, pending.checkpoint_id)
    assert waiting.outcome is None and waiting.waiting == "acks"
    assert "still misses acks" in waiting.message

    fake_epochs.ack_all(driver, pending)
    done = finalize(driver, pending.checkpoint_id)
    assert done.completed and done.outcome.status is CheckpointStatus.COMPLETED
    assert sorted(done.published) == ["alerts@1", "balances_table@1"]
    again = finalize(driver, pending.checkpoint_id)  # idempotent: nothing new to publish
    assert again.completed and again.published == []


def test_an_audited_checkpoint_waits_for_its_audit(driver):
    pending = trigger_audited(driver)
    fake_epochs.ack_all(driver, pending)
    done = finalize(driver, pending.checkpoint_id)
    assert done.outcome is None and done.waiting == "audit"
    assert "only its audit task may complete it" in done.message


def test_expire_names_the_missing_tasks_in_the_coordinators_words(tmp_path):
    driver = PipelineDriver(
        build_pipeline(),
        StoreRef.of((tmp_path / "store").as_uri()),
        CheckpointConfig(timeout=30),
    )
    pending = driver.trigger()
    outcome = expire(driver.coordinator, pending.checkpoint_id)
    assert outcome.reason is CheckpointFailureReason.EXPIRED
    assert outcome.message.startswith("not acknowledged within 30s by: dedup#0")
    assert outcome.message.endswith("more")  # more than five tasks missing
    settled = expire(driver.coordinator, pending.checkpoint_id)  # a settled one stays
    assert (settled.status, settled.message) == (outcome.status, outcome.message)
