"""`batchpoint` command line. Every command reads the same storage as the Airflow DAGs
(BATCHPOINT_ROOT and BATCHPOINT_S3_* or --root), prints a table, or JSON with --json.
The global options (--root, --pipeline, --pipeline-ref, --json, --spark-conn-id) go
anywhere on the line. Commands that run Spark (`state show`, the quality gate of `verify`
and `restore`) reach it as BATCHPOINT_SPARK_* say, or through the Airflow connection
--spark-conn-id or BATCHPOINT_SPARK_CONN_ID names (Airflow's lookup: AIRFLOW_CONN_<ID>,
its secrets backends).

`savepoint`, `restore`, `plan` and `verify` also need the pipeline's code: --pipeline-ref
module:attr or BATCHPOINT_PIPELINE_REF (`verify` finds it in the quality gate named by
BATCHPOINT_QUALITY_GATE too). `restore` runs that quality gate too, as the restore DAG
does. Long operations print their progress (to stderr with --json, so the JSON on stdout
stays parseable; always to stderr for `restore` and `gc`, whose report is stdout). On a terminal
tables are drawn and counted steps (files copied, folders GC examined, ...) are progress
bars; a pipe, a file, NO_COLOR or TERM=dumb get plain text. Exit codes: 0
done (or passed), 1 a check failed or a restore was refused, 2 a mistake in the command
or the setup, 3 `plan`: the deploy would be refused. A mistake is one `error:` line on
stderr, or with --json one `{"error": "..."}` object on stdout, where the result would be.
`--version` prints the installed distribution's version. Shell completion: argcomplete's
(`eval "$(register-python-argcomplete batchpoint)"`, or its global activation).

Each command group is a module of this package with a `register(subparsers, common)`
that adds its subcommands; a command takes a `Command` and returns its exit code, and
does its work through `batchpoint.ops`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

import argcomplete

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
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.errors import BatchpointError
from batchpoint.settings.spark_endpoint import spark_endpoint

#: The command groups, in the order `--help` lists them.
GROUPS = (checkpoints, sinks, state, verify, quarantine, maintenance, savepoint, plan, restore)

#: Commands whose report is stdout while their progress goes to stderr, even without --json.
PROGRESS_TO_STDERR = ("restore", "gc")


def installed_version() -> str:
    try:
        return version("batchpoint")
    except PackageNotFoundError:  # imported from a source tree, not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    common = global_options()
    parser = Parser(
        prog="batchpoint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub, common)
    return parser


def asks_for_json(argv: Sequence[str]) -> bool:
    """Whether --json is on the line (an option, not an operand after `--`): known
    before argparse has parsed it, for the errors argparse itself finds."""
    options = argv[: list(argv).index("--")] if "--" in argv else argv
    return "--json" in options


def report_error(exc: BatchpointError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": str(exc)}))
    else:
        print(f"error: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> ExitCode | int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    argcomplete.autocomplete(parser)  # does nothing unless the shell asks for completions
    as_json = asks_for_json(argv)
    try:
        args = finish(parser.parse_args(argv))
    except SystemExit as exc:  # --help or --version (0)
        return exc.code if isinstance(exc.code, int) else ExitCode.ERROR
    except BatchpointError as exc:  # a mistake argparse found
        report_error(exc, as_json)
        return ExitCode.ERROR
    try:
        cmd = Command.of(args, progress_to_stderr=args.command in PROGRESS_TO_STDERR)
    except BatchpointError as exc:  # a bad setting
        report_error(exc, args.json)
        return ExitCode.ERROR
    try:
        # A quality gate's Spark session too is on the endpoint the command was given.
        with spark_endpoint(cmd.spark_settings):
            return args.run(cmd)
    except BatchpointError as exc:
        cmd.out.close()  # the error below the last bar, not inside it
        report_error(exc, args.json)
        return ExitCode.ERROR
    finally:
        cmd.out.close()


if __name__ == "__main__":
    sys.exit(main())
