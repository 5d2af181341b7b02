"""The one place the CLI prints results: plain-text tables in human units, or the same
result as JSON with --json. Progress goes to stderr with --json (stdout stays parseable)
and for commands whose report is stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from batchpoint.protocol.stats import CheckpointStats


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def when(ts: float | None) -> str:
    # 0: unknown (an unreadable record's row in the history)
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


HISTORY_HEADERS = ["id", "type", "status", "triggered", "duration", "size", "rows", "acks"]


def history_table(history: Iterable[CheckpointStats]) -> str:
    """The checkpoint history, one row per checkpoint (also the demo's closing table)."""
    rows = [
        [
            s.checkpoint_id,
            s.type.value,
            s.status.value,
            when(s.trigger_time),
            seconds(s.duration_s),
            size(s.state_size),
            s.rows,
            f"{s.acknowledged}/{s.expected}",
            s.failure_reason and f"{s.failure_reason}: {s.failure_message}",
        ]
        for s in history
    ]
    return table([*HISTORY_HEADERS, "reason"], rows)


class Output:
    """Where one command's result and progress go."""

    def __init__(self, as_json: bool, progress_to_stderr: bool = False) -> None:
        self.as_json = as_json
        self._progress_stream = sys.stderr if as_json or progress_to_stderr else sys.stdout

    def progress(self, line: str) -> None:
        print(line, file=self._progress_stream, flush=True)

    def note(self, line: str) -> None:
        """A remark beside the result, never inside the JSON: always stderr."""
        print(line, file=sys.stderr, flush=True)

    def emit(
        self,
        data: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
        text: str | Callable[[], str],
    ) -> None:
        """The result: `data` as JSON with --json, else `text`."""
        if self.as_json:
            body = data() if callable(data) else data
            print(json.dumps(body, indent=2, default=str))
        else:
            print(text() if callable(text) else text)
