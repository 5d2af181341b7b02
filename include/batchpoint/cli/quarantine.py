"""`quarantine list` and `quarantine release ID`: what restores found damaged and the
quality gate refused, and letting a checkpoint back in."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id
from batchpoint.cli.exit_codes import ExitCode
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
    group = sub.add_parser(
        "quarantine",
        help="checkpoints a restore found damaged or the quality gate refused",
        parents=[common],
    )
    actions = group.add_subparsers(dest="action", required=True)
    p = actions.add_parser("list", help="quarantined checkpoints and why", parents=[common])
    p.set_defaults(run=cmd_list)
    p = actions.add_parser(
        "release", help="make a quarantined checkpoint a candidate again", parents=[common]
    )
    p.add_argument("checkpoint_id", type=checkpoint_id)
    p.set_defaults(run=cmd_release)
