"""`quarantine list` and `quarantine release ID`: what restores found damaged and the
quality gate refused, and letting a checkpoint back in."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_actions, add_command
from batchpoint.ops.maintenance import (
    quarantine_json,
    quarantine_reason,
    quarantined,
    release_quarantine,
)


def cmd_list(cmd: Command) -> ExitCode:
    c = cmd.coordinator()
    held = quarantined(c)

    def text() -> str:
        if not held:
            return f"pipeline {c.pipeline}: no checkpoint is quarantined"
        rows = [
            [
                r.checkpoint_id,
                render.when(r.quarantined_at) if r.quarantined_at else "?",
                r.found_by.label,
                quarantine_reason(c, r),
            ]
            for r in held
        ]
        return render.table(["id", "quarantined", "by", "reason"], rows)

    cmd.out.emit(
        lambda: {"pipeline": c.pipeline, "quarantined": [quarantine_json(r) for r in held]}, text
    )
    return ExitCode.OK


def cmd_release(cmd: Command) -> ExitCode:
    c = cmd.coordinator()
    cid = cmd.args.checkpoint_id
    held = release_quarantine(c, cid)
    cmd.out.emit(
        {"pipeline": c.pipeline, "released": cid, "was": quarantine_json(held)},
        f"checkpoint {cid} released (it was {held.describe(quarantine_reason(c, held))}): "
        "restores may offer it again, checking its records, files and quality afresh",
    )
    return ExitCode.OK


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    group = add_command(
        sub,
        "quarantine",
        common,
        summary="checkpoints set aside as damaged or failing their checks",
        examples=["batchpoint quarantine list", "batchpoint quarantine release 6"],
    )
    actions = add_actions(group)
    p = add_command(
        actions,
        "list",
        common,
        summary="the quarantined checkpoints, who set them aside and why",
        examples=["batchpoint quarantine list"],
    )
    p.set_defaults(run=cmd_list)
    p = add_command(
        actions,
        "release",
        common,
        summary="let a quarantined checkpoint be restored again (it is checked afresh)",
        examples=["batchpoint quarantine release 6"],
    )
    p.add_argument("checkpoint_id", type=checkpoint_id, metavar="ID", help="the checkpoint's id")
    p.set_defaults(run=cmd_release)
