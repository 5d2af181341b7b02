"""What a repair must not throw away: the fence of a cascade still under way (the
rebuilt record let triggers run on a pipeline the cascade holds), and a control record
a newer release wrote (rebuilt without --force, losing what that release recorded).
Both found by a reviewer."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.protocol import cascade as cascade_module
from batchpoint.protocol.cascade import CascadeRecord, CascadeStep, CascadeStore, finished
from batchpoint.protocol.control import CascadeFence
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.repair import RepairStatus
from batchpoint.storage.local import LocalObjectStore
from support.protocol_steps import complete, coordinator


def _held(tmp_path: Path) -> tuple[LocalObjectStore, CheckpointCoordinator, CascadeRecord]:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, num_retained=1, gc_grace=0)
    complete(c)
    complete(c)
    steps = (CascadeStep("upstream", 1, 0), CascadeStep(c.pipeline, 1, 0))
    record = CascadeRecord("casc1", "upstream", 1, steps, started_at=c.clock())
    assert CascadeStore(store).start(record)
    c.hold_for_cascade(record.fence())
    return store, c, record


@pytest.mark.parametrize("how", ["damaged", "lost", "forced"])
def test_a_repair_keeps_the_fence_of_a_cascade_under_way(tmp_path: Path, how: str) -> None:
    store, c, record = _held(tmp_path)
    if how == "damaged":
        store.put(c.control.key, b'{"kind": "pipeline-control", "vers')
    elif how == "lost":
        store.delete(c.control.key)
    else:  # readable, but off what the records prove: only --force replaces it
        c.control.update(lambda r: replace(r, retained=()))

    report = c.repair(force=how == "forced")
    assert report.status is RepairStatus.WRITTEN, report.reason
    assert c.control.load().cascade == record.fence()
    with pytest.raises(TriggerRefused, match="cascade casc1"):
        c.trigger({"src": {"p0": 9}})


def test_a_repair_names_no_fence_for_a_finished_cascade(tmp_path: Path) -> None:
    store, c, record = _held(tmp_path)
    CascadeStore(store).retire(finished(record, c.clock()))
    store.delete(c.control.key)

    assert c.repair().status is RepairStatus.WRITTEN
    assert c.control.load().cascade is None


def test_a_control_record_of_a_newer_release_is_replaced_only_when_forced(
    tmp_path: Path,
) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, num_retained=1, gc_grace=0)
    complete(c)
    complete(c)
    body = json.loads(store.get(c.control.key).data)
    body["version"] = body["version"] + 1  # what a newer release writes
    body["its_own_field"] = {"why": "a newer release holds this pipeline"}
    written = json.dumps(body).encode()
    store.put(c.control.key, written)

    findings = [str(f) for f in c.garbage_collector(grace=0).collect().findings]
    assert any("upgrade batchpoint" in f for f in findings), findings
    assert not any("batchpoint repair" in f for f in findings), findings

    refused = c.repair()
    assert refused.status is RepairStatus.REFUSED
    assert "newer batchpoint" in refused.reason and "--force" in refused.reason
    assert store.get(c.control.key).data == written

    assert c.repair(force=True).status is RepairStatus.WRITTEN
    assert c.control.load().head == 2


def test_a_fence_rebuilt_while_its_cascade_finished_is_lifted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repair read the cascade applying; the cascade then lifted its fences (none: the
    record was lost), finished and retired; repair wrote the fence it read, and nothing
    lifted it again (found by the reviewer of this change)."""
    store, c, record = _held(tmp_path)
    store.delete(c.control.key)
    cascades = CascadeStore(store)
    real = cascade_module.active_fence
    calls = []

    def finishing_meanwhile(given: CascadeStore, pipeline: str) -> CascadeFence | None:
        fence = real(given, pipeline)
        if not calls:  # the cascade's process, as ops/cascade._drive ends it
            c.release_cascade(record.cascade_id)
            cascades.retire(cascades.update(record.cascade_id, lambda r: finished(r, 1.0)))
        calls.append(fence)
        return fence

    monkeypatch.setattr(cascade_module, "active_fence", finishing_meanwhile)
    assert c.repair().status is RepairStatus.WRITTEN
    assert calls[0] == record.fence()  # the fence was read while the cascade applied
    assert c.control.load().cascade is None
    assert c.trigger({"src": {"p0": 9}}).checkpoint_id == 3
