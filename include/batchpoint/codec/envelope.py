"""The envelope every stored record shares: one JSON object with a `kind` and a
`version` beside the body's fields, written canonically (sorted keys, no spaces) so the
same value always gives the same bytes.

Readers accept only the versions they know, so a newer writer is never misread by an
older reader; times are ISO-8601 text in UTC with milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from batchpoint.errors import CorruptRecord, UnsupportedRecordVersion


def canonical(document: Any) -> bytes:
    """The stored bytes of a JSON document."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def encode(kind: str, version: int, body: Mapping[str, Any]) -> bytes:
    return canonical({"kind": kind, "version": version, **body})


def decode(key: str, data: bytes, kind: str, supported: tuple[int, ...]) -> tuple[int, dict]:
    """Parse and check a record's envelope; returns (version, body)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptRecord(key, "not UTF-8 text") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorruptRecord(key, _parse_problem(text, exc)) from None
    if not isinstance(document, dict):
        raise CorruptRecord(key, f"expected a JSON object, found {type(document).__name__}")
    found_kind = document.pop("kind", None)
    if found_kind != kind:
        raise CorruptRecord(key, f"expected a '{kind}' record, found kind {found_kind!r}")
    version = document.pop("version", None)
    if isinstance(version, bool) or not isinstance(version, int):
        # no writer leaves it out: a damaged or hand-made record, not a newer batchpoint's
        raise CorruptRecord(key, f"expected an integer version, found {version!r}")
    if version not in supported:
        if version > max(supported):
            raise UnsupportedRecordVersion(key, kind, version, supported)
        raise CorruptRecord(
            key, f"version {version} is not one batchpoint wrote (it reads {supported})"
        )
    return version, document


def _parse_problem(text: str, exc: json.JSONDecodeError) -> str:
    # json's own messages end in " at" for some errors ("... starting at").
    detail = f"{exc.msg.removesuffix(' at')} at char {exc.pos}"
    if not text.strip():
        return "empty"
    if _looks_truncated(text, exc):
        return f"truncated JSON ({detail})"
    return f"invalid JSON ({detail})"


def _looks_truncated(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether the text is a cut-off prefix of a JSON document (a partial write or
    download): json reports an unterminated string at the string's *start*, and a cut
    literal (`tru`) at the literal's start, so the error position alone is not enough."""
    end = len(text.rstrip())
    if exc.pos >= end - 1 or exc.msg.startswith("Unterminated string"):
        return True
    tail = text[exc.pos : end]
    return exc.msg == "Expecting value" and any(
        literal.startswith(tail) for literal in ("true", "false", "null")
    )


def to_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(value: Any) -> float | None:
    """Seconds since the epoch of an ISO-8601 time, None when `value` is not one."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def from_iso(key: str, value: Any) -> float:
    found = parse_iso(value)
    if found is None:
        what = "invalid time" if isinstance(value, str) else "expected an ISO-8601 time, found"
        raise CorruptRecord(key, f"{what} {value!r}")
    return found
