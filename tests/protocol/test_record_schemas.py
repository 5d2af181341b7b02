"""The JSON schemas under docs/records/ are what the record declarations say today (they
never drift), every stored fixture is valid against its kind's and version's schema, and
the catalog they are generated from names every record class there is."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import batchpoint
from batchpoint import codec
from batchpoint.codec.envelope import parse_iso
from batchpoint.codec.schema import render
from batchpoint.ops import records as catalog
from support.record_examples import FOLDER, LEGACY, RECORDS, VALUES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "records"
REGENERATE = "regenerate them: python -m batchpoint.ops.records docs/records/"


def test_the_published_schemas_are_what_the_declarations_say() -> None:
    generated = catalog.schemas()
    published = {p.name: p.read_text() for p in DOCS.glob("*.schema.json")}
    assert sorted(published) == sorted(generated), REGENERATE
    for name, schema in generated.items():
        assert published[name] == render(schema), f"{name} drifted: {REGENERATE}"


def _schema_of(fixture: str) -> dict[str, Any]:
    """`ack-v1-shared.json` -> ack-v1.schema.json; `value-state-handle-changelog.json`
    -> value-state-handle.schema.json."""
    if fixture.startswith("value-"):
        names = [n for n in catalog.VALUES if re.match(rf"value-{n}(-.*)?\.json$", fixture)]
        stem = "value-" + max(names, key=len)
    else:
        stem = re.sub(r"(-v\d+).*", r"\1", fixture)
    return json.loads((DOCS / f"{stem}.schema.json").read_text())


#: jsonschema checks `date-time` only with an optional package: the records' own rule.
FORMATS = jsonschema.FormatChecker(formats=())
FORMATS.checks("date-time")(lambda text: not isinstance(text, str) or parse_iso(text) is not None)


def _validator(schema: dict[str, Any]) -> jsonschema.Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=FORMATS)


@pytest.mark.parametrize("fixture", [*RECORDS, *VALUES, *LEGACY])
def test_every_stored_fixture_is_valid_against_its_schema(fixture: str) -> None:
    document = json.loads((FOLDER / fixture).read_bytes())
    errors = [e.message for e in _validator(_schema_of(fixture)).iter_errors(document)]
    assert not errors, errors


@pytest.mark.parametrize(
    "fixture, damage, complaint",
    [
        ("ack-v1.json", lambda d: d["handles"][0].update(rows="many"), "'many' is not of type"),
        ("ack-v1.json", lambda d: d.pop("acked_at"), "'acked_at' is a required property"),
        ("decline-v1.json", lambda d: d.update(declined_at="soon"), "is not a 'date-time'"),
        ("pipeline-control-v1.json", lambda d: d.update(cause="sideways"), "'sideways' is not"),
        ("quarantine-v2.json", lambda d: d.update(found_by="unknown"), "'unknown' is not one of"),
        ("sink-manifest-v1.json", lambda d: d.update(surprise=1), "'surprise' was unexpected"),
    ],
)
def test_a_schema_refuses_what_the_reader_refuses(fixture, damage, complaint) -> None:
    document = json.loads((FOLDER / fixture).read_bytes())
    damage(document)
    errors = [e.message for e in _validator(_schema_of(fixture)).iter_errors(document)]
    assert any(complaint in e for e in errors), errors


def _every_class() -> set[type]:
    for package in ("protocol", "quality", "sources", "state"):
        path = Path(batchpoint.__file__).parent / package
        for module in pkgutil.walk_packages([str(path)], f"batchpoint.{package}."):
            importlib.import_module(module.name)
    found, queue = set(), [codec.Record]
    while queue:
        for sub in queue.pop().__subclasses__():
            found.add(sub)
            queue.append(sub)
    return {c for c in found if c.__module__.startswith("batchpoint.")}  # not tests' own


def test_the_catalog_names_every_record_class_and_every_version() -> None:
    assert _every_class() == set(catalog.RECORDS)
    kinds = [r.KIND for r in catalog.RECORDS]
    assert len(kinds) == len(set(kinds)), "two classes for one kind"
    examples = {type(make()) for make in RECORDS.values()}
    assert examples == set(catalog.RECORDS), "a record kind without a fixture"
    versions = {f"{r.KIND}-v{v}" for r in catalog.RECORDS for v in r.versions()}
    fixtures = {re.sub(r"(-v\d+).*", r"\1", n) for n in [*RECORDS, *LEGACY]}
    assert versions == fixtures, "a record version without a fixture"
