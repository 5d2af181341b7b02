"""JSON schemas (draft 2020-12) of records and values, from the same declarations that
write and read them, so the published schemas cannot drift from the code: one document
per record kind and version (`<kind>-v<version>.schema.json`), and one per JSON value
stored outside a record (`value-<name>.schema.json`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from batchpoint.codec.plan import describe, plan_of
from batchpoint.codec.record import Record, Value

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def record_schemas(record: type[Record]) -> dict[str, dict[str, Any]]:
    """file name -> schema, for every version the record class reads."""
    out = {}
    for version in record.versions():
        body = record if version == record.VERSION else record.READS[version].body
        out[f"{record.KIND}-v{version}.schema.json"] = _record_document(record, version, body)
    return out


def _record_document(record: type[Record], version: int, body: type[Value]) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    shape = describe(plan_of(body), defs)
    envelope = {"kind": {"const": record.KIND}, "version": {"const": version}}
    document = {
        "$schema": DIALECT,
        "$id": f"{record.KIND}-v{version}.schema.json",
        "title": f"batchpoint record '{record.KIND}', version {version}",
        **({"description": shape["description"]} if "description" in shape else {}),
        "type": "object",
        "properties": {**envelope, **shape["properties"]},
        "required": ["kind", "version", *shape.get("required", [])],
        "additionalProperties": shape["additionalProperties"],
    }
    return {**document, "$defs": defs} if defs else document


def value_schema(name: str, value: type[Value]) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    shape = describe(plan_of(value), defs)
    document = {
        "$schema": DIALECT,
        "$id": f"value-{name}.schema.json",
        "title": f"batchpoint JSON value '{name}' ({value.__name__})",
        **shape,
    }
    return {**document, "$defs": defs} if defs else document


def all_schemas(
    records: Iterable[type[Record]], values: Mapping[str, type[Value]]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        out.update(record_schemas(record))
    for name, value in values.items():
        out[f"value-{name}.schema.json"] = value_schema(name, value)
    return out


def render(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def write_schemas(folder: Path, schemas: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """Write every schema into `folder`, and remove the schema files no record has any
    more; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.schema.json"):
        if stale.name not in schemas:
            stale.unlink()
    written = []
    for name, schema in sorted(schemas.items()):
        path = folder / name
        path.write_text(render(schema))
        written.append(path)
    return written
