"""How a write's Spark tasks tell the driver the storage requests they made: beside
the files they return, on the first row of each task (a subtask always writes a file,
so it has one). Accumulators would not reach a driver that works over Spark Connect;
the rows do."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from batchpoint.storage.request_count import RequestCount, RequestLedger


def requests_column(requests: RequestCount, rows: int) -> list[str]:
    """A Spark task's counts for the `rows` it returns: on the first, none on the rest."""
    return [json.dumps(requests.by_kind()), *[""] * (rows - 1)]


def report_requests(ledger: RequestLedger | None, rows: Sequence[Any]) -> None:
    """The counts the Spark tasks returned with their files, each under the subtask of
    the file on its row. A failed or lost Spark task attempt returns nothing: its
    requests are not counted (the figures are a lower bound when Spark retried)."""
    if ledger is None:
        return
    for row in rows:
        if row.requests:
            ledger.add(json.loads(row.handle)["subtask"], json.loads(row.requests))
