"""The record codec's rules, on small declarations of its own: versions and upgrades,
what each field option does in both directions, and errors that name the field."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from batchpoint import codec
from batchpoint.codec.schema import record_schemas
from batchpoint.errors import CorruptRecord, UnsupportedRecordVersion


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Item(codec.Value):
    n: int
    label: str = ""


# -- versions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ShelfV1(codec.Value):
    """Version 1 kept one item, as a bare count."""

    count: int


@dataclass(frozen=True)
class ShelfV2(codec.Value):
    """Version 2 kept items, unnamed."""

    items: tuple[int, ...]


def _v1_to_v2(old: ShelfV1) -> ShelfV2:
    return ShelfV2((old.count,))


def _v2_to_v3(old: ShelfV2) -> Shelf:
    return Shelf(tuple(Item(n, "?") for n in old.items))


@dataclass(frozen=True)
class Shelf(codec.Record):
    KIND = "shelf"
    VERSION = 3
    READS = {1: codec.Upgrade(ShelfV1, _v1_to_v2), 2: codec.Upgrade(ShelfV2, _v2_to_v3)}

    items: tuple[Item, ...]


def test_every_older_version_reads_through_its_upgrades() -> None:
    assert Shelf.decode("k", codec.encode("shelf", 1, {"count": 4})) == Shelf((Item(4, "?"),))
    v2 = codec.encode("shelf", 2, {"items": [1, 2]})
    assert Shelf.decode("k", v2) == Shelf((Item(1, "?"), Item(2, "?")))
    now = Shelf((Item(5, "five"),))
    assert now.encode() == b'{"items":[{"label":"five","n":5}],"kind":"shelf","version":3}'
    assert Shelf.decode("k", now.encode()) == now


def test_an_unknown_version_asks_for_an_upgrade_of_batchpoint() -> None:
    with pytest.raises(UnsupportedRecordVersion, match="reads versions 1, 2, 3: upgrade"):
        Shelf.decode("k", codec.encode("shelf", 4, {}))


@pytest.mark.parametrize("version", [None, "3", 2.0, True, 0, -1])
def test_a_version_no_batchpoint_wrote_is_damage_not_a_newer_batchpoint(version: object) -> None:
    """A missing, non-integer or too-low version is a damaged or hand-made record: an
    upgrade would not read it, and the tools that replace damage must see it as damage."""
    body = {"kind": "shelf", "items": []} | ({} if version is None else {"version": version})
    with pytest.raises(CorruptRecord, match="version"):
        Shelf.decode("k", json.dumps(body).encode())


def test_an_older_body_is_checked_against_its_own_declaration() -> None:
    with pytest.raises(CorruptRecord, match="field 'count' should be int, found 'four'"):
        Shelf.decode("k", codec.encode("shelf", 1, {"count": "four"}))


def test_a_gap_in_the_versions_read_is_refused_when_declared() -> None:
    with pytest.raises(TypeError, match="READS must name each version"):

        @dataclass(frozen=True)
        class Gappy(codec.Record):
            KIND = "gappy"
            VERSION = 3
            READS = {1: codec.Upgrade(ShelfV1, _v1_to_v2)}

            items: tuple[int, ...]


def test_each_version_has_its_schema() -> None:
    schemas = record_schemas(Shelf)
    assert sorted(schemas) == [
        "shelf-v1.schema.json",
        "shelf-v2.schema.json",
        "shelf-v3.schema.json",
    ]
    v1 = schemas["shelf-v1.schema.json"]
    assert v1["properties"]["version"] == {"const": 1}
    assert v1["required"] == ["kind", "version", "count"]
    assert schemas["shelf-v3.schema.json"]["$defs"]["Item"]["required"] == ["n"]


# -- fields -------------------------------------------------------------------------------


def _present(fields: Mapping[str, Any]) -> bool:
    return fields["colour"] is Colour.RED


@dataclass(frozen=True)
class Box(codec.Record):
    KIND = "box"
    VERSION = 1
    DERIVED = {"total": "total"}

    colour: Colour
    at: float = codec.time()
    size: int = codec.field(missing=1)  # boxes written before sizes were one big
    items: Mapping[int, Item] = codec.field(keyed_by="n", default_factory=dict)
    note: str | None = codec.field(default=None, omit=None)
    span: tuple[int, int] | None = None
    since: float = codec.time(default=0.0, key="opened_at")
    shade: str = codec.field(default="", when=_present)
    rest: Mapping[str, Any] = codec.field(extra=True, default_factory=dict, compare=False)

    @property
    def total(self) -> int:
        return sum(i.n for i in self.items.values())


def _box(**changes: Any) -> Box:
    fields = {"colour": Colour.RED, "at": 1.5, "size": 1, "items": {2: Item(2), 1: Item(1, "one")}}
    return Box(**{**fields, **changes})


def test_what_each_field_option_writes() -> None:
    body = json.loads(_box(shade="dark", rest={"later": True}).encode())
    assert body == {
        "kind": "box",
        "version": 1,
        "colour": "red",
        "at": "1970-01-01T00:00:01.500Z",
        "items": [{"n": 1, "label": "one"}, {"n": 2, "label": ""}],  # in key order
        "size": 1,
        "span": None,
        "opened_at": "1970-01-01T00:00:00.000Z",
        "shade": "dark",
        "later": True,  # kept from a newer writer
        "total": 3,  # derived: written, never read
    }
    blue = json.loads(_box(colour=Colour.BLUE, note="n", shade="x").encode())
    assert blue["note"] == "n" and "shade" not in blue


def test_what_each_field_option_reads() -> None:
    box = _box(span=(1, 4), shade="dark", rest={"later": True, "rest": "a key like it"})
    again = Box.decode("k", box.encode())
    assert again == box and again.rest == {"later": True, "rest": "a key like it"}
    old = codec.encode("box", 1, {"colour": "blue", "at": "1970-01-01T00:00:02Z", "shade": "x"})
    assert Box.decode("k", old) == Box(Colour.BLUE, 2.0, 1)  # `shade` read only when red


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda b: b.pop("colour"), "missing field 'colour'"),
        (lambda b: b.update(colour="green"), "bad colour 'green': should be one of 'red', 'blue'"),
        (lambda b: b.update(at="noon"), "field 'at' should be an ISO-8601 time, found 'noon'"),
        (lambda b: b.update(size=True), "field 'size' should be int, found True"),
        (lambda b: b["items"][1].update(n="2"), "field 'items[1].n' should be int, found '2'"),
        (lambda b: b.update(items={}), "field 'items' should be list, found {}"),
        (lambda b: b.update(span=[1]), "field 'span' should be a list of 2 items, found [1]"),
        (lambda b: b.update(rest=1) or b.update(items=[7]), "field 'items[0]' should be dict"),
    ],
)
def test_a_field_that_does_not_fit_is_named(change, problem) -> None:
    body = json.loads(_box().encode())
    change(body)
    with pytest.raises(CorruptRecord) as caught:
        Box.decode("boxes/b1.json", json.dumps(body).encode())
    assert caught.value.key == "boxes/b1.json"
    assert caught.value.problem.startswith(problem), caught.value.problem
    assert "batchpoint repair" in str(caught.value)


@dataclass(frozen=True, order=True)
class Pair(codec.Value):
    LAYOUT = "array"

    low: int
    high: int


@dataclass(frozen=True)
class Offset(codec.Value):
    SHORT_FORM = "count"

    count: int
    name: str | None = None


class Offsets(codec.Value, Mapping[str, Offset]):
    FORM = Mapping[str, Offset]

    def __init__(self, offsets: Mapping[str, Offset]) -> None:
        self._offsets = dict(offsets)

    def __getitem__(self, key: str) -> Offset:
        return self._offsets[key]

    def __iter__(self):
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)


def test_values_stored_as_an_array_a_short_form_or_another_type_s_form() -> None:
    assert Pair(1, 2).to_json() == [1, 2] and Pair.from_json([3, 4]) == Pair(3, 4)
    assert Offset.from_json(3) == Offset(3) and Offset(3).to_json() == {"count": 3, "name": None}
    offsets = Offsets.from_json({"p0": 2, "p1": {"count": 1, "name": "a"}})
    assert dict(offsets) == {"p0": Offset(2), "p1": Offset(1, "a")}
    assert offsets.to_json() == {"p0": {"count": 2, "name": None}, "p1": {"count": 1, "name": "a"}}
    with pytest.raises(CorruptRecord, match=r"'Pair' is corrupt: field '' should be a list of 2"):
        Pair.from_json([1])


def test_a_type_without_a_json_form_is_refused_naming_it() -> None:
    @dataclass(frozen=True)
    class Odd(codec.Value):
        when: set[int] = field(default_factory=set)

    with pytest.raises(TypeError, match=r"Odd.when: set\[int\] has no JSON form"):
        Odd().to_json()
