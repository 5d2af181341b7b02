"""The candidate walk built alone, over suppliers (Flink's CheckpointRequestDecider is
tested so): the order, the reason each candidate is refused, and the refusals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from batchpoint.errors import CorruptRecord, RestoreRefused
from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.protocol.quarantine import QuarantineCause, QuarantineRecord
from batchpoint.protocol.restore_candidates import Examination, RestoreCandidates


class Suppliers:
    """The retained ids, quarantine marks, outcome records and file problems a walk sees."""

    def __init__(self, retained: Sequence[int]) -> None:
        self.retained = list(retained)
        self.held: dict[int, QuarantineRecord] = {}
        self.unreadable: set[int] = set()
        self.broken: dict[int, list[str]] = {}
        self.read: list[int] = []

    def outcome(self, cid: int) -> Any:
        self.read.append(cid)
        if cid in self.unreadable:
            raise CorruptRecord(f"chk-{cid}/outcome.json", "field 'x' should be int")
        return cid  # stands in for its CompletedCheckpoint

    def walk(self) -> RestoreCandidates:
        return RestoreCandidates(
            pipeline="p",
            retained=lambda: self.retained,
            held=self.held.get,
            outcome=self.outcome,
            files=lambda completed, _checksums, _progress: self.broken.get(completed, []),
        )


def test_latest_is_every_retained_id_newest_first_and_a_named_one_is_itself() -> None:
    s = Suppliers([3, 5, 4])
    assert s.walk().ids() == [5, 4, 3]
    assert s.walk().ids(4) == [4]


@pytest.mark.parametrize(
    ("retained", "named", "refusal"),
    [
        ([], None, "pipeline 'p' has no retained checkpoint"),
        ([1, 2], 7, "checkpoint 7 of pipeline 'p' is not retained (retained: [1, 2])"),
        ([], 7, "checkpoint 7 of pipeline 'p' is not retained (retained: none)"),
    ],
)
def test_the_walk_refuses_what_is_not_there(retained, named, refusal) -> None:
    with pytest.raises(RestoreRefused) as refused:
        Suppliers(retained).walk().ids(named)
    assert str(refused.value) == refusal


def test_each_candidate_gets_the_first_reason_it_fails_and_the_walk_stops_at_a_good_one() -> None:
    s = Suppliers([1, 2, 3, 4, 5])
    s.held[5] = QuarantineRecord(5, 0.0, QuarantineCause.RESTORE, "1 file(s) not intact")
    s.unreadable.add(4)
    s.broken[3] = ["a: missing", "b: size 1, recorded 2", "c: missing", "d: missing"]
    condemned: list[int] = []

    def condemn(examined: Examination) -> bool:
        condemned.append(examined.checkpoint_id)
        return examined.damaged

    chosen = s.walk().choose(None, checksums=True, condemn=condemn)
    assert chosen.target.checkpoint_id == 2 and chosen.target.restorable
    assert [f.checkpoint_id for f in chosen.skipped] == [5, 4, 3]
    held, unreadable, broken = (f.problem for f in chosen.skipped)
    assert held.startswith("quarantined since ") and "`batchpoint quarantine release 5`" in held
    assert held.endswith("first)")  # quarantined already: not quarantined again
    assert unreadable.startswith("unreadable record: ")
    assert broken.startswith("4 file(s) not intact: a: missing; b: size 1, recorded 2; c")
    assert broken.endswith(
        "(and 1 more); quarantined (release it with "
        "`batchpoint quarantine release 3` first once it is mended)"
    )
    assert condemned == [5, 4, 3]  # asked about each refused one, in order
    assert s.read == [4, 3, 2]  # a quarantined candidate is refused without a look


def test_a_named_candidate_is_refused_with_its_reason_and_none_restorable_lists_each() -> None:
    s = Suppliers([1, 2])
    s.broken = {1: ["x: missing"], 2: ["y: missing"]}
    with pytest.raises(RestoreRefused) as refused:
        s.walk().choose(2, checksums=False)
    assert str(refused.value) == (
        "checkpoint 2 of pipeline 'p' cannot be restored: 1 file(s) not intact: y: missing"
    )
    with pytest.raises(RestoreRefused) as refused:
        s.walk().choose(None, checksums=False)
    assert str(refused.value) == (
        "pipeline 'p': no retained checkpoint can be restored (checkpoint 2: 1 file(s) not "
        "intact: y: missing; checkpoint 1: 1 file(s) not intact: x: missing)"
    )


@pytest.mark.parametrize(
    ("given", "mode"),
    [
        (ClaimMode.CLAIM, ClaimMode.CLAIM),
        ("claim", ClaimMode.CLAIM),
        ("no_claim", ClaimMode.NO_CLAIM),
        ("no-claim", ClaimMode.NO_CLAIM),
        (True, ClaimMode.CLAIM),  # the older boolean flag
        (False, ClaimMode.NO_CLAIM),
        ("True", ClaimMode.CLAIM),  # ... as a rendered template
        ("false", ClaimMode.NO_CLAIM),
        (None, ClaimMode.NO_CLAIM),
        ("", ClaimMode.NO_CLAIM),
    ],
)
def test_a_claim_mode_is_read_from_every_spelling(given, mode) -> None:
    assert ClaimMode.of(given) is mode


def test_an_unknown_claim_mode_is_a_mistake() -> None:
    from batchpoint.errors import ConfigError

    with pytest.raises(ConfigError, match="expected claim or no_claim"):
        ClaimMode.of("legacy")
