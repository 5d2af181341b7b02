"""A restore moves the head and then rewinds every sink: a sink manifest that cannot be
read used to fail the rewind after the head had moved, leaving the pipeline restored
with its sinks not rewound and every trigger refused (invariant 10: a restore changes
everything or nothing; found by a reviewer). It is now refused before the head moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.errors import RestoreRefused
from batchpoint.storage.local import LocalObjectStore
from support.protocol_steps import complete, coordinator, sink_epochs
from support.restoring import restore


@pytest.mark.parametrize("damage", [b"{not json", b'{"kind": "sink-manifest", "version": 99}'])
def test_a_restore_with_an_unreadable_sink_manifest_changes_nothing(
    tmp_path: Path, damage: bytes
) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, num_retained=5)
    first, second = complete(c), complete(c)
    key = c.layout.sink_manifest("sink")
    intact = store.get(key).data
    store.put(key, damage)
    before = c.control_record()

    with pytest.raises(RestoreRefused, match=r"nothing was restored.*manifest") as refused:
        restore(c, first)
    assert key in str(refused.value) and "put back a good copy" in str(refused.value)
    assert c.control_record() == before
    assert c.control_record().head == second

    store.put(key, intact)  # put back: the same restore goes through
    assert restore(c, first).checkpoint_id == first
    assert sink_epochs(c) == [first]
