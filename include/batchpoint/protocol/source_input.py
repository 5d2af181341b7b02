"""Whether a source kept by uid still reads the input its offsets were taken on: the
properties each checkpoint records of a source (runtime/deploy.py) compared, for the
deploy plan. Pure."""

from __future__ import annotations

from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.topology import NodeTopology

#: What a source's offsets were taken on: another value is other input. Not an upstream
#: sink as the code names it (by name or uid): its offsets are keyed by the uid, so the
#: plan compares the partitions under READ instead.
_SOURCE_INPUT = ("root", "location", "upstream", "table", "table_catalog", "table_format")

#: An upstream source's partition (`<pipeline>/<sink uid>`) in a plan's topologies, never
#: recorded: on the checkpoint's side the one its barrier read, on the code's the one the
#: upstream's spec resolves its sink to (runtime/deploy.plan_on).
READ = "read"


def source_input_problems(old: NodeTopology, new: NodeTopology) -> list[tuple[str, bool]]:
    """A source kept by uid on other input (another root, location, table or upstream
    pipeline): its offsets are another input's, and would skip or re-read rows of this
    one. Each problem with whether allowing non-restored state may keep the offsets (the
    same files or table moved; never another pipeline's checkpoint ids). Not judged when
    either side recorded nothing (an older release's record)."""
    if new.kind is not OperatorKind.SOURCE or not old.properties or not new.properties:
        return []
    before, after = _source_input(old), _source_input(new)
    if before == after:
        return _sink_problems(old, new)
    movable = before["upstream"] is None and after["upstream"] is None
    moved = "; --allow-non-restored-state keeps the offsets if the same files moved"
    changed = [
        "another location" if k == "location" else f"{k} {before[k]!r} -> {after[k]!r}"
        for k in _SOURCE_INPUT
        if before[k] != after[k]
    ]
    problem = (
        f"source '{new.name}' (uid '{new.uid}') reads other input than its offsets were taken "
        f"on ({', '.join(changed)}): they do not apply to it. Keep its input, or give it a "
        f"new uid to read the new input from its beginning, with "
        f"pipeline.drop_source('{new.uid}')"
    )
    return [(problem + (moved if movable else ""), movable)]


def _source_input(node: NodeTopology) -> dict[str, object]:
    found = {k: node.properties.get(k) for k in _SOURCE_INPUT}
    if found["table_format"] == "delta":  # a Delta table is its path: no catalog
        found["table_catalog"] = None
    return found


def _sink_problems(old: NodeTopology, new: NodeTopology) -> list[tuple[str, bool]]:
    """Another sink of the same upstream: the base's offset, an upstream checkpoint id,
    read as this sink's skips everything it published up to it. Never movable: the ids
    are the same, the files are not. A sink renamed keeping its uid is the same one."""
    base_read, code_reads = old.properties.get(READ), new.properties.get(READ)
    if not base_read or not code_reads or base_read == code_reads:
        return []
    problem = (
        f"source '{new.name}' (uid '{new.uid}') reads {code_reads}, and its offsets are "
        f"{base_read}'s "
        "(a sink's offsets are the upstream's checkpoint ids: read as another sink's they "
        "skip its history). Read the sink it read, or give the source a new uid to read "
        f"this one from its beginning, with pipeline.drop_source('{new.uid}')"
    )
    return [(problem, False)]
