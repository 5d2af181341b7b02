"""Every decode error of a stored record is a RecordError (CorruptRecord, or for the
control record ControlUnreadable) that names the record and `batchpoint repair`: a field
of the wrong shape is damage like a truncated file, never a raw TypeError or ValueError
out of a read (issue 24, reproduction 4). Every test runs on the local store and on
SeaweedFS."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from batchpoint.errors import CorruptRecord
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.head import HeadMoveCause, HeadPointer
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.storage.base import ObjectStore
from support.protocol_steps import ack_all, complete, coordinator


def _edit(store: ObjectStore, key: str, change: Callable[[dict], None]) -> None:
    document = json.loads(store.get(key).data)
    change(document)
    store.put(key, json.dumps(document).encode())


Read = Callable[[], object]


def _outcome_ack_no_object(c: CheckpointCoordinator, ids: dict[str, int]) -> tuple[str, Read]:
    key = c.layout.outcome(ids["done"])
    _edit(c.store, key, lambda d: d.update(acks=[42]))
    return key, lambda: c.get_outcome(ids["done"])


def _ack_metrics_text(c: CheckpointCoordinator, ids: dict[str, int]) -> tuple[str, Read]:
    key = next(i.key for i in c.store.list(c.layout.acks_prefix(ids["open"])))
    _edit(c.store, key, lambda d: d.update(metrics={"sync_ms": "fast"}))
    return key, lambda: c.acks(ids["open"])


def _pending_properties_list(c: CheckpointCoordinator, ids: dict[str, int]) -> tuple[str, Read]:
    key = c.layout.active(ids["open"])
    _edit(c.store, key, lambda d: d.update(properties=["retain_forever"]))
    return key, lambda: c.get_pending(ids["open"])


def _manifest_file_no_object(c: CheckpointCoordinator, ids: dict[str, int]) -> tuple[str, Read]:
    key = c.layout.sink_manifest("sink")
    _edit(c.store, key, lambda d: d["epochs"][0].update(files=[7]))
    return key, lambda: SinkPublisher(c.store, c.layout).manifest("sink")


def _head_pointer_unknown_cause(c: CheckpointCoordinator, ids: dict[str, int]) -> tuple[str, Read]:
    old = HeadPointer(ids["done"], 0, 0.0, HeadMoveCause.COMPLETED)  # the old layout's record
    c.store.put(c.layout.head, old.encode())
    _edit(c.store, c.layout.head, lambda d: d.update(cause="sideways"))
    return c.layout.head, c.head.get


def _handle_rows_text(c: CheckpointCoordinator, ids: dict[str, int]) -> tuple[str, Read]:
    key = next(i.key for i in c.store.list(c.layout.acks_prefix(ids["open"])))
    _edit(c.store, key, lambda d: d["handles"][0].update(rows="many"))
    return key, lambda: c.progress(ids["open"])


READS: dict[str, Callable[[CheckpointCoordinator, dict[str, int]], tuple[str, Read]]] = {
    "outcome: an ack that is no object": _outcome_ack_no_object,
    "ack: metrics as text": _ack_metrics_text,
    "pending record: properties as a list": _pending_properties_list,
    "sink manifest: a file that is no object": _manifest_file_no_object,
    "old head pointer: an unknown cause": _head_pointer_unknown_cause,
    "ack: a file's rows as text": _handle_rows_text,
}


@pytest.mark.parametrize("read", list(READS))
def test_every_decode_error_is_a_record_error_naming_repair(store: ObjectStore, read: str) -> None:
    c = coordinator(store)
    done = complete(c)
    open_one = c.trigger({"src": {"p0": 2}}).checkpoint_id
    ack_all(c, open_one)
    key, reader = READS[read](c, {"done": done, "open": open_one})
    with pytest.raises((CorruptRecord, ControlUnreadable)) as caught:
        reader()
    message = str(caught.value)
    assert f"{key}" in message and "batchpoint repair" in message, message
