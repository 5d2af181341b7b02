"""`gc`, `reset`, `resume` and `repair`: keeping a pipeline's storage, failure counter and
control record in order."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id, non_negative
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command
from batchpoint.ops.maintenance import (
    RepairResult,
    gc,
    gc_summary,
    repair,
    reset,
    resume,
    settled_line,
)
from batchpoint.protocol.repair import RepairStatus
from batchpoint.protocol.stopping import NotStopped


def cmd_gc(cmd: Command) -> ExitCode:
    """Free storage: delete files no kept checkpoint needs.

    Checkpoints past their deadline are expired first.

    $ batchpoint gc --dry-run
    $ batchpoint gc --history-limit 100
    """
    args = cmd.args
    report = gc(
        cmd.coordinator(),
        cmd.store,
        dry_run=args.dry_run,
        history_limit=args.history_limit,
        progress=None if args.json else cmd.out.progress,
    )
    verb = "would delete" if args.dry_run else "deleted"
    lines = [
        f"{verb} {len(report.deleted_files)} file(s), {render.size(report.deleted_bytes)}; "
        f"pruned {report.pruned_checkpoints or 'no'} checkpoint record(s)"
    ]
    lines += [f"  settled {settled_line(outcome)}" for outcome in report.settled]
    lines += [f"  finding: {finding}" for finding in report.findings]
    cmd.out.emit(gc_summary(report), "\n".join(lines))
    return ExitCode.OK


def cmd_resume(cmd: Command) -> ExitCode:
    """Start taking checkpoints again after a stop with savepoint.

    Exit 1 when the pipeline was not stopped.

    $ batchpoint resume
    """
    coordinator = cmd.coordinator()
    try:
        result = resume(coordinator)
    except NotStopped as exc:
        cmd.out.emit(
            {"pipeline": coordinator.pipeline, "resumed": False, "reason": str(exc)}, str(exc)
        )
        return ExitCode.FAILED
    cmd.out.emit(
        result.to_json,
        f"pipeline {result.pipeline}: resumed (it was stopped with savepoint "
        f"{result.savepoint} at {render.when(result.stopped_at)}); the next checkpoint "
        "builds on the head",
    )
    return ExitCode.OK


def cmd_reset(cmd: Command) -> ExitCode:
    """Clear the failure count of a pipeline that stopped after too many failures.

    $ batchpoint reset
    """
    result = reset(cmd.coordinator())
    cmd.out.emit(
        {"pipeline": result.pipeline, "status": result.status, "was": result.previous_status},
        f"pipeline {result.pipeline}: {result.status}"
        + (
            " (its failure record was corrupt and is replaced)"
            if result.previous_status == "unreadable"
            else ""
        ),
    )
    return ExitCode.OK


def cmd_repair(cmd: Command) -> ExitCode:
    """Rebuild the pipeline's lost or damaged bookkeeping from its checkpoints.

    Rebuilds the control record (head, retained checkpoints) from the checkpoints' own records.
    Exit 1 when it is refused or another writer got there first.

    $ batchpoint repair --dry-run
    $ batchpoint repair --force
    $ batchpoint repair --head 12
    """
    args = cmd.args
    result = repair(cmd.coordinator(), dry_run=args.dry_run, force=args.force, head=args.head)
    cmd.out.emit(result.to_json, lambda: repair_text(result))
    return ExitCode.failed_if(result.refused)


def repair_text(result: RepairResult) -> str:
    """The plan (what was or would be written), what it changes, then the findings."""
    status = RepairStatus(result.status)
    head = f"pipeline {result.pipeline}: "
    if status is RepairStatus.UNCHANGED:
        lines = [head + "the control record agrees with the records: nothing changed"]
    elif status is RepairStatus.DRY_RUN and result.agrees:
        lines = [head + "the control record agrees with the records: nothing to repair"]
    elif status is RepairStatus.REFUSED:
        lines = [head + f"refused: {result.reason}", "plan (not written):"]
    elif status is RepairStatus.LOST:
        lines = [head + f"lost the race: {result.reason}", "plan (not written):"]
    else:
        verb = "would rebuild" if status is RepairStatus.DRY_RUN else "rebuilt"
        lines = [
            head + f"{verb} the control record: head = {render.checkpoint_or_none(result.head)}, "
            f"retained = {result.retained}, restore generation {result.restore_generation} "
            f"(the record was {result.previous})"
        ]
        if status is RepairStatus.DRY_RUN and result.previous == "readable":
            lines.append("  writing it needs --force: the record is readable")
    if result.agrees and status is not RepairStatus.REFUSED:
        # nothing is or would be written: the record read is what stands
        return "\n".join([*lines, *(f"  finding: {f}" for f in result.findings)])
    if status is not RepairStatus.DRY_RUN and status is not RepairStatus.WRITTEN:
        lines.append(
            f"  head = {render.checkpoint_or_none(result.head)}, retained = {result.retained}, "
            f"restore generation {result.restore_generation}"
        )
    if result.restore is not None:
        lines.append(
            f"  restore in flight: generation {result.restore['generation']} to checkpoint "
            f"{result.restore['target']} (the sinks are rewound to it)"
        )
    lines.append(
        f"  pending: {result.pending}; abandoned: {result.abandoned}; "
        f"queued for GC: {result.queued}; held: {result.held}"
    )
    if status is not RepairStatus.REFUSED:  # a refusal's reason lists them already
        lines += [f"  change: {line}" for line in result.changes]
    lines += [f"  finding: {finding}" for finding in result.findings]
    return "\n".join(lines)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "gc", common, run=cmd_gc)
    p.add_argument("--dry-run", action="store_true", help="report only, delete nothing")
    p.add_argument(
        "--history-limit",
        type=non_negative,
        default=None,
        metavar="N",
        help="also drop the records of settled, unretained checkpoints beyond the newest N",
    )
    add_command(sub, "reset", common, run=cmd_reset)
    add_command(sub, "resume", common, run=cmd_resume)
    p = add_command(sub, "repair", common, run=cmd_repair)
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan it would write; write nothing"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a readable control record too (it says what that changes)",
    )
    p.add_argument(
        "--head",
        type=checkpoint_id,
        default=None,
        metavar="ID",
        help="rebuild on this checkpoint: the answer repair asks for when a restore was "
        "under way as the control record was lost and no record says whether it moved the head",
    )
