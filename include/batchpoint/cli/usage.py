"""How a command presents itself in `--help`, in the style of gh and kubectl: a one-line
summary in the list of commands, a few sentences on its own page, then examples. The
global options are listed once, on `batchpoint --help`; a command's page points there."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Sequence
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
    run: Callable[..., Any] | None = None,
    *,
    summary: str = "",
    about: str = "",
    examples: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """A (sub)command: `summary` in its parent's list (one line, no full stop), `about`
    and `examples` on its own page. A command that runs (`run`) says them in its
    docstring, where whoever changes what it does reads them (`help_of`)."""
    if run is not None:
        summary, about, examples = help_of(run)
    description = summary[0].upper() + summary[1:] + "." + (f"\n\n{about}" if about else "")
    parser = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    if run is not None:
        parser.set_defaults(run=run)
    return parser  # type: ignore[no-any-return]


def add_group(sub: Any, name: str, common: argparse.ArgumentParser, usage: str) -> Any:
    """A command group (`checkpoints list`, ...) whose help `usage` is written as a
    command's docstring; returns where its commands are added."""
    summary, about, examples = help_of(usage)
    group = add_command(sub, name, common, summary=summary, about=about, examples=examples)
    return add_actions(group)


def help_of(run: Callable[..., Any] | str) -> tuple[str, str, list[str]]:
    """(summary, about, examples) from a command's docstring (or a group's text written
    as one): its first sentence (shown in the list without its capital and full stop),
    the paragraphs after it, and the lines that start with `$ `."""
    doc = inspect.cleandoc(run) if isinstance(run, str) else inspect.getdoc(run)
    if not doc:
        raise ValueError(f"{run!r} has no docstring: its --help is written there")
    first, _, rest = doc.partition("\n\n")
    summary = first[0].lower() + first[1:].removesuffix(".")
    examples = [line[2:] for line in rest.splitlines() if line.startswith("$ ")]
    about = "\n".join(line for line in rest.splitlines() if not line.startswith("$ "))
    return summary, about.strip(), examples


def add_actions(parser: argparse.ArgumentParser) -> Any:
    """The subcommands of a command group (`checkpoints list`, ...)."""
    return parser.add_subparsers(dest="action", required=True, title="commands", metavar="COMMAND")
