"""`state show PIPELINE OPERATOR STATE [--checkpoint N] [--key COL=VALUE ...]`: an operator's
state as of a checkpoint, read by Spark (a local session, or the pipeline's session on
the Spark Connect server in connect mode; starting one takes seconds)."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, non_negative
from batchpoint.cli.exit_codes import ExitCode


def _key(text: str) -> tuple[str, str]:
    column, sep, value = text.partition("=")
    if not sep or not column:
        raise argparse.ArgumentTypeError(f"expected COLUMN=VALUE, got {text!r}")
    return column, value


def _checkpoint(text: str) -> int | str:
    if text == "latest":
        return text
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError("checkpoint ids start at 1")
    return value


def cmd_show(cmd: Command) -> ExitCode:
    from batchpoint.errors import BatchpointError
    from batchpoint.ops.dataframes import describe_rows, read_state, resolve_checkpoint
    from batchpoint.spark.session import session_here

    a = cmd.args
    coordinator = cmd.coordinator_of(a.pipeline_name)
    cid = resolve_checkpoint(coordinator, a.checkpoint)
    cmd.out.progress(f"reading {a.operator}/{a.state} of checkpoint {cid} with Spark")
    spark = session_here("batchpoint-state-show", a.pipeline_name, cmd.spark_settings())
    df = read_state(spark, a.pipeline_name, a.operator, a.state, cid, settings=cmd.settings)
    for column, value in a.key:
        if column not in df.columns:
            raise BatchpointError(f"--key {column}: the state has columns {df.columns}")
        df = df.where(df[column].cast("string") == value)
    columns, rows, total = describe_rows(df, a.limit)

    def data() -> dict[str, Any]:
        return {
            "pipeline": a.pipeline_name,
            "operator": a.operator,
            "state": a.state,
            "checkpoint_id": cid,
            "total_rows": total,
            "rows": [dict(zip(columns, r, strict=True)) for r in rows],
        }

    def text() -> list[str]:
        head = f"{a.pipeline_name} {a.operator}/{a.state} as of checkpoint {cid}: {total} row(s)"
        more = total - len(rows)
        body = render.table(columns, rows)
        return [head, body, *([f"... {more} more (--limit)"] if more > 0 else [])]

    cmd.out.emit(data, text)
    return ExitCode.OK


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("state", help="an operator's state as of a checkpoint", parents=[common])
    actions = group.add_subparsers(dest="action", required=True)
    p = actions.add_parser("show", help="the state's rows (read with Spark)", parents=[common])
    p.add_argument("pipeline_name", metavar="PIPELINE")
    p.add_argument("operator", metavar="OPERATOR")
    p.add_argument("state", metavar="STATE")
    p.add_argument("--checkpoint", type=_checkpoint, default="latest", help="N or latest")
    p.add_argument(
        "--key", type=_key, action="append", default=[], metavar="COL=VALUE",
        help="only rows whose column equals the value (repeatable)",
    )  # fmt: skip
    p.add_argument("--limit", type=non_negative, default=20, help="rows to print (default 20)")
    p.set_defaults(run=cmd_show)
