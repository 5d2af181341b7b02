"""`batchpoint` command line. Every command reads the same storage as the Airflow DAGs
(BATCHPOINT_ROOT and BATCHPOINT_S3_* or --root), prints a table, or JSON with --json."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from batchpoint.cli import tables
from batchpoint.errors import BatchpointError
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.gc import GarbageCollector
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.stats import CheckpointStats, CheckpointStatsTracker
from batchpoint.protocol.verify import check_handles
from batchpoint.settings import Settings


def _pipelines(settings: Settings) -> list[str]:
    store = settings.store_ref.open()
    return [p.rstrip("/").rsplit("/", 1)[-1] for p in store.list_dirs("pipelines/")]


def _coordinator(args: argparse.Namespace) -> CheckpointCoordinator:
    settings: Settings = args.settings
    name = args.pipeline
    if not name:
        names = _pipelines(settings)
        if len(names) != 1:
            listed = ", ".join(names) or "none"
            raise BatchpointError(
                f"name a pipeline with --pipeline (found: {listed} in {settings.root})"
            )
        name = names[0]
    PipelineLayout(name)
    return CheckpointCoordinator(settings.store_ref.open(), name, settings.checkpoint)


def _stats_row(s: CheckpointStats) -> list[Any]:
    return [
        s.checkpoint_id,
        s.type.value,
        s.status.value,
        tables.when(s.trigger_time),
        tables.seconds(s.duration_s),
        tables.size(s.state_size),
        s.rows,
        f"{s.acknowledged}/{s.expected}",
        s.failure_reason and f"{s.failure_reason}: {s.failure_message}",
    ]


def _stats_json(s: CheckpointStats) -> dict[str, Any]:
    return {
        "checkpoint_id": s.checkpoint_id,
        "type": s.type.value,
        "status": s.status.value,
        "trigger_time": s.trigger_time,
        "end_time": s.end_time,
        "duration_s": s.duration_s,
        "state_size": s.state_size,
        "rows": s.rows,
        "acknowledged": s.acknowledged,
        "expected": s.expected,
        "base_checkpoint_id": s.base_checkpoint_id,
        "failure_reason": s.failure_reason,
        "failure_message": s.failure_message,
    }


HISTORY_HEADERS = [
    "id",
    "type",
    "status",
    "triggered",
    "duration",
    "size",
    "rows",
    "acks",
    "reason",
]


def cmd_list(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    history = CheckpointStatsTracker(c).history(args.limit)
    head = c.head.get()
    if args.json:
        return {
            "pipeline": c.pipeline,
            "head": head.checkpoint_id,
            "checkpoints": [_stats_json(s) for s in history],
        }
    print(
        f"pipeline {c.pipeline}: head = checkpoint {head.checkpoint_id}, "
        f"retained = {c.completed.retained_ids()}"
    )
    print(tables.render(HISTORY_HEADERS, [_stats_row(s) for s in history]))
    return None


def cmd_show(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    stats, tasks = CheckpointStatsTracker(c).checkpoint(args.checkpoint_id)
    pending = c.get_checkpoint(args.checkpoint_id)
    if args.json:
        out = _stats_json(stats)
        out["barrier"] = dict(pending.barrier)
        out["tasks"] = [t.__dict__ for t in tasks]
        return out
    print(tables.render(HISTORY_HEADERS, [_stats_row(stats)]))
    print(
        f"\nbase: {pending.base_checkpoint_id}   restore generation: {pending.restore_generation}"
    )
    print(
        "\n"
        + tables.render(
            ["task", "attempt", "acked", "trigger->ack", "size", "rows"],
            [
                [
                    t.task,
                    t.attempt,
                    tables.when(t.ack_time),
                    tables.seconds(t.end_to_end_s),
                    tables.size(t.state_size),
                    t.rows,
                ]
                for t in tasks
            ],
        )
    )
    return None


def cmd_stats(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    tracker = CheckpointStatsTracker(c)
    summary = tracker.summary(tracker.history())
    failures = c.failures.state()
    if args.json:
        return {
            **summary.__dict__,
            "pipeline_status": failures.status.value,
            "consecutive_failures": failures.consecutive_failures,
        }
    print(
        f"pipeline {c.pipeline}: {failures.status.value}, "
        f"{failures.consecutive_failures} consecutive failure(s)"
    )
    if failures.reason:
        print(f"  {failures.reason}")
    print(
        f"checkpoints: {summary.count} ({summary.completed} completed, {summary.failed} "
        f"failed, {summary.in_progress} in progress)"
    )
    for label, triple, fmt in (
        ("duration", summary.duration_s, tables.seconds),
        ("state size", summary.state_size, tables.size),
    ):
        if triple:
            print(f"{label}: min {fmt(triple[0])}  avg {fmt(triple[1])}  max {fmt(triple[2])}")
    return None


def cmd_verify(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    completed = c.completed.get(args.checkpoint_id)
    problems = check_handles(c.store, completed.handles, checksums=not args.quick)
    if args.json:
        return {
            "checkpoint_id": args.checkpoint_id,
            "files": len(completed.handles),
            "problems": [str(p) for p in problems],
        }
    print(
        f"checkpoint {args.checkpoint_id}: {len(completed.handles)} file(s), "
        f"{len(problems)} problem(s)"
    )
    for p in problems:
        print(f"  {p}")
    return 1 if problems else None


def cmd_gc(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    report = GarbageCollector(c).collect(
        dry_run=args.dry_run,
        history_limit=args.history_limit,
        progress=None if args.json else print,
    )
    summary = {
        "dry_run": report.dry_run,
        "deleted_files": len(report.deleted_files),
        "deleted_bytes": report.deleted_bytes,
        "pruned_checkpoints": report.pruned_checkpoints,
        "skipped_pending": report.skipped_pending,
    }
    if args.json:
        return summary
    verb = "would delete" if args.dry_run else "deleted"
    print(
        f"{verb} {len(report.deleted_files)} file(s), {tables.size(report.deleted_bytes)}; "
        f"pruned {report.pruned_checkpoints or 'no'} checkpoint record(s)"
    )
    return None


def cmd_reset(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    c.reset_failures()
    state = c.failures.state()
    return (
        {"status": state.status.value}
        if args.json
        else print(f"pipeline {c.pipeline}: {state.status.value}")
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchpoint", description=__doc__)
    parser.add_argument("--root", help="storage root URI (default: $BATCHPOINT_ROOT)")
    parser.add_argument("--pipeline", help="pipeline name (default: the only one)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sub = parser.add_subparsers(dest="command", required=True)

    checkpoints = sub.add_parser("checkpoints", help="list or show checkpoints")
    csub = checkpoints.add_subparsers(dest="action", required=True)
    p = csub.add_parser("list", help="the checkpoint history")
    p.add_argument("--limit", type=int, default=None)
    p.set_defaults(fn=cmd_list)
    p = csub.add_parser("show", help="one checkpoint with its tasks")
    p.add_argument("checkpoint_id", type=int)
    p.set_defaults(fn=cmd_show)

    p = sub.add_parser("stats", help="summary statistics and the failure counter")
    p.set_defaults(fn=cmd_stats)
    p = sub.add_parser("verify", help="check a completed checkpoint's files")
    p.add_argument("checkpoint_id", type=int)
    p.add_argument("--quick", action="store_true", help="sizes only, no checksums")
    p.set_defaults(fn=cmd_verify)
    p = sub.add_parser("gc", help="delete files no retained checkpoint references")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--history-limit", type=int, default=None)
    p.set_defaults(fn=cmd_gc)
    p = sub.add_parser("reset", help="clear a FAILED pipeline's failure counter")
    p.set_defaults(fn=cmd_reset)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.settings = Settings.from_env(root=args.root or "")
        result = args.fn(args)
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json and result is not None and not isinstance(result, int):
        print(json.dumps(result, indent=2, default=str))
        return 0
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
