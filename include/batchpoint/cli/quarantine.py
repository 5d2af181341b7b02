"""`quarantine list` and `quarantine release ID`: what restores found damaged and the
quality gate refused, and letting a checkpoint back in."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command, add_group
from batchpoint.ops.maintenance import (
    quarantine_json,
    quarantine_reason,
    quarantined,
    release_quarantine,
)
from batchpoint.ops.savepoints import discarded


def cmd_list(cmd: Command) -> ExitCode:
    """The quarantined checkpoints, who set them aside and why.

    $ batchpoint quarantine list
    """
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
    """Let a quarantined checkpoint be restored again (it is checked afresh).

    $ batchpoint quarantine release 6
    """
    c = cmd.coordinator()
    cid = cmd.args.checkpoint_id
    held = release_quarantine(c, cid)
    gone = discarded(c, cid)  # no restore can offer what GC took: not said it may
    after = (
        f"{gone}: no restore can offer it"
        if gone
        else "restores may offer it again, checking its records, files and quality afresh"
    )
    cmd.out.emit(
        {
            "pipeline": c.pipeline,
            "released": cid,
            "was": quarantine_json(held),
            "retained": gone is None,
        },
        f"checkpoint {cid} released (it was {held.describe(quarantine_reason(c, held))}): " + after,
    )
    return ExitCode.OK


#: `batchpoint quarantine --help`, as a command's docstring reads (usage.help_of)
GROUP_USAGE = """Checkpoints set aside as damaged or failing their checks.

$ batchpoint quarantine list
$ batchpoint quarantine release 6
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    actions = add_group(sub, "quarantine", common, GROUP_USAGE)
    add_command(actions, "list", common, run=cmd_list)
    p = add_command(actions, "release", common, run=cmd_release)
    p.add_argument("checkpoint_id", type=checkpoint_id, metavar="ID", help="the checkpoint's id")
