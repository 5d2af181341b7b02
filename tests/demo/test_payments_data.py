"""The payments demo: deterministic awkward input, and the pandas reference over it."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from batchpoint.errors import ConfigError
from batchpoint.sources import PartitionedFileSource, SourceBarrier
from batchpoint.storage.local import LocalObjectStore
from demo.payments_data import (
    ALERT_LIMIT,
    EPOCH_SPAN_MS,
    EPOCH_START_MS,
    PARTITIONS,
    PAYMENTS_SCHEMA,
    write_epoch_files,
    write_epochs,
)
from demo.payments_reference import (
    ALERT_COLUMNS,
    BALANCE_COLUMNS,
    compute_reference,
    reference_from_events,
)

ROOT = "input/payments"
EPOCHS = 4


def records(store: LocalObjectStore, key: str) -> list[dict]:
    return [json.loads(line) for line in store.get(key).data.decode().splitlines()]


def snapshot(store: LocalObjectStore) -> dict[str, bytes]:
    return {info.key: store.get(info.key).data for info in store.list(f"{ROOT}/")}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalObjectStore, list[list[str]]]:
    """Four epochs of the default test size (200 accounts x 2,000 events), written once."""
    store = LocalObjectStore(tmp_path_factory.mktemp("payments"))
    return store, [write_epoch_files(store, ROOT, epoch) for epoch in range(EPOCHS)]


# -- the generator ----------------------------------------------------------------------


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    runs = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        store = LocalObjectStore(tmp_path / name)
        write_epochs(store, ROOT, range(3), seed=seed, events_per_epoch=300)
        runs[name] = snapshot(store)
    assert runs["a"] == runs["b"]
    assert runs["a"].keys() == runs["c"].keys() and runs["a"] != runs["c"]


def test_rewriting_an_epoch_writes_the_same_bytes(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    write_epochs(store, ROOT, range(3), events_per_epoch=300)
    before = snapshot(store)
    write_epoch_files(store, ROOT, 1, events_per_epoch=300)
    assert snapshot(store) == before


def test_files_sort_in_arrival_order(written: tuple[LocalObjectStore, list[list[str]]]) -> None:
    _, per_call = written
    for earlier, later in itertools.pairwise(per_call):
        for partition in PARTITIONS:
            old = [k for k in earlier if f"/{partition}/" in k]
            new = [k for k in later if f"/{partition}/" in k]
            assert new and max(old) < min(new)


def test_records_match_the_schema_and_the_event_count(
    written: tuple[LocalObjectStore, list[list[str]]],
) -> None:
    store, _ = written
    source = PartitionedFileSource(store, ROOT, "jsonl", schema=PAYMENTS_SCHEMA)
    assert source.partitions() == list(PARTITIONS)
    table = source.read_splits(source.files_between(None, source.capture_barrier()))
    frame = table.to_pandas()
    origin_epoch = frame.drop_duplicates("event_id")["event_id"].str.split("-").str[1].astype(int)
    # Epochs 0..2 are complete; epoch 3 still holds one file back.
    per_epoch = origin_epoch.value_counts().sort_index().tolist()
    assert per_epoch[:3] == [2_000] * 3 and 0 < per_epoch[3] < 2_000
    assert (frame["amount"] > 0).any() and (frame["amount"] < 0).any()
    assert (frame["amount"] != 0).all()
    assert frame["account_id"].nunique() <= 200


def test_duplicates_within_and_across_epochs_are_identical_redeliveries(
    written: tuple[LocalObjectStore, list[list[str]]],
) -> None:
    store, per_call = written
    arrivals: dict[str, list[tuple[int, str, dict]]] = {}
    for call, keys in enumerate(per_call):
        for key in keys:
            for record in records(store, key):
                arrivals.setdefault(record["event_id"], []).append((call, key, record))
    redelivered = {e: a for e, a in arrivals.items() if len(a) > 1}
    assert len(redelivered) > 100
    for copies in redelivered.values():
        assert all(record == copies[0][2] for _, _, record in copies)
    same_file = any(len({key for _, key, _ in a}) < len(a) for a in redelivered.values())
    same_call_other_file = any(
        len({call for call, _, _ in a}) == 1 and len({key for _, key, _ in a}) > 1
        for a in redelivered.values()
    )
    across_calls = any(len({call for call, _, _ in a}) > 1 for a in redelivered.values())
    assert same_file and same_call_other_file and across_calls


def test_late_files_arrive_with_the_next_epoch(
    written: tuple[LocalObjectStore, list[list[str]]],
) -> None:
    store, per_call = written
    assert not any("late" in key for key in per_call[0])
    for call in range(1, EPOCHS):
        [late] = [key for key in per_call[call] if "late" in key]
        assert late.endswith(f"-late-e{call - 1:05d}.jsonl")
        origin = records(store, late)[0]["event_id"].split("-")[1]
        assert int(origin) == call - 1  # its own events belong to the previous epoch
        epoch_start = EPOCH_START_MS + call * EPOCH_SPAN_MS
        assert min(r["ts"] for r in records(store, late)) < epoch_start


def test_timestamps_rise_with_stragglers(
    written: tuple[LocalObjectStore, list[list[str]]],
) -> None:
    store, per_call = written
    ts = [r["ts"] for r in records(store, per_call[1][0])]
    backwards = sum(b < a for a, b in itertools.pairwise(ts))
    assert 0 < backwards < len(ts) // 5


def test_big_epochs_are_split_into_bounded_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    keys = write_epoch_files(
        store,
        ROOT,
        0,
        events_per_epoch=10_000,
        max_rows_per_file=500,
        late_files=False,
        duplicate_rate=0.0,
    )
    assert len(keys) == 4 * 5 and sum(len(records(store, k)) for k in keys) == 10_000
    assert max(len(records(store, k)) for k in keys) <= 500


def test_bad_generator_arguments(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    with pytest.raises(ConfigError):
        write_epoch_files(store, ROOT, -1)
    with pytest.raises(ConfigError):
        write_epoch_files(store, ROOT, 0, duplicate_rate=2.0)
    with pytest.raises(ConfigError):
        write_epoch_files(store, ROOT, 0, accounts=0)


# -- the reference ----------------------------------------------------------------------


def naive_balances(store: LocalObjectStore) -> dict[str, tuple[int, int, int]]:
    """Plain Python over every record: dedup with a set, fold into a dict."""
    seen: set[str] = set()
    out: dict[str, tuple[int, int, int]] = {}
    for info in store.list(f"{ROOT}/"):
        for record in records(store, info.key):
            if record["event_id"] in seen:
                continue
            seen.add(record["event_id"])
            balance, count, last = out.get(record["account_id"], (0, 0, -1))
            out[record["account_id"]] = (
                balance + record["amount"],
                count + 1,
                max(last, record["ts"]),
            )
    return out


def test_reference_counts_each_event_once(
    written: tuple[LocalObjectStore, list[list[str]]],
) -> None:
    store, per_call = written
    ref = compute_reference(store, ROOT)
    assert ref.files == sum(map(len, per_call))
    assert ref.duplicate_records > 100 and ref.conflicting_redeliveries == 0
    assert ref.input_records == len(ref.seen_events) + ref.duplicate_records
    assert ref.seen_events["event_id"].is_unique
    expected = naive_balances(store)
    got = {
        row.account_id: (row.balance, row.event_count, row.last_ts)
        for row in ref.balances.itertuples()
    }
    assert got == expected
    assert ref.balances["event_count"].sum() == len(ref.seen_events)


def test_reference_tables_are_sorted_with_stable_dtypes(
    written: tuple[LocalObjectStore, list[list[str]]],
) -> None:
    ref = compute_reference(written[0], ROOT)
    assert tuple(ref.balances.columns) == BALANCE_COLUMNS
    assert tuple(ref.alerts.columns) == ALERT_COLUMNS
    assert [str(t) for t in ref.balances.dtypes] == ["object", "int64", "int64", "int64"]
    assert [str(t) for t in ref.alerts.dtypes] == ["object", "int64", "int64"]
    assert ref.balances["account_id"].is_monotonic_increasing
    assert list(ref.balances.index) == list(range(len(ref.balances)))
    below = ref.balances[ref.balances["balance"] < ALERT_LIMIT]
    pd.testing.assert_frame_equal(ref.alerts, below[list(ALERT_COLUMNS)].reset_index(drop=True))
    assert 0 < len(ref.alerts) < len(ref.balances)


def test_reference_of_no_input_is_empty_and_typed(tmp_path: Path) -> None:
    ref = compute_reference(LocalObjectStore(tmp_path), ROOT)
    assert ref.files == 0 and ref.balances.empty and ref.alerts.empty
    assert [str(t) for t in ref.balances.dtypes] == ["object", "int64", "int64", "int64"]


def test_reference_upto_a_barrier_is_the_input_the_epoch_saw(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "all")
    source = PartitionedFileSource(store, ROOT, "jsonl")
    write_epochs(store, ROOT, range(2), events_per_epoch=400)
    barrier = source.capture_barrier()
    expected = compute_reference(store, ROOT)
    write_epochs(store, ROOT, range(2, 4), events_per_epoch=400)
    for upto in (barrier, barrier.to_json(), barrier.counts()):
        got = compute_reference(store, ROOT, upto=upto)
        pd.testing.assert_frame_equal(got.balances, expected.balances)
        pd.testing.assert_frame_equal(got.alerts, expected.alerts)


@pytest.mark.parametrize("calls_per_epoch", [1, 3])
def test_an_incremental_run_ends_where_the_reference_does(
    tmp_path: Path, calls_per_epoch: int
) -> None:
    """Per epoch: read only the new files, dedup against the state, fold into balances,
    publish alerts from the new state. However the input is cut into epochs, each epoch's
    output equals the reference over the input up to its barrier."""
    store = LocalObjectStore(tmp_path)
    source = PartitionedFileSource(store, ROOT, "jsonl", schema=PAYMENTS_SCHEMA)
    seen: set[str] = set()
    balances = pd.DataFrame({c: pd.Series(dtype="int64") for c in BALANCE_COLUMNS[1:]})
    previous: SourceBarrier | None = None
    for first in range(0, 6, calls_per_epoch):
        write_epochs(store, ROOT, range(first, first + calls_per_epoch), events_per_epoch=300)
        barrier = source.capture_barrier()
        batch = source.read_splits(source.files_between(previous, barrier)).to_pandas()
        batch = batch.drop_duplicates("event_id")
        batch = batch[~batch["event_id"].isin(seen)]
        seen.update(batch["event_id"])
        delta = batch.groupby("account_id").agg(
            balance=("amount", "sum"), event_count=("amount", "size"), last_ts=("ts", "max")
        )
        merged = pd.concat([balances, delta]).groupby(level=0)
        balances = merged.agg({"balance": "sum", "event_count": "sum", "last_ts": "max"})
        previous = barrier

        ref = compute_reference(store, ROOT, upto=barrier)
        published = balances.rename_axis("account_id").reset_index().astype({"account_id": object})
        published = published.sort_values("account_id", ignore_index=True)
        pd.testing.assert_frame_equal(published[list(BALANCE_COLUMNS)], ref.balances)
        alerts = published.loc[published["balance"] < ALERT_LIMIT, list(ALERT_COLUMNS)]
        pd.testing.assert_frame_equal(alerts.reset_index(drop=True), ref.alerts)
        assert seen == set(ref.seen_events["event_id"])


def test_reference_reports_conflicting_redeliveries() -> None:
    events = pd.DataFrame(
        {
            "account_id": ["a", "a", "b"],
            "event_id": ["e1", "e1", "e2"],
            "amount": [5, 7, 1],
            "ts": [1, 1, 2],
        }
    )
    ref = reference_from_events(events)
    assert ref.conflicting_redeliveries == 1
    assert ref.balances["balance"].tolist() == [5, 1]  # first occurrence wins
    assert Counter(ref.seen_events["event_id"]) == {"e1": 1, "e2": 1}
