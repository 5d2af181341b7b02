"""A terminal's drawing of the CLI's output: rich tables (numbers right-aligned, a status
in its colour: cli/status_colours.py), progress bars for the steps that count
(`protocol.ports.Count`), and a spinner for a command that takes over a second. Only
where the stream is a terminal that takes them: a pipe, a file, NO_COLOR, --no-color,
TERM=dumb or --json get the plain text of render.py, exactly as scripts read it.
TTY_COMPATIBLE=1 (or FORCE_COLOR) draws on a stream that is not a terminal,
TTY_COMPATIBLE=0 never draws (rich's own switches)."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from batchpoint.cli.render import Grid
from batchpoint.cli.status_colours import STATUS_HEADERS, status_style
from batchpoint.protocol.ports import Count


def terminal(stream: TextIO, color: bool = True) -> Console | None:
    """A console drawing on `stream`, or None: print the plain text there (also when
    `color` is off: --no-color)."""
    # markup and highlighting off: the text is data ("[1/4] dedup", ids), not markup.
    console = Console(file=stream, markup=False, highlight=False, emoji=False)
    if not color or not console.is_terminal or console.is_dumb_terminal or console.no_color:
        return None
    return console


def draw(console: Console, parts: Sequence[str]) -> None:
    """A result's parts, each a line of text or a table (render.Grid)."""
    for part in parts:
        if isinstance(part, Grid):
            console.print(grid_table(part))
        else:
            console.print(Text(part), soft_wrap=True)


#: A cell of one word, or a date and time: kept on one line while wider columns fold.
COMPACT = re.compile(r"\S*|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def grid_table(grid: Grid) -> Table:
    # kubectl's and gh's layout: a rule under the headers, no boxes (more room for cells)
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i, header in enumerate(grid.headers):
        cells = [row[i] for row in grid.rows]
        # Text folds onto more lines, never cut short (reasons, paths); ids, numbers and
        # times stay whole, so only the columns that have words give way.
        whole = i == 0 or grid.numeric[i] or all(COMPACT.fullmatch(c) for c in cells)
        table.add_column(
            header,
            justify="right" if grid.numeric[i] else "left",
            no_wrap=whole,
            min_width=len(header) if whole else None,
            overflow="fold",
        )
    statuses = [h.lower() in STATUS_HEADERS for h in grid.headers]
    for row in grid.rows:
        table.add_row(
            *(
                Text(cell, style=(status_style(cell) or "") if status else "")
                for cell, status in zip(row, statuses, strict=True)
            )
        )
    return table


class CountColumn(ProgressColumn):
    """done/total of a counted step; nothing for the spinner, which counts nothing."""

    def render(self, task: Task) -> Text:
        return Text("" if task.total is None else f"{task.completed:.0f}/{task.total:.0f}")


class CountBar(BarColumn):
    """The bar of a counted step; none for the spinner."""

    def render(self, task: Task) -> Any:
        return Text("") if task.total is None else super().render(task)


class Bars:
    """A bar per counting step, the other progress lines printed above the bars; once
    the command has run `spinner_after` seconds, a spinner below them with the latest
    step and the time it has taken (a timer starts it: a step may print nothing for
    long, as Spark starting does)."""

    def __init__(self, console: Console, spinner_after: float) -> None:
        self.console = console
        self._progress = Progress(
            SpinnerColumn(finished_text=" "),
            TextColumn("{task.description}"),
            CountBar(),
            CountColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        # step -> its bar, and how far it was when last shown
        self._bars: dict[str, tuple[TaskID, int, int]] = {}
        self._live = False
        self._closed = False
        self._step = "working"
        self._spinner: TaskID | None = None
        self._lock = threading.RLock()
        self.spinning = threading.Event()  # set when the spinner is shown
        self._timer = threading.Timer(spinner_after, self._spin)
        self._timer.daemon = True
        self._timer.start()

    def _start(self) -> None:
        if not self._live:
            self._progress.start()
            self._live = True

    def _spin(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._start()
            self._spinner = self._progress.add_task(self._step, total=None)
            self._progress.refresh()
            self.spinning.set()

    def show(self, line: str) -> None:
        with self._lock:
            if not isinstance(line, Count):
                self._step = line
                if self._spinner is not None:
                    self._progress.update(self._spinner, description=line, refresh=True)
                self.console.print(Text(line), soft_wrap=True)
                return
            self._start()
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
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._spinner is not None:  # the last frame shows the bars, not the wait
                self._progress.remove_task(self._spinner)
                self._spinner = None
            if self._live:
                self._progress.stop()
                self._live = False
