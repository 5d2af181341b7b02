"""`batchpoint` command line. Every command reads the same storage as the Airflow DAGs
(BATCHPOINT_ROOT and BATCHPOINT_S3_* or --root), prints a table, or JSON with --json.
The global options (--root, --pipeline, --pipeline-ref, --json) go anywhere on the line.

`savepoint`, `restore`, `plan` and `verify` also need the pipeline's code: --pipeline-ref
module:attr or BATCHPOINT_PIPELINE_REF (`verify` finds it in the quality gate named by
BATCHPOINT_QUALITY_GATE too). `restore` runs that quality gate too, as the restore DAG
does. Long operations print their progress (to stderr with --json, so the JSON on stdout
stays parseable; always to stderr for `restore`, whose report is stdout). Exit codes: 0
done (or passed), 1 a check failed or a restore was refused, 2 a mistake in the command
or the setup, 3 `plan`: the deploy would be refused.

Each command group is a module of this package with a `register(subparsers, common)`
that adds its subcommands; a command takes a `Command` and returns its exit code, and
does its work through `batchpoint.ops`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from batchpoint.cli import (
    checkpoints,
    maintenance,
    plan,
    quarantine,
    restore,
    savepoint,
    sinks,
    state,
    verify,
)
from batchpoint.cli.context import Command, Parser, finish, global_options
from batchpoint.errors import BatchpointError

#: The command groups, in the order `--help` lists them.
GROUPS = (checkpoints, sinks, state, verify, quarantine, maintenance, savepoint, plan, restore)

#: Commands whose report is stdout while their progress goes to stderr, even without --json.
PROGRESS_TO_STDERR = ("restore",)


def build_parser() -> argparse.ArgumentParser:
    common = global_options()
    parser = Parser(
        prog="batchpoint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = finish(build_parser().parse_args(argv))
    except SystemExit as exc:  # --help (0) or a mistake argparse reported (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        cmd = Command.of(args, progress_to_stderr=args.command in PROGRESS_TO_STDERR)
        return args.run(cmd)
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
