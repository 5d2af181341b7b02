"""What every command prints with --json, in one shape that scripts can rely on: one
object, with `json_version` (2: ISO 8601 timestamps and labelled fields; 1, before it
was written, had epoch seconds and positional arrays), and every timestamp as ISO 8601
in UTC with its offset (`2026-12-03T10:48:08.840+00:00`), whichever record it came from.
docs/cli.md describes it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from batchpoint.codec.envelope import parse_iso

JSON_VERSION = 2

#: The keys whose values are times: `trigger_time`, `ack_time`, `quarantined_at`, ...
TIME_KEY = re.compile(r"(^|_)(time|at)$")
#: ... and those in epoch milliseconds (`committed_at_ms`), printed as `committed_at`.
TIME_MS_KEY = re.compile(r"(^|_)at_ms$")


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


def _time(value: Any, scale: float = 1.0) -> Any:
    """A time as ISO 8601; 0 and None are "not known" (null); anything else as it is."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return iso(value / scale) if value else None
    seconds = parse_iso(value)
    return iso(seconds) if seconds is not None else value


def labelled(value: Any) -> Any:
    """`value` with every timestamp, at any depth, as ISO 8601 (UTC, +00:00)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if TIME_MS_KEY.search(key):
                out[key.removesuffix("_ms")] = _time(item, scale=1000.0)
            elif TIME_KEY.search(key):
                out[key] = _time(item)
            else:
                out[key] = labelled(item)
        return out
    if isinstance(value, list | tuple):
        return [labelled(item) for item in value]
    return value


def json_body(body: Mapping[str, Any]) -> dict[str, Any]:
    return {"json_version": JSON_VERSION, **labelled(body)}
