"""`gc`, `reset` and `repair`: keeping a pipeline's storage, failure counter and control
record in order."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, non_negative
from batchpoint.ops.maintenance import gc, gc_summary, repair, reset


def cmd_gc(cmd: Command) -> int:
    args = cmd.args
    report = gc(
        cmd.coordinator(),
        dry_run=args.dry_run,
        history_limit=args.history_limit,
        progress=None if args.json else cmd.out.progress,
    )
    verb = "would delete" if args.dry_run else "deleted"
    lines = [
        f"{verb} {len(report.deleted_files)} file(s), {render.size(report.deleted_bytes)}; "
        f"pruned {report.pruned_checkpoints or 'no'} checkpoint record(s)"
    ]
    lines += [f"  finding: {finding}" for finding in report.findings]
    cmd.out.emit(gc_summary(report), "\n".join(lines))
    return 0


def cmd_reset(cmd: Command) -> int:
    result = reset(cmd.coordinator())
    cmd.out.emit(
        {"pipeline": result.pipeline, "status": result.status, "was": result.previous_status},
        f"pipeline {result.pipeline}: {result.status}",
    )
    return 0


def cmd_repair(cmd: Command) -> int:
    result = repair(cmd.coordinator(), dry_run=cmd.args.dry_run)

    def text() -> str:
        verb = "would rebuild" if result.dry_run else "rebuilt"
        lines = [
            f"pipeline {result.pipeline}: {verb} the control record: head = checkpoint "
            f"{result.head}, retained = {result.retained}, restore generation "
            f"{result.restore_generation}"
        ]
        lines += [f"  skipped {finding}" for finding in result.findings]
        return "\n".join(lines)

    cmd.out.emit(result.to_json, text)
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "gc", help="delete files no retained checkpoint references", parents=[common]
    )
    p.add_argument("--dry-run", action="store_true", help="report only, delete nothing")
    p.add_argument(
        "--history-limit",
        type=non_negative,
        default=None,
        metavar="N",
        help="also drop the records of settled, unretained checkpoints beyond the newest N",
    )
    p.set_defaults(run=cmd_gc)
    p = sub.add_parser("reset", help="clear a FAILED pipeline's failure counter", parents=[common])
    p.set_defaults(run=cmd_reset)
    p = sub.add_parser(
        "repair",
        help="rebuild a missing or unreadable control record from the checkpoints' outcomes",
        parents=[common],
    )
    p.add_argument("--dry-run", action="store_true", help="report what it would write")
    p.set_defaults(run=cmd_repair)
