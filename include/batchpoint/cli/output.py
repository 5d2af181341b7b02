"""Where one command's result and progress go: JSON with --json, else plain text, or
drawn (tables, progress bars) where the stream is a terminal (cli/console.py). Progress
goes to stderr with --json (stdout stays parseable) and for commands whose report is
stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from batchpoint.cli.console import Bars, draw, terminal

#: A result as text: one str, or parts (lines and render.Grid tables) one per line.
Report = str | Sequence[str]


class Output:
    """One command's output streams; `close` ends any progress bar still drawn."""

    def __init__(self, as_json: bool, progress_to_stderr: bool = False) -> None:
        self.as_json = as_json
        self._progress_stream = sys.stderr if as_json or progress_to_stderr else sys.stdout
        self._bars: Bars | None = None
        if not as_json:
            console = terminal(self._progress_stream)
            self._bars = None if console is None else Bars(console)

    def progress(self, line: str) -> None:
        if self._bars is not None:
            self._bars.show(line)
        else:
            print(line, file=self._progress_stream, flush=True)

    def note(self, line: str) -> None:
        """A remark beside the result, never inside the JSON: always stderr (above the
        bars, when they are drawn there)."""
        if self._bars is not None and self._progress_stream is sys.stderr:
            self._bars.show(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def emit(
        self,
        data: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
        text: Report | Callable[[], Report],
    ) -> None:
        """The result: `data` as JSON with --json, else `text`."""
        self.close()
        if self.as_json:
            body = data() if callable(data) else data
            print(json.dumps(body, indent=2, default=str))
            return
        report = text() if callable(text) else text
        parts = [report] if isinstance(report, str) else list(report)
        console = terminal(sys.stdout)
        if console is None:
            print("\n".join(parts))
        else:
            draw(console, parts)

    def close(self) -> None:
        if self._bars is not None:
            self._bars.close()
