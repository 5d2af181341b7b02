"""The classes that take part: `Value` (a JSON value stored inside records) and `Record`
(a stored record: a kind, a version, and the older versions it still reads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from batchpoint.codec import envelope
from batchpoint.codec.plan import dump, load, plan_of
from batchpoint.codec.spec import Invalid
from batchpoint.errors import CorruptRecord

T = TypeVar("T")


def reading(key: str, read: Callable[[], T]) -> T:
    """Run a read; what it finds wrong is a CorruptRecord naming the record `key`."""
    try:
        return read()
    except Invalid as exc:
        raise CorruptRecord(key, str(exc)) from None
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        # A shape no declaration foresaw (an upgrade meeting a damaged old body): still
        # damage, never a raw exception out of a read.
        raise CorruptRecord(key, f"bad field ({type(exc).__name__}: {exc})") from None


class Value:
    """A value whose JSON form its declaration gives (batchpoint.codec)."""

    __codec__: ClassVar[bool] = True

    def to_json(self) -> Any:
        return dump(plan_of(type(self)), self)

    @classmethod
    def from_json(cls, body: Any, key: str | None = None) -> Self:
        """The value `body` holds; CorruptRecord naming `key` (the record it was read
        from, else the class) and the field when it does not fit."""
        return reading(key or cls.__name__, lambda: load(plan_of(cls), body, ""))


@dataclass(frozen=True)
class Upgrade:
    """How a record of an older version is read (Flink's versioned serializers): the
    declaration of that version's body, and the function that turns such a value into
    the next version's (the record itself, for the version before the current one)."""

    body: type[Value]
    to_next: Callable[[Any], Any]


class Record(Value):
    """A stored record: `KIND`, the `VERSION` written, and in `READS` each older version
    still read, with its upgrade. Readers accept every version an earlier release wrote."""

    KIND: ClassVar[str]
    VERSION: ClassVar[int]
    READS: ClassVar[Mapping[int, Upgrade]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        older = sorted(cls.READS)
        if "KIND" in cls.__dict__ and older and older != list(range(older[0], cls.VERSION)):
            raise TypeError(
                f"{cls.__name__}: READS must name each version from the oldest read up to "
                f"{cls.VERSION - 1}, found {older}"
            )

    @classmethod
    def versions(cls) -> tuple[int, ...]:
        return (*sorted(cls.READS), cls.VERSION)

    def to_body(self) -> dict[str, Any]:
        return self.to_json()

    @classmethod
    def from_body(cls, key: str, body: Mapping[str, Any]) -> Self:
        return cls.from_json(body, key)

    def encode(self) -> bytes:
        return envelope.encode(self.KIND, self.VERSION, self.to_body())

    @classmethod
    def decode(cls, key: str, data: bytes) -> Self:
        version, body = envelope.decode(key, data, cls.KIND, cls.versions())
        if version == cls.VERSION:
            return cls.from_body(key, body)
        value = cls.READS[version].body.from_json(body, key)
        return reading(key, lambda: cls.upgrade(version, value))

    @classmethod
    def upgrade(cls, version: int, value: Any) -> Self:
        """A value of an older version's body, upgraded step by step to this class."""
        for step in range(version, cls.VERSION):
            value = cls.READS[step].to_next(value)
        return value
