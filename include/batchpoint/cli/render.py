"""The CLI's plain text: tables and human units, as a pipe or a file gets them (a
terminal gets the same tables drawn by cli/console.py; cli/output.py decides)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from batchpoint.protocol.stats import CheckpointStats

#: A cell that is a number, a size, a duration or a count (right-aligned); "-" is none.
NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?( ?(B|KiB|MiB|GiB|TiB|ms|s|%))?|\d+/\d+|-")


def numeric_columns(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> tuple[bool, ...]:
    """Which columns hold numbers only (blank cells aside; at least one number)."""
    return tuple(
        any(row[i] not in ("", "-") for row in rows)
        and all(NUMBER.fullmatch(row[i]) for row in rows if row[i])
        for i in range(len(headers))
    )


class Grid(str):
    """A table as plain text, that keeps its headers and cells for a terminal to draw.
    Numbers are right-aligned. Joined into a longer str it is plain text only: a result
    that wants it drawn gives it as one of its parts (`Output.emit`)."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]

    def __new__(cls, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Grid:
        numeric = numeric_columns(headers, rows)
        cells = [list(headers), *map(list, rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
        lines = [
            "  ".join(
                c.rjust(w) if right else c.ljust(w)
                for c, w, right in zip(row, widths, numeric, strict=True)
            ).rstrip()
            for row in cells
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        self = super().__new__(cls, "\n".join(lines))
        self.headers, self.rows, self.numeric = tuple(headers), tuple(map(tuple, rows)), numeric
        return self


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], optional: Sequence[str] = ()
) -> Grid:
    """A Grid of the cells as text; the `optional` columns only when a row fills them."""
    cells = [["" if c is None else str(c) for c in r] for r in rows]
    names = [str(h) for h in headers]
    keep = [i for i, h in enumerate(names) if h not in optional or any(r[i] for r in cells)]
    return Grid([names[i] for i in keep], [[r[i] for i in keep] for r in cells])


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


def or_none(value: object | None) -> str:
    """A value for a line of text: `none` where there is none (not Python's None)."""
    return "none" if value is None else str(value)


def findings(found: Sequence[str]) -> list[str]:
    """The records a read-only view could not read, after what it could show (damage
    is a finding, never a blocker: invariant 11); nothing when every record read."""
    if not found:
        return []
    return ["", "findings (records that could not be read):", *(f"  {f}" for f in found)]


def checkpoint_or_none(checkpoint_id: int | None) -> str:
    return "none" if checkpoint_id is None else f"checkpoint {checkpoint_id}"


def history_table(history: Iterable[CheckpointStats]) -> Grid:
    """The checkpoint history, one row per checkpoint (also the demo's closing table)."""
    rows = [
        [
            s.checkpoint_id,
            s.type.value,
            s.shown_status.label,
            when(s.trigger_time),
            seconds(s.duration_s),
            size(s.state_size),
            s.rows,
            f"{s.acknowledged}/{s.expected}",
            s.failure_reason and f"{s.failure_reason}: {s.failure_message}",
        ]
        for s in history
    ]
    return table([*HISTORY_HEADERS, "reason"], rows, optional=["reason"])
