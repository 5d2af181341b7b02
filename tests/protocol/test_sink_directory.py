"""Which sink a user means (`batchpoint sink show NAME`): a declared sink before one
only a checkpoint recorded, by uid then by name, then an earlier name."""

from __future__ import annotations

from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec
from batchpoint.protocol.sink_directory import SinkDirectory
from batchpoint.protocol.topology import NodeTopology, Topology


def _sink(uid: str, name: str, mode: str = "append") -> NodeTopology:
    return NodeTopology(uid, name, OperatorKind.SINK, properties={"mode": mode})


def _declared(uid: str, name: str) -> OperatorSpec:
    return OperatorSpec(name, OperatorKind.SINK, uid=uid, properties={"mode": "snapshot"})


def test_a_name_that_is_a_dropped_sinks_uid_means_the_declared_sink() -> None:
    # 'out' was given a new uid (its mode changed) and the old uid dropped
    recorded = [Topology((_sink("out", "out"),)), Topology((_sink("out2", "out", "snapshot"),))]
    directory = SinkDirectory([_declared("out2", "out")], recorded)
    found = directory.find("out")
    assert found is not None and found.uid == "out2" and found.declared
    assert directory.labels() == ["out"]


def test_a_recorded_sink_is_found_by_uid_name_or_earlier_name() -> None:
    recorded = [Topology((_sink("s1", "first"),)), Topology((_sink("s1", "second"),))]
    directory = SinkDirectory([], recorded)
    for given in ("s1", "second", "first"):
        found = directory.find(given)
        assert found is not None and found.uid == "s1" and not found.declared, given
    assert directory.find("third") is None


def test_a_name_the_head_has_means_the_heads_sink_before_a_recorded_uid() -> None:
    """Seed 21568: `out` is the dropped sink's uid (an older checkpoint records it) and
    the name the head's sink has; the registered code renamed that sink since, and a
    restore went back to the head. The user means the head's sink."""
    old, head = Topology((_sink("out", "out"),)), Topology((_sink("sink4", "out", "snapshot"),))
    declared = [_declared("sink4", "sink5")]

    found = SinkDirectory(declared, [old, head], head).find("out")

    assert found is not None and found.uid == "sink4"
    # without the head's names the recorded uid wins, as before
    unheaded = SinkDirectory(declared, [old, head]).find("out")
    assert unheaded is not None and unheaded.uid == "out"
