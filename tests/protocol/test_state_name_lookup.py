"""Which state a name means (protocol/state_names.py): by uid, by the code's name now, or
by a name an earlier checkpoint recorded, so a state renamed with its uid reads under any
of them as of any checkpoint; a name nobody had is an error naming what there is."""

from __future__ import annotations

import pytest

from batchpoint.errors import BatchpointError
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec
from batchpoint.protocol.state_names import find_state
from batchpoint.protocol.topology import NodeTopology, StateTopology, Topology

OPERATOR = OperatorKind.OPERATOR


def topology(operator: str, state: str, uid: str = "agg", state_uid: str = "tot") -> Topology:
    return Topology(
        (
            NodeTopology("events", "events", OperatorKind.SOURCE),
            NodeTopology(uid, operator, OPERATOR, states=(StateTopology(state_uid, state),)),
        )
    )


BEFORE = topology("aggregate", "totals")  # checkpoint 1
AFTER = topology("accounts", "sums")  # checkpoint 2, the rename deployed
DECLARED = [OperatorSpec("accounts", OPERATOR, states=("sums",), uid="agg")]


@pytest.mark.parametrize(
    ("operator", "state"),
    [("aggregate", "totals"), ("accounts", "sums"), ("agg", "tot"), ("accounts", "totals")],
)
@pytest.mark.parametrize("at", [BEFORE, AFTER], ids=["before", "after"])
def test_every_name_it_had_finds_the_same_state(operator: str, state: str, at: Topology) -> None:
    found = find_state(
        operator, state, at, checkpoint_id=1, declared=DECLARED, recorded=[BEFORE, AFTER]
    )
    assert (found.operator_uid, found.state_uid) == ("agg", "tot")
    # named as the checkpoint read recorded it
    assert found.label == ("aggregate/totals" if at is BEFORE else "accounts/sums")


def test_a_spec_registered_before_uids_were_recorded_matches_by_name() -> None:
    legacy = [OperatorSpec("aggregate", OPERATOR, states=("totals",))]
    at = topology("aggregate", "totals", uid="aggregate", state_uid="totals")
    found = find_state("aggregate", "totals", at, checkpoint_id=1, declared=legacy, recorded=[])
    assert (found.operator_uid, found.state_uid) == ("aggregate", "totals")


def test_the_code_now_wins_over_an_older_owner_of_the_name() -> None:
    """`aggregate` is a new operator's name now; an older one had it: the code's wins."""
    old = topology("aggregate", "totals", uid="old")
    new = topology("aggregate", "totals", uid="new")
    declared = [OperatorSpec("aggregate", OPERATOR, states=("totals",), uid="new")]
    found = find_state(
        "aggregate", "totals", new, checkpoint_id=2, declared=declared, recorded=[old, new]
    )
    assert found.operator_uid == "new"


@pytest.mark.parametrize(
    ("operator", "state", "message"),
    [
        ("nope", "totals", "no stateful operator 'nope' (stateful: aggregate"),
        ("aggregate", "nope", "operator 'aggregate' has no state 'nope' (states: totals)"),
    ],
)
def test_a_name_nobody_had_is_an_error_naming_what_there_is(operator, state, message) -> None:
    with pytest.raises(BatchpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
        find_state(operator, state, BEFORE, checkpoint_id=1, declared=DECLARED, recorded=[BEFORE])


def test_an_operator_added_after_the_checkpoint_has_no_state_in_it() -> None:
    declared = [*DECLARED, OperatorSpec("late", OPERATOR, states=("x",), uid="late")]
    with pytest.raises(BatchpointError, match="operator 'late' \\(uid late\\) has no state in"):
        find_state("late", "x", BEFORE, checkpoint_id=1, declared=declared, recorded=[BEFORE])
