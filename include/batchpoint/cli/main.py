"""The `batchpoint` command: the parser (`--help` in users' words, usage.py), the
command groups (a module each, with `register(subparsers, common)`), and `main`, which
turns every error into one line and returns the exit code (exit_codes.py). A command
takes a `Command` and does its work through `batchpoint.ops`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

import argcomplete

from batchpoint.cli import (
    checkpoints,
    lineage,
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
from batchpoint.cli.json_body import json_body
from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.runtime.loader import missing_extra
from batchpoint.settings.spark_endpoint import spark_endpoint

#: The command groups, in the order `--help` lists them.
GROUPS = (
    checkpoints,
    sinks,
    lineage,
    state,
    verify,
    quarantine,
    maintenance,
    savepoint,
    plan,
    restore,
)

DESCRIPTION = """\
Inspect and operate the checkpoints of your batch pipelines: list and compare them,
check their data, take savepoints, restore, and clean up storage.

batchpoint reads the same storage as your Airflow DAGs ($BATCHPOINT_ROOT, or --root).
Commands that need the pipeline's code (savepoint, restore, plan, verify) find it in
--pipeline-ref or $BATCHPOINT_PIPELINE_REF; commands that read state start Spark."""

EPILOG = """\
examples:
  $ batchpoint checkpoints list
  $ batchpoint checkpoints show 6
  $ batchpoint --json stats | jq .pipeline_status
  $ batchpoint verify --integrity-only
  $ batchpoint restore --dry-run

output:
  Tables and colours on a terminal; plain text in a pipe, a file, or with NO_COLOR or
  --no-color. Progress goes to stderr, so stdout is only the result. --json prints one
  object with ISO 8601 timestamps and a "json_version" key (docs/cli.md).

exit codes:
  0 done or passed, 1 a check failed or a restore was refused, 2 a mistake in the
  command or the setup (one "error:" line; {"error": ...} with --json), 3 plan: the
  deploy would be refused.

Run `batchpoint COMMAND --help` for a command's options and examples.
Shell completion: eval "$(register-python-argcomplete batchpoint)"."""


def installed_version() -> str:
    try:
        return version("batchpoint")
    except PackageNotFoundError:  # imported from a source tree, not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="batchpoint",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[global_options(shown=True)],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    # The commands accept the global options too, listed once above.
    common = global_options(shown=False)
    for group in GROUPS:
        group.register(sub, common)
    return parser


def asks_for_json(argv: Sequence[str]) -> bool:
    """Whether --json is on the line (an option, not an operand after `--`): known
    before argparse has parsed it, for the errors argparse itself finds."""
    options = argv[: list(argv).index("--")] if "--" in argv else argv
    return "--json" in options


def with_late_operand(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]
) -> argparse.Namespace:
    """`savepoint dispose --pipeline p 7`: argparse fills a command's optional positionals
    in one run, so an operand after an option is left over. One bare word left over is
    the operand the command has not got yet; anything else is refused as argparse would."""
    if extras[:1] == ["--"]:  # `... -- 7`: what follows is an operand, whatever it looks like
        extras = extras[1:]
        if len(extras) == 1 and getattr(args, "operand", 0) is None:
            args.operand = extras[0]
            return args
    if not extras:
        return args
    if len(extras) == 1 and not extras[0].startswith("-") and getattr(args, "operand", 0) is None:
        args.operand = extras[0]
        return args
    parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def report_error(exc: BatchpointError, as_json: bool) -> None:
    if as_json:
        print(json.dumps(json_body({"error": str(exc)})))
    else:
        print(f"error: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> ExitCode | int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Does nothing unless the shell asks for completions. The global options are hidden
    # from a command's help, not from completion.
    argcomplete.autocomplete(parser, print_suppressed=True)
    as_json = asks_for_json(argv)
    try:
        args = finish(with_late_operand(parser, *parser.parse_known_args(argv)))
    except SystemExit as exc:  # --help or --version (0)
        return exc.code if isinstance(exc.code, int) else ExitCode.ERROR
    except BatchpointError as exc:  # a mistake argparse found
        report_error(exc, as_json)
        return ExitCode.ERROR
    try:
        cmd = Command.of(args)
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
    except ModuleNotFoundError as exc:
        # An optional package a command imports as it needs it (the pipeline's own
        # missing modules are ConfigErrors already: runtime/loader.py).
        if (extra := missing_extra(exc)) is None:
            raise
        package = (exc.name or "").split(".")[0]
        cmd.out.close()
        report_error(
            ConfigError(
                f"this command needs {package}, which is not installed here: install "
                f"batchpoint[{extra}] (pip install 'batchpoint[{extra}]')"
            ),
            args.json,
        )
        return ExitCode.ERROR
    except KeyboardInterrupt:
        cmd.out.close()
        report_error(BatchpointError("interrupted"), args.json)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader stopped reading (`| head`): stop quietly, as other tools in a pipe
        # do; what is still buffered goes nowhere, not into a traceback at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.ERROR
    finally:
        cmd.out.close()


if __name__ == "__main__":
    sys.exit(main())
