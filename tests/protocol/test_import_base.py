"""Imports are not bases (issue 36): a savepoint folder being imported is admitted like
a savepoint, but its state does not continue the pipeline's timeline. No trigger builds
on it, pending or completed, and no completion (its own, or that of a checkpoint built on
it) moves the head onto it: only a restore does, with a new generation and the sinks
rewound.

Each interleaving is forced, never slept into: the import is paused at one of its storage
calls (support/hooks.py) while a scheduled run takes its steps. Runs on every backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from batchpoint.protocol import decider, trigger
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
)
from batchpoint.protocol.control import ControlRecord
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.savepoints import SavepointLocation
from batchpoint.storage.base import ObjectStore
from support.hooks import HookStore, once
from support.protocol_steps import SINKS, ack_all, complete, coordinator, sink_epochs
from support.restoring import restore

SAVEPOINT = CheckpointType.SAVEPOINT

#: Where the import is paused: after its admission (before its pending record), or
#: with its record and files written (before its first ack).
PAUSES = {
    "after-admission": lambda c, cid: (
        lambda op, key: op == "create" and key == c.layout.active(cid)
    ),
    "before-acks": lambda c, cid: (
        lambda op, key: op == "create" and key.startswith(c.layout.acks_prefix(cid))
    ),
}


@dataclass
class Pipeline:
    """A pipeline with a savepoint exported and a checkpoint after it (the head), on a
    store whose calls can pause an actor."""

    c: CheckpointCoordinator
    head: int
    folder: SavepointLocation
    hook: list[Callable[[str, str], None]] = field(default_factory=list)

    def pause_import(self, pause: str, action: Callable[[], None]) -> Callable:
        """Run `action` while the next import is paused at `pause`."""
        importing = self.c.ids.peek()
        hook = once(action, PAUSES[pause](self.c, importing))
        self.hook[:] = [hook]
        return hook


def pipeline(store: ObjectStore) -> Pipeline:
    hook: list[Callable[[str, str], None]] = []
    c = coordinator(HookStore(store, lambda op, key: hook[0](op, key) if hook else None))
    complete(c)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    head = complete(c)
    folder = SavepointLocation(store, "savepoints/sp")
    c.savepoints.export(savepoint, folder)
    return Pipeline(c, head, folder, hook)


def scheduled_trigger(c: CheckpointCoordinator, p0: int) -> int:
    return c.trigger({"src": {"p0": p0}}).checkpoint_id


def stop_with_savepoint(c: CheckpointCoordinator, p0: int) -> int:
    stop = CheckpointProperties(stop_pipeline=True)
    return c.trigger({"src": {"p0": p0}}, checkpoint_type=SAVEPOINT, properties=stop).checkpoint_id


def finish(c: CheckpointCoordinator, cid: int) -> CheckpointOutcome:
    """The scheduled run's finalize task, then its publish."""
    outcome = c.try_finalize(cid)
    assert outcome is not None, f"checkpoint {cid} is still waiting (for its base?)"
    if outcome.status is CheckpointStatus.COMPLETED:
        c.notify_checkpoint_complete(cid, SINKS)
    return outcome


def assert_on_the_timeline(p: Pipeline, cid: int, imported: int) -> None:
    """The scheduled checkpoint built on the head and moved it; the import is retained
    as a savepoint, neither the head nor published."""
    c = p.c
    base = c.get_checkpoint(cid).base_checkpoint_id
    assert base == p.head, (
        f"checkpoint {cid} built on {base} (the import is {imported}), not on the head {p.head}"
    )
    outcome = c.get_outcome(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED, (
        f"checkpoint {cid}: {outcome and (outcome.status, outcome.message)}"
    )
    control = c.control.load()
    assert control.head == cid, f"head {control.head}, expected {cid} (the import is {imported})"
    kept = control.retained_entry(imported)
    assert kept is not None and kept.type is CheckpointType.SAVEPOINT
    assert sink_epochs(c)[-2:] == [p.head, cid]


def assert_restore_to_the_import_works(p: Pipeline, imported: int) -> None:
    """The restore to the import: a new generation, the head on it, the sinks rewound
    to it, and the next checkpoint builds on it."""
    c = p.c
    generation = c.control.load().restore_generation
    restore(c, imported)
    control = c.control.load()
    assert (control.head, control.restore_generation) == (imported, generation + 1)
    assert control.restore is not None and control.restore.sinks_rewound
    assert sink_epochs(c)[-1] == imported  # the epochs after its savepoint are gone
    after = complete(c)
    assert c.get_checkpoint(after).base_checkpoint_id == imported
    assert c.control.load().head == after
    assert sink_epochs(c)[-2:] == [imported, after]


@pytest.mark.parametrize("pause", list(PAUSES))
@pytest.mark.parametrize("completes", ["import-first", "checkpoint-first"])
@pytest.mark.parametrize("admitted", ["import-first", "checkpoint-first"])
def test_a_scheduled_checkpoint_racing_an_import_stays_on_the_timeline(
    store: ObjectStore, admitted: str, completes: str, pause: str
) -> None:
    p = pipeline(store)
    c = p.c
    run: dict[str, int] = {}
    if admitted == "checkpoint-first":
        run["id"] = scheduled_trigger(c, 2)

    def scheduled_run() -> None:
        if "id" not in run:
            run["id"] = scheduled_trigger(c, 2)
        ack_all(c, run["id"])
        if completes == "checkpoint-first":
            finish(c, run["id"])

    hook = p.pause_import(pause, scheduled_run)
    imported = c.savepoints.import_folder(p.folder).checkpoint_id
    assert hook.fired
    cid = run["id"]
    if completes == "import-first":
        finish(c, cid)
    assert_on_the_timeline(p, cid, imported)
    assert_restore_to_the_import_works(p, imported)


@pytest.mark.parametrize("completes", ["import-first", "savepoint-first"])
def test_a_stop_with_savepoint_racing_an_import_stops_on_the_timeline(
    store: ObjectStore, completes: str
) -> None:
    p = pipeline(store)
    c = p.c
    run: dict[str, int] = {}

    def stopping_run() -> None:
        run["id"] = stop_with_savepoint(c, 2)
        ack_all(c, run["id"])
        if completes == "savepoint-first":
            finish(c, run["id"])

    p.pause_import("before-acks", stopping_run)
    imported = c.savepoints.import_folder(p.folder).checkpoint_id  # admitted while stopped
    cid = run["id"]
    if completes == "import-first":
        finish(c, cid)
    assert_on_the_timeline(p, cid, imported)
    stopped = c.stopped()
    assert stopped is not None and stopped.savepoint == cid
    assert_restore_to_the_import_works(p, imported)  # a restore starts it again


def test_a_trigger_after_a_completed_import_builds_on_the_head(store: ObjectStore) -> None:
    p = pipeline(store)
    c = p.c
    imported = c.savepoints.import_folder(p.folder).checkpoint_id
    assert c.control.load().head == p.head
    cid = scheduled_trigger(c, 2)
    ack_all(c, cid)
    assert finish(c, cid).status is CheckpointStatus.COMPLETED
    assert_on_the_timeline(p, cid, imported)
    assert_restore_to_the_import_works(p, imported)


def test_an_import_pending_entry_is_marked_and_never_a_base(store: ObjectStore) -> None:
    p = pipeline(store)
    c = p.c
    seen: dict[str, ControlRecord] = {}
    p.pause_import("before-acks", lambda: seen.setdefault("control", c.control.load()))
    imported = c.savepoints.import_folder(p.folder).checkpoint_id
    entry = seen["control"].pending_entry(imported)
    assert entry is not None and entry.imported and entry.base is None
    assert decider.base_of(seen["control"]) == p.head
    assert c.control.load().pending == ()  # settled: retained, the mark gone with it


def _old_base_of(control: ControlRecord) -> int | None:
    """The base rule before issue 36: the newest admitted checkpoint, imports included."""
    newer = [p for p in control.current_pending() if p.checkpoint_id > (control.head or 0)]
    return newer[-1].checkpoint_id if newer else control.head


@pytest.mark.parametrize("completes", ["import-first", "checkpoint-first"])
def test_a_checkpoint_an_older_release_built_on_an_import_never_becomes_the_head(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch, completes: str
) -> None:
    """An older release admitted a checkpoint on a pending import (its control record
    and pending record say so): this release aborts it at its finalize, whichever of the
    two completes first, and the head stays where it was until a restore."""
    p = pipeline(store)
    c = p.c
    run: dict[str, int] = {}

    def older_release_run() -> None:
        with monkeypatch.context() as m:
            m.setattr(decider, "base_of", _old_base_of)
            m.setattr(trigger, "base_of", _old_base_of)
            run["id"] = scheduled_trigger(c, 2)
        ack_all(c, run["id"])
        if completes == "checkpoint-first":
            finish(c, run["id"])

    p.pause_import("before-acks", older_release_run)
    imported = c.savepoints.import_folder(p.folder).checkpoint_id
    cid = run["id"]
    assert c.get_checkpoint(cid).base_checkpoint_id == imported  # as the old rule chose
    outcome = finish(c, cid)
    assert outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.BASE_ABORTED
    assert f"base checkpoint {imported} is an imported savepoint" in outcome.message
    control = c.control.load()
    assert control.head == p.head
    assert control.retained_entry(imported) is not None
    assert cid not in sink_epochs(c)
    assert_restore_to_the_import_works(p, imported)
