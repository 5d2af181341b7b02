"""`lineage PIPELINE [--checkpoint N] [--upstream | --downstream]`: which checkpoints of
which pipelines a checkpoint was computed from, or which were computed from it
(ops/lineage.py), as tables or --json. Read-only."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command
from batchpoint.ops.lineage import downstream_lineage, upstream_lineage
from batchpoint.ops.lineage_values import Derivation, DownstreamLineage, UpstreamLineage

#: How a downstream checkpoint's derivation reads in the table.
DERIVED = {
    Derivation.COMPUTED: "yes",
    Derivation.UNPROVEN: "unproven",
    Derivation.NOT_COMPUTED: "no",
}


def cmd_lineage(cmd: Command) -> ExitCode:
    """Which checkpoints of other pipelines one was computed from, or were computed from it.

    Upstream (the default): what the checkpoint (default: the head) read of each
    pipeline it reads through a pipeline source, from what its base had read (after) up
    to what it read, whether that is still the upstream's history or a restore of the
    upstream took it back, and in turn what those upstream checkpoints read, while
    their pipeline retains them. Downstream: every retained checkpoint of the other
    pipelines on the same storage that reads the pipeline (directly or through another),
    and whether it was computed from the checkpoint ("unproven" when no recorded
    timeline can tell).

    $ batchpoint lineage reports
    $ batchpoint lineage ledger --checkpoint 4 --downstream
    $ batchpoint --json lineage reports --upstream
    """
    a = cmd.args
    cmd.coordinator_of(a.pipeline_name)  # an unknown pipeline is refused by name first
    if a.direction == "downstream":
        down = downstream_lineage(cmd.store, cmd.coordinator_of, a.pipeline_name, a.checkpoint)
        cmd.out.emit(lambda: {"direction": "downstream", **down.to_json()}, lambda: _down(down))
    else:
        up = upstream_lineage(cmd.store, cmd.coordinator_of, a.pipeline_name, a.checkpoint)
        cmd.out.emit(lambda: {"direction": "upstream", **up.to_json()}, lambda: _up(up))
    return ExitCode.OK


def _up(lineage: UpstreamLineage) -> list[Any]:
    name = f"{lineage.pipeline} checkpoint {lineage.checkpoint_id}"
    if not lineage.reads:
        return [f"{name} reads no other pipeline.", *_notes(lineage.notes)]
    rows = [
        [
            r.depth,
            f"{r.reader} {r.reader_checkpoint}",
            r.source,
            f"{r.pipeline}/{r.sink}",
            r.range_text(),
            r.state_text(),
        ]
        for r in lineage.reads
    ]
    problems = [
        f"{r.reader} {r.reader_checkpoint}, source {r.source}: {r.problem}"
        for r in lineage.reads
        if r.problem
    ]
    return [
        f"{name} was computed from (depth 1: what it read; 2: what those had read; ...):",
        render.table(["depth", "checkpoint", "source", "reads", "read", "status"], rows),
        *_notes(problems + list(lineage.notes)),
    ]


def _down(lineage: DownstreamLineage) -> list[Any]:
    name = f"{lineage.pipeline} checkpoint {lineage.checkpoint_id}"
    if not lineage.reads:
        return [
            f"no retained checkpoint of another pipeline reads {lineage.pipeline}.",
            *_notes(lineage.notes),
        ]
    rows = [
        [
            r.depth,
            f"{r.pipeline} {r.checkpoint_id}",
            r.source,
            r.upstream,
            r.range_text(),
            DERIVED[r.derivation],
            r.why,
        ]
        for r in lineage.reads
    ]
    count = len({(r.pipeline, r.checkpoint_id) for r in lineage.computed})
    header = ["depth", "checkpoint", "source", "reads", "read", "computed from it", "why"]
    return [
        f"{count} retained checkpoint(s) of other pipelines computed from {name} "
        "(or possibly: unproven), of those that read it (depth 1: directly; 2: through "
        "one other pipeline; ...):",
        render.table(header, rows),
        *_notes(list(lineage.notes)),
    ]


def _notes(notes: list[str]) -> list[str]:
    return ["", *(f"note: {n}" for n in notes)] if notes else []


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "lineage", common, run=cmd_lineage)
    p.add_argument("pipeline_name", metavar="PIPELINE")
    p.add_argument(
        "--checkpoint",
        type=checkpoint_id,
        default=None,
        metavar="N",
        help="the checkpoint (default: the head)",
    )
    way = p.add_mutually_exclusive_group()
    way.add_argument(
        "--upstream",
        dest="direction",
        action="store_const",
        const="upstream",
        help="what it was computed from (the default)",
    )
    way.add_argument(
        "--downstream",
        dest="direction",
        action="store_const",
        const="downstream",
        help="what was computed from it",
    )
    p.set_defaults(direction="upstream")
