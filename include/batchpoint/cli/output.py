"""Where one command's result and progress go. The result is stdout: JSON with --json
(cli/json_body.py), else plain text, or tables drawn in colour where stdout is a terminal
(cli/console.py). Progress is stderr, always, so stdout is only the result: plain lines,
or where stderr is a terminal a live display (a bar for each counted step, a spinner
with the time taken once the command has run a second)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from batchpoint.cli.console import Bars, draw, terminal
from batchpoint.cli.json_body import json_body

#: A result as text: one str, or parts (lines and render.Grid tables) one per line.
Report = str | Sequence[str]

#: How long a command runs before the terminal shows that it is working.
SPINNER_AFTER_S = 1.0


class Output:
    """One command's output streams; `close` ends the progress display."""

    def __init__(
        self, as_json: bool, color: bool = True, spinner_after: float = SPINNER_AFTER_S
    ) -> None:
        self.as_json = as_json
        self.color = color
        self._bars: Bars | None = None
        if not as_json:  # under --json, plain lines: a log a script may keep
            console = terminal(sys.stderr, color)
            self._bars = None if console is None else Bars(console, spinner_after)

    def progress(self, line: str) -> None:
        if self._bars is not None:
            self._bars.show(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def note(self, line: str) -> None:
        """A remark beside the result, never inside it: stderr, as progress is."""
        self.progress(line)

    def emit(
        self,
        data: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
        text: Report | Callable[[], Report],
    ) -> None:
        """The result: `data` as JSON with --json, else `text`."""
        self.close()
        if self.as_json:
            body = data() if callable(data) else data
            print(json.dumps(json_body(body), indent=2, default=str))
            return
        report = text() if callable(text) else text
        parts = [report] if isinstance(report, str) else list(report)
        console = terminal(sys.stdout, self.color)
        if console is None:
            print("\n".join(parts))
        else:
            draw(console, parts)

    def close(self) -> None:
        if self._bars is not None:
            self._bars.close()
