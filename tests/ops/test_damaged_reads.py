"""The read-only views under damage (invariant 11: damage is a finding, never a blocker
and never silent): a record that is corrupt, or of a newer release's version, is a
finding beside what could be read, on a real local store holding the payments
history with a checkpoint in every status (support/status_history.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from batchpoint.errors import CheckpointNotFound
from batchpoint.ops.inspect import list_checkpoints, pipeline_stats, show_checkpoint
from batchpoint.ops.overview import checkpoint_page, history_page, pipeline_overview
from batchpoint.ops.verify import verify_files, verify_target
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.quality.report import CandidateReport, GateMode
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.settings import Settings
from support.status_history import every_status

#: The history's checkpoints (1..8) and its head (support/status_history.EXPECTED).
IDS = list(range(1, 9))
HEAD = 6


def garbage(data: bytes) -> bytes:
    return b"{garbage"


def newer(data: bytes) -> bytes:
    """The record as a newer release would write it: a version this one cannot read."""
    body = json.loads(data)
    body["version"] = 999
    return json.dumps(body).encode()


DAMAGE: dict[str, Callable[[bytes], bytes]] = {"garbage": garbage, "newer version": newer}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with the payments pipeline's every_status history (written once)."""
    from demo.payments import pipeline

    root = tmp_path_factory.mktemp("history") / "root"
    settings = Settings(root.as_uri())
    every_status(PipelineDriver(pipeline, settings.store_ref, settings.checkpoint))
    return root


@pytest.fixture
def root(history: Path, tmp_path: Path) -> Path:
    """A copy of the history that a test may damage."""
    copy = tmp_path / "root"
    shutil.copytree(history, copy)
    return copy


def coordinator(root: Path) -> CheckpointCoordinator:
    settings = Settings(root.as_uri())
    return CheckpointCoordinator(settings.store_ref.open(), "payments", settings.checkpoint)


def damage(root: Path, record: str, how: Callable[[bytes], bytes]) -> str:
    """Rewrite the pipeline's `record` as `how` makes it; its key (what a finding names)."""
    path = root / "pipelines/payments" / record
    path.write_bytes(how(path.read_bytes()))
    return f"pipelines/payments/{record}"


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_an_unreadable_failure_counter_is_a_finding_of_the_overview(root, how):
    key = damage(root, "failures.json", DAMAGE[how])
    c = coordinator(root)
    first, found = history_page(c, None, 20)
    assert [s.checkpoint_id for s in first.checkpoints] == IDS[::-1] and found == []

    overview = pipeline_overview(c, c.store, first)
    assert overview.status == "running"  # from the control record, not "unreadable"
    assert overview.head == HEAD and overview.latest_checkpoint == HEAD
    assert overview.consecutive_failures == 0
    assert any(key in f for f in overview.findings), overview.findings


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_an_unreadable_quality_report_is_a_finding_of_the_checkpoint_page(root, how):
    store = Settings(root.as_uri()).store_ref.open()
    report = CandidateReport("payments", 4, "checkpoint", GateMode.RESTORE, 1.7e9).encode()
    key = PipelineLayout("payments").quality_report(4)
    store.put(key, DAMAGE[how](report))

    page = checkpoint_page(coordinator(root), 4)
    assert page.report is None
    assert page.detail.stats.status is CheckpointStatus.COMPLETED and page.files
    (finding,) = page.findings
    assert finding.startswith("the quality-gate report cannot be read") and key in finding
    body = page.to_json()
    assert body["quality_report"] is None and body["findings"] == [finding]


def test_a_readable_quality_report_is_shown_without_findings(root):
    store = Settings(root.as_uri()).store_ref.open()
    report = CandidateReport("payments", 4, "checkpoint", GateMode.RESTORE, 1.7e9)
    store.put(PipelineLayout("payments").quality_report(4), report.encode())
    page = checkpoint_page(coordinator(root), 4)
    assert page.report is not None and page.findings == []


def test_a_head_whose_outcome_is_lost_is_shown_unreadable_and_fails_verify(root):
    (root / f"pipelines/payments/checkpoints/chk-{HEAD:010d}/outcome.json").unlink()
    c = coordinator(root)

    detail = show_checkpoint(c, HEAD)
    assert detail.stats.status is CheckpointStatus.UNREADABLE and detail.tasks == []
    assert "is the head in the control record" in detail.stats.failure_message
    with pytest.raises(CheckpointNotFound, match="no checkpoint 99"):
        show_checkpoint(c, 99)  # an id never taken is still the user's mistake

    for typed in (str(HEAD), "head"):
        assert verify_target(c, typed) == HEAD
    check = verify_files(c, HEAD)
    assert not check.passed
    assert check.problems == [detail.stats.failure_message]
    with pytest.raises(CheckpointNotFound, match="no checkpoint 99"):
        verify_target(c, "99")


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_an_unreadable_control_record_is_a_finding_of_the_list(root, how):
    key = damage(root, "head.json", DAMAGE[how])
    listed = list_checkpoints(coordinator(root))
    assert [s.checkpoint_id for s in listed.checkpoints] == IDS
    assert listed.head is None and listed.retained == []
    assert listed.findings and all(key in f for f in listed.findings), listed.findings
    assert listed.to_json()["findings"] == listed.findings


@pytest.mark.parametrize("record", ["ids.json", "failures.json"])
@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_an_unreadable_counter_is_a_finding_of_the_stats(root, record, how):
    key = damage(root, record, DAMAGE[how])
    stats = pipeline_stats(coordinator(root))
    assert stats.summary.count == len(IDS) and stats.summary.completed == 6
    assert stats.status == "RUNNING"
    assert len(stats.findings) == 1 and key in stats.findings[0], stats.findings
    assert stats.to_json()["findings"] == stats.findings


def test_intact_records_give_no_findings(root):
    c = coordinator(root)
    assert list_checkpoints(c).findings == [] and pipeline_stats(c).findings == []
    assert list_checkpoints(c).head == HEAD
