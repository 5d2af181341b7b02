"""Versioned JSON records.

Every record is one JSON object with a `kind` and a `version`; readers accept only the
versions they know, so a newer writer can never be misread by an older reader.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Self

from batchpoint.errors import CorruptRecord, UnsupportedRecordVersion


def encode(kind: str, version: int, body: Mapping[str, Any]) -> bytes:
    document = {"kind": kind, "version": version, **body}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def decode(key: str, data: bytes, kind: str, supported: tuple[int, ...]) -> tuple[int, dict]:
    """Parse and check a record; returns (version, body)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptRecord(key, "not UTF-8 text") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        # json's own messages end in " at" for some errors ("... starting at").
        detail = f"{exc.msg.removesuffix(' at')} at char {exc.pos}"
        if not text.strip():
            problem = "empty"
        elif _looks_truncated(text, exc):
            problem = f"truncated JSON ({detail})"
        else:
            problem = f"invalid JSON ({detail})"
        raise CorruptRecord(key, problem) from None
    if not isinstance(document, dict):
        raise CorruptRecord(key, f"expected a JSON object, found {type(document).__name__}")
    found_kind = document.pop("kind", None)
    if found_kind != kind:
        raise CorruptRecord(key, f"expected a '{kind}' record, found kind {found_kind!r}")
    version = document.pop("version", None)
    if version not in supported:
        raise UnsupportedRecordVersion(key, kind, version, supported)
    return version, document


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


def field(key: str, body: Mapping[str, Any], name: str, types: type | tuple[type, ...]) -> Any:
    """A required field of a record, type-checked, with a message naming the record."""
    if name not in body:
        raise CorruptRecord(key, f"missing field '{name}'")
    value = body[name]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        expected = " or ".join(t.__name__ for t in _as_tuple(types))
        raise CorruptRecord(key, f"field '{name}' should be {expected}, found {value!r}")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def to_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def from_iso(key: str, value: Any) -> float:
    if not isinstance(value, str):
        raise CorruptRecord(key, f"expected an ISO-8601 time, found {value!r}")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise CorruptRecord(key, f"invalid time {value!r}") from None


class VersionedRecord:
    """The encode/decode every record class shares: a subclass names its KIND and
    VERSION (and SUPPORTED, when it reads older versions too) and maps its fields to a
    JSON body with `to_body`/`from_body`."""

    KIND: ClassVar[str]
    VERSION: ClassVar[int]
    SUPPORTED: ClassVar[tuple[int, ...]] = ()

    def to_body(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_body(cls, key: str, body: dict[str, Any]) -> Self:
        raise NotImplementedError

    def encode(self) -> bytes:
        return encode(self.KIND, self.VERSION, self.to_body())

    @classmethod
    def decode(cls, key: str, data: bytes) -> Self:
        _, body = decode(key, data, cls.KIND, cls.SUPPORTED or (cls.VERSION,))
        try:
            return cls.from_body(key, body)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            # A field of the wrong shape that `from_body` did not check by name (a list
            # where an object belongs, a float that is text): still damage, never a
            # raw exception out of a read.
            raise CorruptRecord(key, f"bad field ({type(exc).__name__}: {exc})") from None
