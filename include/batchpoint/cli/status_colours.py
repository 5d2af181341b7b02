"""The colour of a status on a terminal, by what the status means to the reader: green
for good, yellow for waiting or a warning, red for failed or set aside. One mapping for
every table: a new status is one line here. Plain text (a pipe, NO_COLOR, --no-color)
has no colour; the word itself always says it."""

from __future__ import annotations

GOOD = "green"
WAITING = "yellow"
BAD = "red"
#: Neither good nor bad: gone by design (Flink's "discarded").
PAST = "dim"

#: status (lower case, as the rows carry it in any case) -> its rich style
STATUS_COLOURS: dict[str, str] = {
    # checkpoints
    "completed": GOOD,
    "head": GOOD,
    "retained": GOOD,
    "pending": WAITING,
    "in_progress": WAITING,
    "aborted": BAD,
    "failed": BAD,
    "quarantined": BAD,
    "unreadable": BAD,
    "discarded": PAST,
    # pipelines
    "running": GOOD,
    "stopping": WAITING,
    "stopped": WAITING,
    # checks and expectations
    "passed": GOOD,
    "ok": GOOD,
    "warning": WAITING,
    "skipped": WAITING,
}

#: The headers of the columns whose cells are a status.
STATUS_HEADERS = frozenset({"status", "result", "verdict"})


def status_style(value: str) -> str | None:
    """The style of a status cell (None: not a known status, left as it is)."""
    return STATUS_COLOURS.get(value.strip().lower())
