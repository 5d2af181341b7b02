"""One converter per type hint: how a value of that type is written to JSON, read back
(checked, with a message naming the field), and described in a JSON schema.

Supported hints: int, float (an int is read as a float), str, bool, `X | None`,
`tuple[X, ...]` and `list[X]` (a JSON list), `tuple[X, Y]` (a list of that length),
`Mapping[str, X]` and `dict[str, X]` (an object), `Any` (as it is), enums (by value, or
by the attribute a field names), and classes with a codec of their own (`nested`).
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from batchpoint.codec.envelope import parse_iso, to_iso
from batchpoint.codec.spec import Adapter, FieldSpec, Invalid

Defs = dict[str, dict[str, Any]]


class Converter(Protocol):
    def dump(self, value: Any) -> Any: ...

    def load(self, raw: Any, path: str) -> Any: ...

    def schema(self, defs: Defs) -> dict[str, Any]: ...


def item(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def wrong(path: str, expected: str, raw: Any) -> Invalid:
    return Invalid(f"field '{path}' should be {expected}, found {raw!r}")


_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}


@dataclass(frozen=True)
class Scalar:
    type: type

    def dump(self, value: Any) -> Any:
        return value

    def load(self, raw: Any, path: str) -> Any:
        accepted = (int, float) if self.type is float else self.type
        if (isinstance(raw, bool) and self.type is not bool) or not isinstance(raw, accepted):
            raise wrong(path, self.type.__name__, raw)
        return float(raw) if self.type is float else raw

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"type": _JSON_TYPES[self.type]}


class Passthrough:
    """Any JSON, kept as it is."""

    def dump(self, value: Any) -> Any:
        return value

    def load(self, raw: Any, path: str) -> Any:
        return raw

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {}


class Time:
    """Float seconds since the epoch, stored as ISO-8601 text."""

    def dump(self, value: Any) -> Any:
        return to_iso(value)

    def load(self, raw: Any, path: str) -> Any:
        found = parse_iso(raw)
        if found is None:
            raise wrong(path, "an ISO-8601 time", raw)
        return found

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"type": "string", "format": "date-time"}


@dataclass(frozen=True)
class Optional:
    inner: Converter

    def dump(self, value: Any) -> Any:
        return None if value is None else self.inner.dump(value)

    def load(self, raw: Any, path: str) -> Any:
        return None if raw is None else self.inner.load(raw, path)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"anyOf": [self.inner.schema(defs), {"type": "null"}]}


@dataclass(frozen=True)
class Sequence:
    inner: Converter
    container: type  # tuple or list, in memory

    def dump(self, value: Any) -> Any:
        return [self.inner.dump(v) for v in value]

    def load(self, raw: Any, path: str) -> Any:
        if not isinstance(raw, list):
            raise wrong(path, "list", raw)
        return self.container(self.inner.load(v, item(path, i)) for i, v in enumerate(raw))

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"type": "array", "items": self.inner.schema(defs)}


@dataclass(frozen=True)
class Fixed:
    """A tuple of a fixed length and item types, stored as a list."""

    items: tuple[Converter, ...]

    def dump(self, value: Any) -> Any:
        return [c.dump(v) for c, v in zip(self.items, value, strict=True)]

    def load(self, raw: Any, path: str) -> Any:
        if not isinstance(raw, list) or len(raw) != len(self.items):
            raise wrong(path, f"a list of {len(self.items)} items", raw)
        pairs = enumerate(zip(self.items, raw, strict=True))
        return tuple(c.load(v, item(path, i)) for i, (c, v) in pairs)

    def schema(self, defs: Defs) -> dict[str, Any]:
        n = len(self.items)
        prefix = [c.schema(defs) for c in self.items]
        return {"type": "array", "prefixItems": prefix, "minItems": n, "maxItems": n}


@dataclass(frozen=True)
class Object:
    """A mapping with text keys, stored as a JSON object."""

    inner: Converter

    def dump(self, value: Any) -> Any:
        return {k: self.inner.dump(v) for k, v in value.items()}

    def load(self, raw: Any, path: str) -> Any:
        if not isinstance(raw, dict):
            raise wrong(path, "dict", raw)
        return {k: self.inner.load(v, item(path, k)) for k, v in raw.items()}

    def schema(self, defs: Defs) -> dict[str, Any]:
        inner = self.inner.schema(defs)
        return {"type": "object", **({"additionalProperties": inner} if inner else {})}


@dataclass(frozen=True)
class Keyed:
    """A mapping from an attribute of its values to the values, stored as the list of
    the values in key order (the sink manifest's epochs by checkpoint id)."""

    inner: Converter
    key: str

    def dump(self, value: Any) -> Any:
        return [self.inner.dump(value[k]) for k in sorted(value)]

    def load(self, raw: Any, path: str) -> Any:
        if not isinstance(raw, list):
            raise wrong(path, "list", raw)
        values = [self.inner.load(v, item(path, i)) for i, v in enumerate(raw)]
        return {getattr(v, self.key): v for v in values}

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"type": "array", "items": self.inner.schema(defs)}


@dataclass(frozen=True)
class Enum:
    type: type[enum.Enum]
    by: str | None = None
    choices: tuple[Any, ...] = ()

    def _stored(self, member: enum.Enum) -> Any:
        return getattr(member, self.by) if self.by else member.value

    def dump(self, value: Any) -> Any:
        return self._stored(self.type(value))

    def load(self, raw: Any, path: str) -> Any:
        for member in self.choices or tuple(self.type):
            if self._stored(member) == raw and type(self._stored(member)) is type(raw):
                return member
        expected = ", ".join(repr(v) for v in self.values())
        raise Invalid(f"bad {path} {raw!r}: should be one of {expected}")

    def values(self) -> list[Any]:
        return [self._stored(m) for m in self.choices or tuple(self.type)]

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"enum": self.values()}


@dataclass(frozen=True)
class Adapted:
    """A field converted by its Adapter; `load` here is only the stored form's."""

    adapter: Adapter
    stored: Converter

    def dump(self, value: Any) -> Any:
        return self.stored.dump(self.adapter.dump(value))

    def load(self, raw: Any, path: str) -> Any:
        return self.stored.load(raw, path)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return self.stored.schema(defs)


Nested = Callable[[type], Converter | None]


def converter_for(hint: Any, spec: FieldSpec, nested: Nested) -> Converter:
    """The converter of a field of type `hint` declared with `spec`."""
    if spec.adapter is not None:
        stored = converter_for(spec.adapter.stored, FieldSpec(), nested)
        return Adapted(spec.adapter, stored)
    if spec.time:
        return _optional_of(hint, Time())
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1 or len(args) != 2:
            raise TypeError(f"only `X | None` unions have a JSON form, not {hint}")
        return Optional(converter_for(inner[0], spec, nested))
    if spec.keyed_by is not None:
        return Keyed(converter_for(args[1], FieldSpec(), nested), spec.keyed_by)
    if origin is not None:
        return _generic(origin, args, spec, nested)
    return _plain(hint, spec, nested)


def _optional_of(hint: Any, inner: Converter) -> Converter:
    return Optional(inner) if type(None) in typing.get_args(hint) else inner


def _generic(origin: Any, args: tuple, spec: FieldSpec, nested: Nested) -> Converter:
    plain = FieldSpec()
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return Sequence(converter_for(args[0], plain, nested), tuple)
    if origin is tuple:
        return Fixed(tuple(converter_for(a, plain, nested) for a in args))
    if origin is list:
        return Sequence(converter_for(args[0], plain, nested), list)
    if origin in (dict, Mapping) and args[0] is str:
        return Object(converter_for(args[1], plain, nested))
    names = ", ".join(getattr(a, "__name__", repr(a)) for a in args)
    raise TypeError(f"{origin.__name__}[{names}] has no JSON form")


def _plain(hint: Any, spec: FieldSpec, nested: Nested) -> Converter:
    if hint is Any:
        return Passthrough()
    if hint in _JSON_TYPES:
        return Scalar(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return Enum(hint, spec.by, spec.choices)
    found = nested(hint) if isinstance(hint, type) else None
    if found is None:
        raise TypeError(f"{hint!r} has no JSON form: give it a codec (batchpoint.codec)")
    return found
