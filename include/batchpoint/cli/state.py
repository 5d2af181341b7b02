"""`state show PIPELINE OPERATOR STATE [--checkpoint N] [--key COL=VALUE ...]` (or
OPERATOR/STATE): an operator's state as of a checkpoint, named by uid or any name it had,
read by Spark (a local session, or the pipeline's session on the Spark Connect server in
connect mode; starting one takes seconds)."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, UsageError, non_negative
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command, add_group


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


def operator_and_state(operator: str, state: str | None) -> tuple[str, str]:
    """OPERATOR STATE, or OPERATOR/STATE in one word (names and uids hold no '/')."""
    if state is not None:
        return operator, state
    name, sep, rest = operator.partition("/")
    if not sep or not name or not rest:
        raise UsageError(f"name the state: OPERATOR STATE or OPERATOR/STATE, got {operator!r}")
    return name, rest


def cmd_show(cmd: Command) -> ExitCode:
    """The rows of an operator's state as of a checkpoint (starts Spark).

    Name the operator and the state by their names, their uids, or any name they had in an
    earlier deploy: an operator renamed with its uid kept is the same operator, and is found
    under either name.

    $ batchpoint state show payments balances/balances
    $ batchpoint state show payments balances balances --checkpoint 7 --key account_id=acct-0003
    $ batchpoint --json state show payments balances-uid/balances --limit 100
    """
    from batchpoint.errors import BatchpointError
    from batchpoint.ops.dataframes import describe_rows, find_state_at, read_found_state
    from batchpoint.spark.session import session_here

    a = cmd.args
    operator, state = operator_and_state(a.operator, a.state)
    coordinator = cmd.coordinator_of(a.pipeline_name)
    # Found before Spark starts: a wrong name is an error within a second.
    completed, found = find_state_at(coordinator, operator, state, a.checkpoint)
    cid = completed.checkpoint_id
    spark_settings = cmd.spark_settings()  # a wrong connection too, before any progress
    cmd.out.progress(f"reading {found.label} of checkpoint {cid} with Spark")
    spark = session_here("batchpoint-state-show", a.pipeline_name, spark_settings)
    df = read_found_state(spark, cmd.settings.store_ref, completed, found)
    for column, value in a.key:
        if column not in df.columns:
            raise BatchpointError(f"--key {column}: the state has columns {df.columns}")
        df = df.where(df[column].cast("string") == value)
    columns, rows, total = describe_rows(df, a.limit)

    def data() -> dict[str, Any]:
        return {
            "pipeline": a.pipeline_name,
            "operator": found.operator,
            "operator_uid": found.operator_uid,
            "state": found.state,
            "state_uid": found.state_uid,
            "checkpoint_id": cid,
            "total_rows": total,
            "rows": [dict(zip(columns, r, strict=True)) for r in rows],
        }

    def text() -> list[str]:
        head = f"{a.pipeline_name} {found.label} as of checkpoint {cid}: {total} row(s)"
        if (operator, state) != (found.operator, found.state):
            head += f" (asked for as {operator}/{state})"
        more = total - len(rows)
        body = render.table(columns, rows)
        return [head, body, *([f"... {more} more (--limit)"] if more > 0 else [])]

    cmd.out.emit(data, text)
    return ExitCode.OK


#: `batchpoint state --help`, as a command's docstring reads (usage.help_of)
GROUP_USAGE = """Read an operator's state as of a checkpoint.

$ batchpoint state show payments balances/balances --checkpoint 7
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    actions = add_group(sub, "state", common, GROUP_USAGE)
    p = add_command(actions, "show", common, run=cmd_show)
    p.add_argument("pipeline_name", metavar="PIPELINE", help="the pipeline's name")
    p.add_argument(
        "operator", metavar="OPERATOR[/STATE]", help="the operator's name or uid (any it had)"
    )
    p.add_argument(
        "state", metavar="STATE", nargs="?", default=None,
        help="the state's name or uid (or give OPERATOR/STATE)",
    )  # fmt: skip
    p.add_argument(
        "--checkpoint", type=_checkpoint, default="latest", metavar="N",
        help="a checkpoint id, or latest (the default: the head)",
    )  # fmt: skip
    p.add_argument(
        "--key", type=_key, action="append", default=[], metavar="COL=VALUE",
        help="only rows whose column equals the value (repeatable)",
    )  # fmt: skip
    p.add_argument("--limit", type=non_negative, default=20, help="rows to print (default 20)")
