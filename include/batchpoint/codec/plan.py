"""A class's codec, read once from its declaration: the fields in order, each with its
JSON key, converter and rules, and how a whole value is written and read.

A class takes part by inheriting `Value` (codec/record.py); its layout is one of
- an object (a dataclass: one key per field, plus its catch-all and derived values);
- an array (a dataclass with `LAYOUT = "array"`: its fields in order, `[start, end]`);
- the form of a type it stands for (`FORM`, e.g. `Mapping[str, PartitionOffset]` for a
  source barrier: written as that mapping, read back through the class's constructor).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batchpoint.codec.convert import Converter, Defs, converter_for, item, wrong
from batchpoint.codec.spec import NOTHING, FieldSpec, Invalid, spec_of


@dataclass(frozen=True)
class FieldPlan:
    name: str  # the attribute
    key: str  # the JSON key
    converter: Converter
    spec: FieldSpec
    default: Any  # what a reader assumes when the key is absent; NOTHING: required
    factory: Any  # the dataclass's default_factory, called afresh for each read

    def read_default(self) -> Any:
        return self.factory() if self.factory is not NOTHING else self.default

    @property
    def required(self) -> bool:
        return self.default is NOTHING and self.factory is NOTHING


@dataclass(frozen=True)
class ClassPlan:
    cls: type
    fields: tuple[FieldPlan, ...]
    extra: str | None  # the catch-all attribute
    derived: tuple[tuple[str, str, Converter], ...]  # (key, attribute, converter): written only
    layout: str  # "object", "array" or "form"
    form: Converter | None
    short: FieldPlan | None  # the field a bare value stands for (`SHORT_FORM`)

    @property
    def known_keys(self) -> frozenset[str]:
        keys = {f.key for f in self.fields if not f.spec.extra}
        return frozenset(keys | {key for key, _, _ in self.derived})


def nested(cls: type) -> Converter | None:
    """The converter of a class with a codec of its own, None for any other."""
    return ValueConverter(cls) if getattr(cls, "__codec__", False) else None


@functools.cache
def plan_of(cls: type) -> ClassPlan:
    form = getattr(cls, "FORM", None)
    if form is not None:
        converter = converter_for(form, FieldSpec(), nested)
        return ClassPlan(cls, (), None, (), "form", converter, None)
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} needs to be a dataclass (or declare FORM) for a codec")
    hints = typing.get_type_hints(cls)
    fields = tuple(_field_plan(cls, f, hints[f.name]) for f in dataclasses.fields(cls))
    extras = [f.name for f in fields if f.spec.extra]
    if len(extras) > 1:
        raise TypeError(f"{cls.__name__} has more than one catch-all field: {extras}")
    derived = tuple(_derived(cls, key, attr) for key, attr in getattr(cls, "DERIVED", {}).items())
    short_name = getattr(cls, "SHORT_FORM", None)
    short = next((f for f in fields if f.name == short_name), None)
    layout = getattr(cls, "LAYOUT", "object")
    return ClassPlan(cls, fields, extras[0] if extras else None, derived, layout, None, short)


def _field_plan(cls: type, f: dataclasses.Field, hint: Any) -> FieldPlan:
    spec = spec_of(f)
    try:
        converter = converter_for(hint, spec, nested)
    except TypeError as exc:
        raise TypeError(f"{cls.__name__}.{f.name}: {exc}") from None
    default, factory = NOTHING, NOTHING
    if spec.missing is not NOTHING:
        default = spec.missing
    elif not spec.required:
        default = NOTHING if f.default is dataclasses.MISSING else f.default
        factory = NOTHING if f.default_factory is dataclasses.MISSING else f.default_factory
    return FieldPlan(f.name, spec.key or f.name, converter, spec, default, factory)


def _derived(cls: type, key: str, attr: str) -> tuple[str, str, Converter]:
    prop = getattr(cls, attr)
    hint = typing.get_type_hints(prop.fget)["return"]
    return key, attr, converter_for(hint, FieldSpec(), nested)


# -- writing ----------------------------------------------------------------------------


def dump(plan: ClassPlan, value: Any) -> Any:
    if plan.form is not None:
        return plan.form.dump(value)
    if plan.layout == "array":
        return [f.converter.dump(getattr(value, f.name)) for f in plan.fields]
    attrs = {f.name: getattr(value, f.name) for f in plan.fields}
    out: dict[str, Any] = dict(attrs[plan.extra]) if plan.extra else {}
    for f in plan.fields:
        if f.spec.extra or not f.spec.applies(attrs):
            continue
        v = attrs[f.name]
        if f.spec.prepare is not None:
            v = f.spec.prepare(v)
        if not f.spec.omitted(v):
            out[f.key] = f.converter.dump(v)
    for key, attr, converter in plan.derived:
        out[key] = converter.dump(getattr(value, attr))
    return out


# -- reading ----------------------------------------------------------------------------


def load(plan: ClassPlan, raw: Any, path: str) -> Any:
    if plan.form is not None:
        return _construct(plan.cls, (plan.form.load(raw, path),), {}, path)
    if plan.short is not None and not isinstance(raw, dict):
        raw = {plan.short.key: raw}
    if plan.layout == "array":
        return _load_array(plan, raw, path)
    if not isinstance(raw, dict):
        raise (
            wrong(path, "dict", raw) if path else Invalid(f"expected a JSON object, found {raw!r}")
        )
    values: dict[str, Any] = {}
    for f in plan.fields:
        if f.spec.extra or not f.spec.applies(values):
            continue
        values[f.name] = _load_field(f, raw, path, values)
    if plan.extra:
        known = plan.known_keys
        values[plan.extra] = {k: v for k, v in raw.items() if k not in known}
    return _construct(plan.cls, (), values, path)


def _load_field(f: FieldPlan, raw: Mapping[str, Any], path: str, values: dict) -> Any:
    where = item(path, f.key)
    if f.key not in raw:
        if f.required:
            raise Invalid(f"missing field '{where}'")
        return f.read_default()
    value = f.converter.load(raw[f.key], where)
    if f.spec.adapter is not None:
        value = f.spec.adapter.load(value, values)
    if f.spec.check is not None:
        f.spec.check(value)
    return value


def _load_array(plan: ClassPlan, raw: Any, path: str) -> Any:
    n = len(plan.fields)
    if not isinstance(raw, list) or len(raw) != n:
        raise wrong(path, f"a list of {n} items", raw)
    pairs = enumerate(zip(plan.fields, raw, strict=True))
    args = tuple(f.converter.load(v, item(path, i)) for i, (f, v) in pairs)
    return _construct(plan.cls, args, {}, path)


def _construct(cls: type, args: tuple, kwargs: dict[str, Any], path: str) -> Any:
    try:
        return cls(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        # A value the class itself refuses (its own checks): damage like any other.
        raise Invalid(f"bad {path or cls.__name__} ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class ValueConverter:
    """A field whose type has a codec of its own."""

    cls: type

    def dump(self, value: Any) -> Any:
        return dump(plan_of(self.cls), value)

    def load(self, raw: Any, path: str) -> Any:
        return load(plan_of(self.cls), raw, path)

    def schema(self, defs: Defs) -> dict[str, Any]:
        name = self.cls.__name__
        if name not in defs:
            defs[name] = {}  # taken, while its own fields are described
            defs[name] = describe(plan_of(self.cls), defs)
        return {"$ref": f"#/$defs/{name}"}


# -- describing (JSON schema) -------------------------------------------------------------


def describe(plan: ClassPlan, defs: Defs) -> dict[str, Any]:
    """The JSON schema of a class's values, its nested classes' put in `defs`."""
    if plan.form is not None:
        return plan.form.schema(defs)
    if plan.layout == "array":
        n = len(plan.fields)
        prefix = [f.converter.schema(defs) for f in plan.fields]
        return {"type": "array", "prefixItems": prefix, "minItems": n, "maxItems": n}
    properties: dict[str, Any] = {}
    for f in plan.fields:
        if not f.spec.extra:
            properties[f.key] = _describe_field(f, defs)
    for key, _, converter in plan.derived:
        properties[key] = {**converter.schema(defs), "readOnly": True}
    out: dict[str, Any] = {"type": "object", "properties": properties}
    required = [
        f.key for f in plan.fields if f.required and f.spec.when is None and not f.spec.extra
    ]
    if required:
        out["required"] = required
    out["additionalProperties"] = plan.extra is not None
    doc = _doc(plan.cls)
    if plan.short is not None:
        out = {"anyOf": [plan.short.converter.schema(defs), out]}
    return {"description": doc, **out} if doc else out


def _describe_field(f: FieldPlan, defs: Defs) -> dict[str, Any]:
    schema = f.converter.schema(defs)
    doc = f.spec.doc
    if isinstance(f.spec.when, str):
        doc = doc or f"present when '{f.spec.when}' is set"
    elif f.spec.when is not None:
        doc = doc or "present in some states of the record only"
    if f.default is not NOTHING and f.spec.adapter is None and _is_json(f.default):
        schema = {**schema, "default": f.converter.dump(f.default)}
    return {**schema, "description": doc} if doc else schema


def _is_json(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str | tuple)


def _doc(cls: type) -> str:
    doc = cls.__doc__ or ""
    if doc.startswith(f"{cls.__name__}("):  # the signature a dataclass makes up
        return ""
    return " ".join(doc.split())
