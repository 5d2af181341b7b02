"""`checkpoints list`, `checkpoints show ID`, `stats`: read-only views."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id, non_negative
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command, add_group
from batchpoint.ops.inspect import (
    PipelineStats,
    list_checkpoints,
    pipeline_stats,
    show_checkpoint,
)


def cmd_list(cmd: Command) -> ExitCode:
    """The checkpoints, oldest first, with their status, duration and size.

    The head is the checkpoint the next run builds on; retained ones can be restored.
    A record that cannot be read is listed as a finding after the rest.

    $ batchpoint checkpoints list --limit 5
    $ batchpoint --json checkpoints list
    """
    history = list_checkpoints(cmd.coordinator(), cmd.args.limit)
    cmd.out.emit(
        history.to_json,
        lambda: [
            f"pipeline {history.pipeline}: head = {render.checkpoint_or_none(history.head)}, "
            f"retained = {history.retained}",
            render.history_table(history.checkpoints),
            *render.findings(history.findings),
        ],
    )
    return ExitCode.OK


def cmd_show(cmd: Command) -> ExitCode:
    """One checkpoint: its status, what it builds on, and each task's share.

    $ batchpoint checkpoints show 6
    $ batchpoint --json checkpoints show 6
    """
    detail = show_checkpoint(cmd.coordinator(), cmd.args.checkpoint_id)

    def text() -> list[str]:
        tasks = render.table(
            [
                "task",
                "attempt",
                "acked",
                "trigger->ack",
                "sync",
                "async",
                "size",
                "rows",
                "records in",
                "records out",
                "spark jobs/stages",
                "requests",
            ],
            [
                [
                    t.task,
                    t.attempt,
                    render.when(t.ack_time),
                    render.seconds(t.end_to_end_s),
                    f"{t.sync_ms:.0f} ms",
                    f"{t.async_ms:.0f} ms",
                    render.size(t.state_size),
                    t.rows,
                    t.records_in,
                    t.records_out,
                    _spark_work(t.spark_jobs, t.spark_stages),
                    _requests(t.storage_requests, by_kind=False),
                ]
                for t in detail.tasks
            ],
            optional=["spark jobs/stages", "requests"],  # blank where no ack counted them
        )
        requests = detail.storage_requests
        return [
            render.history_table([detail.stats]),
            "",
            *detail.status_lines,
            f"base: {render.or_none(detail.base_checkpoint_id)}   restore generation: "
            f"{detail.restore_generation}   full state size (what a restore reads): "
            f"{render.size(detail.stats.full_state_size)}",
            *([f"storage requests: {_requests(requests)}"] if requests is not None else []),
            "",
            tasks,
        ]

    cmd.out.emit(detail.to_json, text)
    return ExitCode.OK


def _spark_work(jobs: int | None, stages: int | None) -> str:
    """An operator's Spark jobs and stages in the epoch (blank: its ack did not count)."""
    return "" if jobs is None else f"{jobs}/{stages}"


def _requests(requests: dict[str, int] | None, *, by_kind: bool = True) -> str:
    """Storage requests: the total, and by kind (blank: no ack counted them)."""
    if requests is None:
        return ""
    total = str(sum(requests.values()))
    kinds = ", ".join(f"{kind} {n}" for kind, n in requests.items())
    return f"{total} ({kinds})" if by_kind else total


def cmd_stats(cmd: Command) -> ExitCode:
    """How the pipeline is doing: failures in a row, durations and sizes.

    $ batchpoint stats
    $ batchpoint --json stats
    """
    stats = pipeline_stats(cmd.coordinator())

    def text() -> str:
        s = stats.summary
        lines = [
            f"pipeline {stats.pipeline}: {stats.status}, "
            f"{stats.consecutive_failures} consecutive failure(s)"
        ]
        if stats.reason:
            lines.append(f"  {stats.reason}")
        lines.append(
            f"checkpoints: {s.count} ({s.completed} completed, {s.failed} failed, "
            f"{s.in_progress} in progress)"
        )
        for label, triple, fmt in (
            ("duration", s.duration_s, render.seconds),
            ("state size", s.state_size, render.size),
        ):
            if triple:
                lines.append(
                    f"{label}: min {fmt(triple[0])}  avg {fmt(triple[1])}  max {fmt(triple[2])}"
                )
        return "\n".join(lines + render.findings(stats.findings))

    cmd.out.emit(lambda: stats_json(stats), text)
    return ExitCode.OK


def stats_json(stats: PipelineStats) -> dict[str, Any]:
    """The summary with its min/avg/max labelled (null: no completed checkpoint yet)."""
    body = stats.to_json()
    for key in ("duration_s", "state_size"):
        triple = body.get(key)
        body[key] = dict(zip(("min", "avg", "max"), triple, strict=True)) if triple else None
    return body


#: `batchpoint checkpoints --help`, as a command's docstring reads (usage.help_of)
GROUP_USAGE = """List checkpoints, or show one with its tasks.

$ batchpoint checkpoints list --limit 10
$ batchpoint checkpoints show 6
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    actions = add_group(sub, "checkpoints", common, GROUP_USAGE)
    p = add_command(actions, "list", common, run=cmd_list)
    p.add_argument(
        "--limit", type=non_negative, default=None, metavar="N", help="the newest N only"
    )
    p = add_command(actions, "show", common, run=cmd_show)
    p.add_argument("checkpoint_id", type=checkpoint_id, metavar="ID", help="the checkpoint's id")
    add_command(sub, "stats", common, run=cmd_stats)
