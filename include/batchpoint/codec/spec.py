"""What a field's type hint cannot say about its JSON form, declared beside the field.

acked_at: float = codec.field(time=True)
checkpoint: PendingCheckpoint = codec.field(key="checkpoint")
claimed: bool = codec.field(default=False, omit=False)
metrics: TaskMetrics = codec.field(missing=TaskMetrics())
meta: Mapping[str, Any] = codec.field(extra=True, default_factory=dict, compare=False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class _Nothing:
    def __repr__(self) -> str:
        return "NOTHING"


#: "Not given": no omission, no read default, no default at all.
NOTHING: Any = _Nothing()


class Invalid(Exception):
    """A JSON value that does not fit its declaration; the message names the field and
    what is wrong, in the shape `field 'x' should be int, found 'y'`."""


@dataclass(frozen=True)
class Adapter:
    """A field whose stored form is another type's (`stored`), converted by hand: `dump`
    takes the field's value, `load` the decoded stored value and the fields decoded
    before it (a record whose body depends on its status needs them)."""

    stored: Any
    dump: Callable[[Any], Any]
    load: Callable[[Any, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class FieldSpec:
    key: str | None = None  # the JSON key, when it is not the attribute's name
    time: bool = False  # float seconds stored as ISO-8601 text (`to_iso`)
    omit: Any = NOTHING  # not written when the value is this (None, False, "", 0, ...)
    missing: Any = NOTHING  # read as this when absent (a lenient default for old records)
    required: bool | None = None  # on read; default: when there is no default at all
    extra: bool = False  # the catch-all: every key no other field claims
    # written and read only when true of the other fields (a name: when that field is set)
    when: Callable[[Mapping[str, Any]], bool] | str | None = None
    prepare: Callable[[Any], Any] | None = None  # applied before writing (order, cap, round)
    check: Callable[[Any], None] | None = None  # raises Invalid for a value it refuses
    by: str | None = None  # an enum stored by this attribute of its members, not its value
    choices: tuple[Any, ...] = ()  # the enum members a record may hold (default: all)
    keyed_by: str | None = None  # a Mapping stored as the list of its values, in key order
    adapter: Adapter | None = None
    doc: str = ""  # for the JSON schema

    def applies(self, fields: Mapping[str, Any]) -> bool:
        if self.when is None:
            return True
        return bool(fields[self.when] if isinstance(self.when, str) else self.when(fields))

    def omitted(self, value: Any) -> bool:
        if self.omit is NOTHING:
            return False
        if self.omit is None or isinstance(self.omit, bool):
            return value is self.omit
        return type(value) is type(self.omit) and value == self.omit


def field(
    *,
    default: Any = NOTHING,
    default_factory: Callable[[], Any] | Any = NOTHING,
    compare: bool = True,
    **spec: Any,
) -> Any:
    """A dataclass field with its codec declaration (see FieldSpec for the options)."""
    return dataclasses.field(
        default=dataclasses.MISSING if default is NOTHING else default,
        default_factory=dataclasses.MISSING if default_factory is NOTHING else default_factory,
        compare=compare,
        metadata={"codec": FieldSpec(**spec)},
    )


def time(*, default: Any = NOTHING, **spec: Any) -> Any:
    """A time: float seconds in memory, ISO-8601 text in the record."""
    return field(default=default, time=True, **spec)


def spec_of(f: dataclasses.Field) -> FieldSpec:
    return f.metadata.get("codec") or FieldSpec()
