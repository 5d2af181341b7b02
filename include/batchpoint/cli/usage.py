"""How a command presents itself in `--help`, in the style of gh and kubectl: a one-line
summary in the list of commands, a few sentences on its own page, then examples. The
global options are listed once, on `batchpoint --help`; a command's page points there."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

GLOBAL_HINT = (
    "Global options (--root, --pipeline, --json, --no-color, --pipeline-ref, "
    "--spark-conn-id) go before or after the command: see `batchpoint --help`."
)


def epilog(examples: Sequence[str]) -> str:
    lines = ["examples:", *(f"  $ {example}" for example in examples)] if examples else []
    return "\n".join([*lines, "", GLOBAL_HINT] if lines else [GLOBAL_HINT])


def add_command(
    sub: Any,
    name: str,
    common: argparse.ArgumentParser,
    *,
    summary: str,
    about: str = "",
    examples: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """A (sub)command: `summary` in its parent's list (one line, no full stop), `about`
    and `examples` on its own page."""
    description = summary[0].upper() + summary[1:] + "." + (f"\n\n{about}" if about else "")
    return sub.add_parser(  # type: ignore[no-any-return]
        name,
        help=summary,
        description=description,
        epilog=epilog(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )


def add_actions(parser: argparse.ArgumentParser) -> Any:
    """The subcommands of a command group (`checkpoints list`, ...)."""
    return parser.add_subparsers(dest="action", required=True, title="commands", metavar="COMMAND")
