"""`sink show PIPELINE SINK [--checkpoint N]`, `sink history PIPELINE SINK`: a sink's rows
as of a checkpoint (a table sink through its table's time travel), and a table sink's
commits, one per checkpoint. SINK is the sink's name, its uid, or a name a retained
checkpoint recorded for it; the output names it by its current name."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id, non_negative
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command, add_group
from batchpoint.ops.sinks import show_sink, sink_history


def cmd_show(cmd: Command) -> ExitCode:
    """The rows a sink published as of a checkpoint (default: now).

    $ batchpoint sink show payments balances_table
    $ batchpoint sink show payments balances_table --checkpoint 4 --limit 50
    """
    a = cmd.args
    view = show_sink(
        cmd.coordinator_of(a.pipeline_name), cmd.settings.store_ref, a.sink, a.checkpoint, a.limit
    )

    def text() -> list[str]:
        as_of = f"as of checkpoint {view.checkpoint_id}" if view.checkpoint_id else "now"
        head = f"{view.pipeline}.{view.sink} {as_of} ({view.source}): {view.total_rows} row(s)"
        body = render.table(
            view.rows.column_names, [list(r.values()) for r in view.rows.to_pylist()]
        )
        more = view.total_rows - view.rows.num_rows
        return [head, body, *([f"... {more} more (--limit)"] if more > 0 else [])]

    cmd.out.emit(view.to_json, text)
    return ExitCode.OK


def cmd_history(cmd: Command) -> ExitCode:
    """A table sink's commits, one per checkpoint.

    $ batchpoint sink history payments balances_table
    """
    a = cmd.args
    history = sink_history(cmd.coordinator_of(a.pipeline_name), cmd.settings.store_ref, a.sink)
    commits = history.commits
    cmd.out.emit(
        lambda: {
            "pipeline": history.pipeline,
            "sink": history.sink,
            "uid": history.uid,
            "commits": [c.to_json() for c in commits],
        },
        lambda: render.table(
            [history.noun, "checkpoint", "generation", "operation", "rows", "committed"],
            [
                [
                    c.snapshot_id,
                    c.checkpoint_id if c.checkpoint_id is not None else "-",
                    c.generation,
                    c.operation,
                    c.records,
                    render.when(c.committed_at_ms / 1000),
                ]
                for c in commits
            ],
        ),
    )
    return ExitCode.OK


#: `batchpoint sink --help`, as a command's docstring reads (usage.help_of)
GROUP_USAGE = """Read what a sink published, now or as of a checkpoint.

$ batchpoint sink show payments balances_table --checkpoint 4
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    actions = add_group(sub, "sink", common, GROUP_USAGE)
    p = add_command(actions, "show", common, run=cmd_show)
    p.add_argument("pipeline_name", metavar="PIPELINE")
    p.add_argument("sink", metavar="SINK", help="its name or uid")
    p.add_argument("--checkpoint", type=checkpoint_id, default=None, help="as of checkpoint N")
    p.add_argument("--limit", type=non_negative, default=20, help="rows to print (default 20)")
    p = add_command(actions, "history", common, run=cmd_history)
    p.add_argument("pipeline_name", metavar="PIPELINE")
    p.add_argument("sink", metavar="SINK")
