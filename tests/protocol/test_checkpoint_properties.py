"""A pending checkpoint's properties are typed (Flink's CheckpointProperties): the
protocol's flags are fields, the user's own properties sit beside them, and the record
holds the same flat object as before it had types. The trigger takes the typed value:
a user's mapping becomes one where it enters (`CheckpointProperties.of`), which refuses
a flag of the wrong type, naming it, before anything is triggered; read, it is damage.
The control record's `cause` is a HeadMoveCause."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from batchpoint.errors import ConfigError, CorruptRecord
from batchpoint.protocol.checkpoint import CheckpointType, PendingCheckpoint
from batchpoint.protocol.control import ControlRecord, ControlUnreadable, HeadMoveCause
from batchpoint.protocol.head import HeadPointer
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.storage.base import ObjectStore
from support import protocol_steps as steps

FLAT = {
    "audit": True,
    "changelog_chain": 4,
    "retain_forever": False,
    "imported_from": "file:///srv/savepoints/a",
    "why": {"ticket": "OPS-12"},  # the user's own
    "user": "ops-bot",  # the user's own too, whatever its name
}


def test_flags_are_typed_and_the_whole_reads_as_the_flat_object() -> None:
    props = CheckpointProperties.of(FLAT)
    assert props.audit is True and props.changelog_chain == 4 and props.retain_forever is False
    assert props.is_imported and props.independent_of_base is None
    assert props.user == {"why": {"ticket": "OPS-12"}, "user": "ops-bot"}
    assert dict(props) == FLAT and props.to_json() == FLAT  # what user functions see
    assert "retain_forever" in props and "stop_pipeline" not in props  # set, even if false
    assert CheckpointProperties.of(props) is props
    assert dict(replace(props, audit=None)) == {k: v for k, v in FLAT.items() if k != "audit"}


def test_a_pending_record_stores_its_properties_as_the_flat_object(store: ObjectStore) -> None:
    c = steps.coordinator(store)
    pending = c.trigger({"src": {"p0": 1}}, properties=CheckpointProperties.of(FLAT))
    stored = json.loads(store.get(c.layout.active(pending.checkpoint_id)).data)["properties"]
    # the trigger adds the chain bound only when the caller did not fix one
    assert stored == FLAT
    assert c.get_pending(pending.checkpoint_id).properties == pending.properties


def test_a_flag_of_the_wrong_type_is_refused_where_the_mapping_enters() -> None:
    with pytest.raises(ConfigError, match="field 'changelog_chain' should be int, found 'x'"):
        CheckpointProperties.of({"changelog_chain": "x"})


def test_the_trigger_keeps_the_typed_properties_it_is_given(store: ObjectStore) -> None:
    """What the caller fixed reaches the pending record as it was given, typed; the
    trigger adds only what it decides (the changelog chain bound)."""
    c = steps.coordinator(store)
    given = CheckpointProperties(description="before the deploy", via="cli", stop_pipeline=False)
    pending = c.trigger(
        {"src": {"p0": 1}}, checkpoint_type=CheckpointType.SAVEPOINT, properties=given
    )
    assert isinstance(pending.properties, CheckpointProperties)
    assert replace(pending.properties, changelog_chain=None) == given
    assert pending.properties.stop_pipeline is False and not pending.properties.user
    stored = json.loads(store.get(c.layout.active(pending.checkpoint_id)).data)["properties"]
    assert stored == {**given.to_json(), "changelog_chain": pending.properties.changelog_chain}
    assert stored["description"] == "before the deploy" and stored["stop_pipeline"] is False
    untyped = c.trigger({"src": {"p0": 2}}, checkpoint_type=CheckpointType.SAVEPOINT)
    assert isinstance(untyped.properties, CheckpointProperties)


def test_the_trigger_fixes_the_changelog_floor_only_when_it_is_on(store: ObjectStore) -> None:
    """Every attempt plans its snapshots by the floor its pending record holds; a
    pipeline with the floor off writes records as they were before it existed."""
    c = steps.coordinator(store, changelog_min_bytes=4096, max_concurrent=3)
    assert c.trigger({"src": {"p0": 1}}).properties.changelog_min_bytes == 4096
    given = CheckpointProperties(changelog_min_bytes=0)  # the caller's own wins
    assert c.trigger({"src": {"p0": 2}}, properties=given).properties.changelog_min_bytes == 0
    off = steps.coordinator(store, max_concurrent=3).trigger({"src": {"p0": 3}})
    stored = json.loads(store.get(c.layout.active(off.checkpoint_id)).data)["properties"]
    assert off.properties.changelog_min_bytes is None and "changelog_min_bytes" not in stored


def test_a_stored_flag_of_the_wrong_type_is_damage_naming_it(store: ObjectStore) -> None:
    c = steps.coordinator(store)
    cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
    key = c.layout.active(cid)
    document = json.loads(store.get(key).data)
    document["properties"]["retain_forever"] = "yes"
    store.put(key, json.dumps(document).encode())
    with pytest.raises(CorruptRecord) as caught:
        c.get_pending(cid)
    assert caught.value.key == key
    assert caught.value.problem == "field 'properties.retain_forever' should be bool, found 'yes'"


def test_a_record_without_properties_has_none() -> None:
    pending = PendingCheckpoint(
        "p", 1, CheckpointType.CHECKPOINT, None, 0, {}, {}, (TaskId("op", 0),), 1.0, 2.0
    )
    document = json.loads(pending.encode())
    del document["properties"]
    old = PendingCheckpoint.decode("old", json.dumps(document).encode())
    assert old.properties == CheckpointProperties() and dict(old.properties) == {}
    assert not old.requires_audit


def test_the_control_record_cause_is_a_head_move_cause(store: ObjectStore) -> None:
    c = steps.coordinator(store)
    steps.complete(c)
    control = c.control.load()
    assert control.cause is HeadMoveCause.COMPLETED
    assert HeadPointer.of(control).cause is HeadMoveCause.COMPLETED
    restored = ControlRecord.decode("k", replace(control, cause=HeadMoveCause.RESTORE).encode())
    assert restored.cause is HeadMoveCause.RESTORE
    document = json.loads(store.get(c.layout.head).data)
    document["cause"] = "sideways"
    store.put(c.layout.head, json.dumps(document).encode())
    with pytest.raises(ControlUnreadable, match="bad cause 'sideways'"):
        c.control.load()
