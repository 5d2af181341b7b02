"""A checkpoint's lineage in the Checkpoints pages (ops/lineage.py): the upstream
checkpoints it read, and the downstream checkpoints computed from it, each linked to its
own page. The checkpoint's JSON carries it as `lineage`, and only about pipelines the
user may read: a row naming another pipeline is left out, and the page says how many
were. A lineage that cannot be read is a note, never a failed page."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import quote

from batchpoint.errors import BatchpointError
from batchpoint.ops.lineage import HistoryOf, downstream_lineage, upstream_lineage
from batchpoint.ops.lineage_values import Derivation, DownstreamRead, UpstreamRead
from batchpoint.ops.pipelines import pipeline_names
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.storage.base import ObjectStore

UPSTREAM_COLUMNS = ["depth", "checkpoint", "source", "reads", "read", "status"]
DOWNSTREAM_COLUMNS = ["depth", "checkpoint", "source", "reads", "read", "computed from it"]
DERIVED = {Derivation.COMPUTED: "yes", Derivation.UNPROVEN: "unproven (no timeline recorded)"}


def histories(store: ObjectStore, config: CheckpointConfig) -> HistoryOf:
    """Each pipeline's history on `store`, read as the page reads its own."""

    def history_of(pipeline: str) -> PipelineHistory:
        return CheckpointCoordinator(store, pipeline, config)

    return history_of


def checkpoint_lineage(
    store: ObjectStore,
    history_of: HistoryOf,
    pipeline: str,
    checkpoint_id: int,
    readable: Collection[str] | None = None,
) -> dict[str, Any]:
    """The checkpoint's lineage as its JSON has it: `upstream` (every read, depth first),
    `downstream` (every retained checkpoint of another pipeline that reads it, computed
    from it or not) and `notes`; with `readable`, only rows whose pipelines are in it."""
    try:
        stored = pipeline_names(store)
        up = upstream_lineage(store, history_of, pipeline, checkpoint_id)
        down = downstream_lineage(store, history_of, pipeline, checkpoint_id, stored)
    except BatchpointError as exc:
        return {"upstream": [], "downstream": [], "notes": [f"no lineage: {exc}"]}
    ups = [(r, {r.reader, r.pipeline}) for r in up.reads]
    downs = [(r, {r.pipeline, r.upstream}) for r in down.reads]
    notes = [*up.notes, *down.notes]
    if readable is not None:
        hidden = {*stored, *(n for _, names in ups + downs for n in names)} - set(readable)
        kept_up = [(r, n) for r, n in ups if not n & hidden]
        kept_down = [(r, n) for r, n in downs if not n & hidden]
        left_out = len(ups) + len(downs) - len(kept_up) - len(kept_down)
        ups, downs = kept_up, kept_down
        notes = [n for n in notes if not any(_names(h, n) for h in hidden)]
        if left_out:
            notes.append(f"{left_out} row(s) about pipelines you may not read are not shown")
    return {
        "upstream": [r.to_json() for r, _ in ups],
        "downstream": [r.to_json() for r, _ in downs],
        "notes": notes,
    }


def _names(pipeline: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(pipeline)}(?![\w-])", text) is not None


def _page(up: str, pipeline: str, checkpoint_id: int) -> dict[str, str]:
    """A link to a checkpoint's page, relative to this one (`up`: to the index)."""
    href = f"{up}{quote(pipeline)}/checkpoints/{checkpoint_id}"
    return {"text": f"{pipeline} {checkpoint_id}", "page": href}


def lineage_tables(lineage: Mapping[str, Any] | None, up: str) -> dict[str, Any]:
    """The page's two tables (the downstream one: only the checkpoints computed from
    it, or possibly so) and the notes; all empty when there is no lineage."""
    lineage = lineage or {}
    ups = [UpstreamRead.from_json(r) for r in lineage.get("upstream") or []]
    downs = [DownstreamRead.from_json(r) for r in lineage.get("downstream") or []]
    problems = [
        f"{r.reader} {r.reader_checkpoint}, source {r.source}: {r.problem}"
        for r in ups
        if r.problem
    ]
    return {
        "upstream_header": UPSTREAM_COLUMNS,
        "upstream": [
            [
                str(r.depth),
                _page(up, r.reader, r.reader_checkpoint),
                r.source,
                _upstream_cell(up, r),
                r.range_text(),
                r.state_text(),
            ]
            for r in ups
        ],
        "downstream_header": DOWNSTREAM_COLUMNS,
        "downstream": [
            [
                str(r.depth),
                _page(up, r.pipeline, r.checkpoint_id),
                r.source,
                r.upstream,
                r.range_text(),
                f"{DERIVED[r.derivation]}: {r.why}",
            ]
            for r in downs
            if r.computed
        ],
        "notes": [*problems, *(lineage.get("notes") or [])],
    }


def _upstream_cell(up: str, read: UpstreamRead) -> dict[str, str] | str:
    """The upstream sink, linked to the checkpoint read up to while it is retained."""
    text = f"{read.pipeline}/{read.sink}"
    if read.read_upto is None or not read.retained:
        return text
    return {**_page(up, read.pipeline, read.read_upto), "text": text}
