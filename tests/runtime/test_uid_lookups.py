"""A node is found by its uid among the nodes of its own kind, and, once found, by that
uid (DESIGN.md invariant 17). Uids are unique per kind only: a source, an operator and
a sink may share one, and a name the code gives now may be another node's uid. Found by
a reviewer; each case was wrong before. The protocol's real records, acked with stand-in
files (support/fake_epochs.py), no Spark."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from batchpoint.errors import CheckpointError
from batchpoint.ops.dataframes import find_state_at, found_state_files
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.api import Pipeline, State
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.incremental import base_state_files, rewrite_reason
from batchpoint.storage import StoreRef
from support.fake_epochs import epoch

EVENTS = pa.schema([pa.field("user", pa.string()), pa.field("n", pa.int64())])


def _ref(tmp_path: Path) -> StoreRef:
    return StoreRef.of((tmp_path / "store").as_uri())


def _pipeline(
    operator: str = "totals",
    operator_uid: str | None = None,
    *,
    source_uid: str | None = None,
    sinks: tuple[str, ...] = ("out",),
    drop: str | None = None,
) -> Pipeline:
    p = Pipeline("pp", max_parallelism=4)
    p.source("events", root="in", schema=EVENTS, uid=source_uid)
    p.operator(
        operator, inputs=["events"], key=["user"], states={"s": State(EVENTS)}, uid=operator_uid
    )(lambda ctx: None)
    for sink in sinks:
        p.sink(sink, inputs=[operator], key=["user"])
    if drop is not None:
        p.drop_operator(drop)
    return p


@pytest.mark.parametrize(
    ("old", "new", "asked"),
    [
        # the name kept, a new uid (the plan's advice for a key change): the old uid's
        # state at a checkpoint before, by the name it had there
        (("balances", None), ("balances", "balances_v2"), "balances"),
        # the old uid now the new operator's name: found by the old name, then read by
        # its uid, which the code's operator of that name took
        (("old_agg", "agg"), ("agg", "agg_v2"), "old_agg"),
    ],
)
def test_a_state_of_an_older_checkpoint_is_read_by_the_uid_it_had_there(
    tmp_path: Path, old: tuple[str, str | None], new: tuple[str, str], asked: str
) -> None:
    ref = _ref(tmp_path)
    before = epoch(PipelineDriver(_pipeline(*old), ref, CheckpointConfig()))
    old_uid = old[1] or old[0]
    driver = PipelineDriver(_pipeline(*new, drop=old_uid), ref, CheckpointConfig())
    epoch(driver)
    completed, found = find_state_at(driver.coordinator, asked, "s", before)
    assert (found.operator_uid, found.state_uid) == (old_uid, "s")
    assert completed.checkpoint_id == before
    assert found_state_files(completed, found) == base_state_files(completed, old_uid, "s")
    # and the code's operator, at its own checkpoint, by its name
    _, now = find_state_at(driver.coordinator, new[0], "s", "latest")
    assert now.operator_uid == new[1]


def test_a_sink_added_with_an_operators_old_uid_starts_where_it_was_added(
    tmp_path: Path,
) -> None:
    """Its first publish walks back to the checkpoint that added it; an operator of the
    same uid in the checkpoints before did not make them the sink's."""
    ref = _ref(tmp_path)
    driver = PipelineDriver(_pipeline(), ref, CheckpointConfig(num_retained=10))
    for _ in range(3):
        epoch(driver)
    # the operator renamed keeping uid 'totals'; a sink 'totals' added
    code = _pipeline("agg", "totals", sinks=("out", "totals"))
    driver = PipelineDriver(code, ref, CheckpointConfig(num_retained=10))
    added = epoch(driver)
    manifest = driver.coordinator.sinks.manifest("totals")
    assert manifest is not None and sorted(manifest.epochs) == [added]
    kept = driver.coordinator.sinks.manifest("out")
    assert kept is not None and sorted(kept.epochs) == list(range(1, added + 1))


def test_an_operator_is_not_taken_for_a_source_of_its_uid(tmp_path: Path) -> None:
    """Sources come first in a topology: looked up among every node, a source of the
    operator's uid made every epoch a full rewrite ("placed its rows by key []"), and a
    base missing the state's files restored it empty instead of failing."""
    ref = _ref(tmp_path)
    driver = PipelineDriver(
        _pipeline("user_totals", "totals", source_uid="totals"), ref, CheckpointConfig()
    )
    base = driver.coordinator.completed.get(epoch(driver))
    assert rewrite_reason(base, "totals", ("user",), None) is None
    assert rewrite_reason(base, "totals", ("n",), None) is not None  # a real key change
    acks = tuple(
        replace(a, handles=tuple(h for h in a.handles if h.name != "state-s"))
        if a.operator_uid == "totals"
        else a
        for a in base.acks
    )
    with pytest.raises(CheckpointError, match="has no files of state 's'"):
        base_state_files(replace(base, acks=acks), "totals", "s")
