"""The stored format does not change under a reader's feet: every record kind and version
a release wrote (tests/data/records/, written by tests/support/record_examples.py) decodes
to the value it was written from, every field included, and re-encodes to the very same
bytes; older shapes still decode; the records of two older stores re-encode to theirs."""

from __future__ import annotations

import dataclasses
import json
import tarfile
from collections.abc import Mapping
from typing import Any

import pytest

from support.record_examples import FOLDER, LEGACY, RECORDS, VALUES, as_version_1


def same(a: Any, b: Any, path: str = "value") -> None:
    """Deep equality that also compares fields left out of `==` (a handle's `meta`, the
    control record's `extra`) and types (a 0 is not a 0.0, a list is not a tuple)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, Mapping):
        assert sorted(a) == sorted(b), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@pytest.mark.parametrize("name", list(RECORDS))
def test_a_stored_record_reads_back_and_re_encodes_to_the_same_bytes(name: str) -> None:
    expected = RECORDS[name]()
    data = (FOLDER / name).read_bytes()
    decoded = type(expected).decode(name, data)
    same(decoded, expected)
    assert decoded.encode() == data
    assert expected.encode() == data


@pytest.mark.parametrize("name", list(VALUES))
def test_a_stored_json_value_reads_back_and_re_encodes_to_the_same_bytes(name: str) -> None:
    expected = VALUES[name]()
    data = (FOLDER / name).read_bytes()
    decoded = type(expected).from_json(json.loads(data))
    same(decoded, expected)
    assert _canonical(decoded.to_json()) == data


@pytest.mark.parametrize("name", list(LEGACY))
def test_an_older_shape_still_reads(name: str) -> None:
    make_bytes, make_value = LEGACY[name]
    data = (FOLDER / name).read_bytes()
    assert data == make_bytes()
    expected = make_value()
    same(type(expected).decode(name, data), expected)


def test_every_fixture_is_one_of_the_examples() -> None:
    on_disk = {p.name for p in FOLDER.glob("*.json")}
    assert on_disk == set(RECORDS) | set(VALUES) | set(LEGACY)


# Earlier releases' real records: the payments pipeline of tests/data/payments-format1
# (state format 1) and of payments-records-v1 (written by 2d0c60a: an incremental chain,
# a savepoint exported under the root).
OLD_STORES = {"payments-format1.tar.gz": 13, "payments-records-v1.tar.gz": 35}


def _old_release_records(archive_name: str) -> dict[str, bytes]:
    with tarfile.open(FOLDER.parent / archive_name) as archive:
        return {
            m.name: archive.extractfile(m).read()  # type: ignore[union-attr]
            for m in archive.getmembers()
            if m.isfile() and (m.name.endswith(".json") or m.name.endswith("/_metadata"))
        }


@pytest.mark.parametrize("archive_name", list(OLD_STORES))
def test_an_earlier_release_s_records_read_back_to_the_same_bytes(archive_name: str) -> None:
    by_kind = {type(make()).KIND: type(make()) for make in RECORDS.values()}
    found = _old_release_records(archive_name)
    assert len(found) == OLD_STORES[archive_name]
    for name, data in found.items():
        record = by_kind[json.loads(data)["kind"]].decode(name, data)
        again = json.loads(record.encode())
        if json.loads(data)["version"] < record.VERSION and record.KIND != "pipeline-control":
            # a checkpoint record of version 1 (before uids): read through its upgrade,
            # which loses nothing: without the fields of version 2 it is the same body
            again = json.loads(as_version_1(record))
        if record.KIND == "pipeline-control" and "findings" not in json.loads(data):
            # written before the control record kept findings: it gains an empty list
            assert again.pop("findings") == []
        if record.KIND == "pipeline-control" and json.loads(data)["version"] == 1:
            # version 1 reads as not stopped and is written as version 2, nothing added
            assert (again["version"], record.stopping, record.stopped) == (2, None, None)
            again["version"] = 1
        assert _canonical(again) == data, name
