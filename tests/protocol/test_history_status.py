"""One status vocabulary: `history_status` over every combination of what the records
can say (the outcome, where the checkpoint stands, a quarantine mark, whether the
control record could be read), and the statistics of real records, including a
checkpoint aborted at its trigger, whose trigger time is its own (no negative duration)."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest

from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.history_status import HistoryStatus, Standing, history_status
from support.cli import payments_driver
from support.status_history import EXPECTED, every_status

CID = 7
PLACES = ("head", "retained", "neither")

#: A completed checkpoint's status for (where it stands, quarantined, control readable).
COMPLETED = {
    ("head", False, True): "head",
    ("retained", False, True): "retained",
    ("neither", False, True): "discarded",
    ("head", True, True): "quarantined",
    ("retained", True, True): "quarantined",
    ("neither", True, True): "quarantined",
    # the control record could not be read: where it stands is unknown
    ("head", False, False): "completed",
    ("retained", False, False): "completed",
    ("neither", False, False): "completed",
    ("head", True, False): "quarantined",
    ("retained", True, False): "quarantined",
    ("neither", True, False): "quarantined",
}
#: Any other outcome says what it is whatever else holds.
NOT_COMPLETED = {
    CheckpointStatus.PENDING: "pending",
    CheckpointStatus.ABORTED: "aborted",
    CheckpointStatus.UNREADABLE: "unreadable",
}


def standing(place: str, quarantined: bool, known: bool) -> Standing:
    marks = frozenset({CID} if quarantined else set())
    if not known:
        return Standing.unknown(marks)
    head = CID if place == "head" else 1
    retained = frozenset({1} | ({CID} if place in ("head", "retained") else set()))
    return Standing(head, retained, marks)


COMBINATIONS = list(itertools.product(CheckpointStatus, PLACES, (False, True), (False, True)))


@pytest.mark.parametrize(("outcome", "place", "quarantined", "known"), COMBINATIONS)
def test_every_combination_of_records_has_one_status(
    outcome: CheckpointStatus, place: str, quarantined: bool, known: bool
) -> None:
    shown = history_status(CID, outcome, standing(place, quarantined, known))
    if outcome is CheckpointStatus.COMPLETED:
        assert shown.label == COMPLETED[place, quarantined, known]
    else:
        assert shown.label == NOT_COMPLETED[outcome]


def test_the_vocabulary_is_defined_once_and_every_word_is_reachable() -> None:
    reached = {history_status(CID, o, standing(p, q, k)) for o, p, q, k in COMBINATIONS}
    assert reached == set(HistoryStatus)
    labels = [s.label for s in HistoryStatus]
    assert len(set(labels)) == len(labels) and all(s.meaning for s in HistoryStatus)
    assert {s for s in HistoryStatus if s.restorable} == {
        HistoryStatus.HEAD,
        HistoryStatus.RETAINED,
    }
    assert all(HistoryStatus.of_label(s.label) is s for s in HistoryStatus)


@pytest.fixture
def history():
    driver = payments_driver(Path(tempfile.mkdtemp()).as_uri())
    every_status(driver)
    return driver.coordinator


def test_the_statistics_of_real_records_carry_their_status(history) -> None:
    listed = history.stats.history()
    assert {s.checkpoint_id: s.shown_status.label for s in listed} == EXPECTED
    page = history.stats.page(limit=50).checkpoints
    assert {s.checkpoint_id: s.to_json()["status"] for s in page} == EXPECTED
    outcomes = {s.checkpoint_id: s.to_json()["outcome"] for s in page}
    assert outcomes[2] == outcomes[6] == "COMPLETED" and outcomes[7] == "ABORTED"


def test_a_checkpoint_aborted_at_its_trigger_has_its_own_trigger_time(history) -> None:
    stats, _ = history.stats.checkpoint(7)
    pending = history.get_checkpoint(7)
    assert stats.trigger_time is not None and stats.end_time is not None
    assert stats.trigger_time < pending.deadline  # not its deadline
    assert 0 <= stats.duration_s < 60, stats
    assert stats.trigger_time >= history.stats.checkpoint(6)[0].end_time


def test_an_abort_with_no_trigger_time_recorded_shows_none_and_no_duration(history) -> None:
    # An admission whose pending record was never written (a trigger that died): the
    # outcome's trigger record is a placeholder, as every release before this one wrote
    # for an abort at the trigger too. Its trigger time is unknown, never its deadline.
    entry = history.checkpoint_trigger.admit_import(history.clock())
    history.abort(entry.checkpoint_id, CheckpointFailureReason.EXPIRED, "its trigger died")
    stats, _ = history.stats.checkpoint(entry.checkpoint_id)
    placeholder = history.get_checkpoint(entry.checkpoint_id)
    assert placeholder.trigger_time == placeholder.deadline
    assert (stats.trigger_time, stats.duration_s) == (None, None)
    assert stats.to_json()["duration_s"] is None and stats.shown_status.label == "aborted"


def test_with_the_control_record_unreadable_a_completed_one_reads_completed(history) -> None:
    history.store.put(history.control.key, b"{not json")
    shown = {s.checkpoint_id: s.shown_status.label for s in history.stats.history()}
    assert shown == {**EXPECTED, 2: "completed", 3: "completed", 4: "completed", 6: "completed"}
