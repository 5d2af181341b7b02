"""Parallelism in code (issue 26): a deploy that changes an operator's parallelism is
honoured at the next checkpoint, which rescales its state by key group; a rescaling
restore's parallelism persists until the code changes; a max_parallelism change is
refused by the deploy plan, with the reason. Before, the stored parallelism always won
and the code's value was silently ignored."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from batchpoint.errors import SPEC_HINT, CorruptRecord, TriggerRefused
from batchpoint.runtime.driver import PipelineDriver, in_force
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.deploys import Deploys, reference


def _spec_with(run: Deploys, parallelism: int, max_parallelism: int = 16):
    return run.deploy(parallelism=parallelism, max_parallelism=max_parallelism)


def test_the_code_wins_only_when_it_changed_since_the_last_registration(tmp_path) -> None:
    """No Spark: the rule over recorded specs."""
    run = Deploys(None, StoreRef.of((tmp_path / "store").as_uri()))
    two = _spec_with(run, 2)
    registered = two.spec()
    assert registered.operator("aggregate").code_parallelism == 2
    three = _spec_with(run, 3)
    assert in_force(registered, three) == {"aggregate": 3}  # a deploy changed it
    rescaled = two.spec({"aggregate": 5})  # restore --parallelism 5, the code still 2
    assert rescaled.operator("aggregate").code_parallelism == 2
    assert in_force(rescaled, two) == {"aggregate": 5}  # the restore's value persists
    assert in_force(rescaled, three) == {"aggregate": 3}  # until the code changes
    # A spec registered before the code's value was recorded: its parallelism counts.
    old = registered.with_parallelism({"aggregate": 2})
    old = type(old).decode("spec.json", old.encode().replace(b'"code_parallelism":2,', b""))
    assert old.operator("aggregate").code_parallelism is None
    assert in_force(old, two) == {"aggregate": 2} and in_force(old, three) == {"aggregate": 3}


@pytest.mark.spark
@pytest.mark.slow
def test_a_deploy_rescales_by_key_group_at_the_next_epoch_exactly_once(spark, tmp_path) -> None:
    run = Deploys(spark, StoreRef.of((tmp_path / "store").as_uri()))

    def subtasks(result) -> set[int]:
        tasks = list(result.outcome.pending.expected_tasks)
        assert run.runner is not None
        head = run.runner.driver.coordinator.completed.get(result.checkpoint_id)
        files = {h.meta.get("parallelism") for h in head.handles if h.name == "state-totals"}
        assert len(files) == 1
        count = len([t for t in tasks if t.operator == "aggregate"])
        assert files == {count}, (files, count)
        return {count}

    def counted(upto: int) -> None:
        got = run.state()[["user", "n", "total"]]
        pd.testing.assert_frame_equal(got, reference(range(upto + 1)), check_dtype=False)

    run.deploy(parallelism=2)
    assert subtasks(run.epoch(0)) == {2}
    run.deploy(parallelism=3)  # the deploy: the next epoch runs at 3
    assert subtasks(run.epoch(1)) == {3}
    counted(1)
    assert run.runner is not None
    head = run.runner.driver.coordinator.head.get().checkpoint_id
    restore_checkpoint(run.runner.driver, head, {"aggregate": 1})
    assert subtasks(run.epoch(2)) == {1}, "a rescaling restore's parallelism must persist"
    run.deploy(parallelism=2)
    assert subtasks(run.epoch(3)) == {2}
    counted(3)

    run.deploy(parallelism=2, max_parallelism=32)
    with pytest.raises(TriggerRefused, match=r"max_parallelism 16 -> 32.*key-group count"):
        run.epoch(4)


def _keyed(name: str, parallelism: int, max_parallelism: int = 16, uid: str | None = None):
    import pyarrow as pa

    from batchpoint.runtime.api import Pipeline

    pipeline = Pipeline("clicks", max_parallelism=max_parallelism)
    pipeline.source("events", root="in", format="jsonl", schema="user string")
    schema = pa.schema([("user", pa.string()), ("n", pa.int64())])
    pipeline.operator(
        name, inputs=["events"], key=["user"], states={"totals": schema},
        parallelism=parallelism, uid=uid,
    )(lambda ctx: None)  # fmt: skip
    return pipeline


def test_spec_entries_are_matched_by_uid() -> None:
    """A node renamed with its uid kept is found by its uid, so a rescaling restore's
    parallelism survives the rename; a node given a new uid under its old name is
    another node (issue 36: it was matched by name). A spec registered before uids were
    recorded is matched by name, else by a uid that was the name."""
    rescaled = _keyed("aggregate", 2).spec({"aggregate": 5})  # restore --parallelism 5
    assert rescaled.operator("aggregate").uid == "aggregate"
    renamed = _keyed("totals", 2, uid="aggregate")
    assert in_force(rescaled, renamed) == {"totals": 5}
    assert in_force(rescaled, _keyed("totals", 3, uid="aggregate")) == {"totals": 3}
    assert in_force(rescaled, _keyed("totals", 2)) == {}  # another uid: another operator
    assert in_force(rescaled, _keyed("aggregate", 2, uid="aggregate2")) == {}
    legacy = type(rescaled).decode(
        "spec.json", rescaled.encode().replace(b',"uid":"aggregate"', b"")
    )
    assert legacy.operator("aggregate").uid is None
    assert in_force(legacy, _keyed("aggregate", 2, uid="aggregate2")) == {"aggregate": 5}
    assert in_force(legacy, renamed) == {"totals": 5}


def test_a_corrupt_spec_is_the_codes_until_the_next_checkpoint_registers_it(
    tmp_path, caplog
) -> None:
    """No Spark. spec.json holds no state and no evidence repair reads: a corrupt one
    leaves the code's parallelism in force (named in a warning), and the next trigger
    writes it again; commands that read it without the code say so."""
    driver = PipelineDriver(build_pipeline(), StoreRef.of((tmp_path / "store").as_uri()))
    fake_epochs.epoch(driver)
    key = driver.coordinator.layout.spec
    driver.store.put(key, b'{"kind": "pipeline-sp')
    with pytest.raises(CorruptRecord) as refused:
        driver.coordinator.stored_spec()
    assert SPEC_HINT in str(refused.value) and "repair" not in str(refused.value)

    with caplog.at_level(logging.WARNING, logger="batchpoint.runtime.driver"):
        assert driver.current_spec() == driver.pipeline.spec()
    assert f"record '{key}' is corrupt" in caplog.text and "registers the spec" in caplog.text
    second = fake_epochs.epoch(driver)
    assert driver.coordinator.stored_spec() == driver.pipeline.spec()
    assert driver.coordinator.head.get().checkpoint_id == second
