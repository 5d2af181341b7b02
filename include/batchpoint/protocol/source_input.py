"""Whether a source kept by uid still reads the input its offsets were taken on: the
properties each checkpoint records of a source (runtime/deploy.py) compared, for the
deploy plan. Pure."""

from __future__ import annotations

from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.topology import NodeTopology

#: What a source's offsets were taken on: another value is other input. Not an upstream
#: sink, named by name or uid: its offsets are keyed by the uid, checked as it is read.
_SOURCE_INPUT = ("root", "location", "upstream", "table", "table_catalog", "table_format")


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
        return []
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
