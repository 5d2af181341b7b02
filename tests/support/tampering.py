"""Tampering with stored records of the payments pipeline, as a damaged store would show."""

from __future__ import annotations

import json
from collections.abc import Callable

from batchpoint.protocol.checkpoint import SHARED_FROM_META
from batchpoint.storage.base import ObjectStore
from support.payments import LAYOUT


def rewrite_outcome(store: ObjectStore, checkpoint_id: int, change: Callable[[dict], None]) -> None:
    key = LAYOUT.outcome(checkpoint_id)
    document = json.loads(store.get(key).data)
    change(document)
    store.put(key, json.dumps(document).encode())


def state_handles(store: ObjectStore, checkpoint_id: int, operator: str, state: str) -> list[dict]:
    """The state's files the checkpoint wrote itself, in ack order: damage to one of
    them is damage to this checkpoint alone (a file it shares with its base would
    damage the base too)."""
    document = json.loads(store.get(LAYOUT.outcome(checkpoint_id)).data)
    return [
        h
        for ack in document["acks"]
        if ack["task"].startswith(f"{operator}#")
        for h in ack["handles"]
        if h["name"] == f"state-{state}" and SHARED_FROM_META not in h
    ]
