"""Records as another release wrote them: a completed checkpoint's outcome and acks
rewritten in the version-1 layout (no topology, no operator uids: what the release
before uids wrote, see tests/data/make_records_v1_fixture.py), or stamped with a version
no release knows (a newer writer's, which must be refused, never misread)."""

from __future__ import annotations

import json
from typing import Any

from batchpoint.protocol.layout import PipelineLayout, checkpoint_dir_name
from batchpoint.storage.base import ObjectStore
from support.deploy_model.version import PIPELINE

FUTURE_VERSION = 99


def _records(store: ObjectStore, checkpoint_id: int) -> list[str]:
    folder = f"{PipelineLayout(PIPELINE).root}checkpoints/{checkpoint_dir_name(checkpoint_id)}/"
    keys = [folder + "outcome.json"]
    keys += [o.key for o in store.list(folder + "acks/") if o.key.endswith(".json")]
    return keys


def _rewrite(store: ObjectStore, key: str, change: Any) -> None:
    document = json.loads(store.get(key).data)
    change(document)
    store.put(key, json.dumps(document, sort_keys=True, separators=(",", ":")).encode())


def _v1_ack(ack: dict[str, Any]) -> None:
    ack["version"] = 1
    ack.pop("operator_uid", None)


def _v1_outcome(outcome: dict[str, Any]) -> None:
    outcome["version"] = 1
    outcome["checkpoint"].pop("topology", None)
    for ack in outcome.get("acks") or ():
        ack.pop("operator_uid", None)


def as_version_1(store: ObjectStore, checkpoint_id: int) -> None:
    """The checkpoint's outcome and acks as a release before uids wrote them."""
    for key in _records(store, checkpoint_id):
        _rewrite(store, key, _v1_outcome if key.endswith("outcome.json") else _v1_ack)


def as_future_version(store: ObjectStore, checkpoint_id: int) -> bytes:
    """The checkpoint's outcome stamped with a version no release knows; its bytes before."""
    key = _records(store, checkpoint_id)[0]
    before = store.get(key).data

    def stamp(document: dict[str, Any]) -> None:
        document["version"] = FUTURE_VERSION

    _rewrite(store, key, stamp)
    return before


def uids_are_names(topology: Any) -> bool:
    """Whether a release before uids could have written this topology."""
    return all(n.uid == n.name and all(s.uid == s.name for s in n.states) for n in topology.nodes)
