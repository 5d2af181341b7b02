"""A terminal's drawing of the CLI's output: rich tables, and progress bars for the
steps that count (`protocol.ports.Count`). Only where the stream is a terminal that
takes them: a pipe, a file, NO_COLOR, TERM=dumb or --json get the plain text of
render.py, exactly as scripts read it. TTY_COMPATIBLE=1 (or FORCE_COLOR) draws on a
stream that is not a terminal, TTY_COMPATIBLE=0 never draws (rich's own switches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from batchpoint.cli.render import Grid
from batchpoint.protocol.ports import Count


def terminal(stream: TextIO) -> Console | None:
    """A console drawing on `stream`, or None: print the plain text there."""
    # markup and highlighting off: the text is data ("[1/4] dedup", ids), not markup.
    console = Console(file=stream, markup=False, highlight=False, emoji=False)
    if not console.is_terminal or console.is_dumb_terminal or console.no_color:
        return None
    return console


def draw(console: Console, parts: Sequence[str]) -> None:
    """A result's parts, each a line of text or a table (render.Grid)."""
    for part in parts:
        if isinstance(part, Grid):
            console.print(grid_table(part))
        else:
            console.print(Text(part), soft_wrap=True)


def grid_table(grid: Grid) -> Table:
    table = Table(header_style="bold")
    for header in grid.headers:
        # Folded onto more lines, never cut short: the cells are ids, paths and reasons.
        table.add_column(header, overflow="fold")
    for row in grid.rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


class Bars:
    """A bar per counting step, the other progress lines printed above the bars."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        # step -> its bar, and how far it was when last shown
        self._bars: dict[str, tuple[TaskID, int, int]] = {}
        self._live = False

    def show(self, line: str) -> None:
        if not isinstance(line, Count):
            self.console.print(Text(line), soft_wrap=True)
            return
        if not self._live:
            self._progress.start()
            self._live = True
        known = self._bars.get(line.step)
        # A step counts each unit once: a count that does not go up is the same step
        # again (another candidate's files): a new bar, the finished one stays.
        if known is None or known[1] >= line.done or known[2] != line.total:
            bar = self._progress.add_task(line.step, total=line.total)
        else:
            bar = known[0]
        self._bars[line.step] = (bar, line.done, line.total)
        self._progress.update(bar, completed=line.done, total=line.total)

    def close(self) -> None:
        if self._live:
            self._progress.stop()
            self._live = False
