"""The `payments` pipeline computed the plain way: pandas over all its input at once.

This is the oracle the checkpointed, incremental, failure-injected runs are compared with.
It reads the files straight from the store with its own few lines of listing (not through
`PartitionedFileSource`), so a bug in the source cannot hide by being in both.

Definitions (each independent of how the input is cut into epochs and subtasks, which is
what lets an incremental run reproduce them exactly):

* **input**: every file under `<root>/<partition>/` whose path has no part starting with
  '.' or '_'; with `upto`, only the first `upto[partition]` files of each partition in
  name order (the input an epoch with that barrier has seen).
* **order**: records ordered by (file name, partition name, line). The demo names files
  by arrival epoch first, so this order puts every record of an epoch before any record
  of a later epoch.
* **dedup** (operator `dedup`, state: event ids seen): an event_id counts once, the first
  in that order wins. Re-deliveries are identical records, so which copy wins changes no
  output; the rule only makes the choice deterministic. `conflicting_redeliveries` counts
  event ids whose copies differ, which the demo data never has.
* **balances** (operator `balances`, and the published `balances` sink): per account over
  the deduplicated events: `balance` = sum of amounts, `event_count` = number of events,
  `last_ts` = the largest ts (not the last to arrive: late and out-of-order records exist).
* **alerts** (sink): the accounts whose balance *now* is strictly below `alert_limit`,
  with `balance` and `last_ts`; republished whole after each epoch, like `balances`.

Why alerts are a function of the final state: the state after an epoch depends only on
the *set* of events read so far (sum, count and max commute), not on epoch boundaries,
file order within an epoch, parallelism or replays. An event-style definition ("each
time a balance crosses below the limit") would depend on the order events are applied,
which is undefined across parallel subtasks within an epoch, would report different
crossings for different epoch cadences (a dip and recovery inside one epoch is invisible),
and with timestamp order would have to rewrite history whenever a late file arrives.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
import pyarrow.json as pa_json

from batchpoint.storage.base import ObjectStore
from demo.payments_data import ALERT_LIMIT, PAYMENTS_SCHEMA

BALANCE_COLUMNS = ("account_id", "balance", "event_count", "last_ts")
ALERT_COLUMNS = ("account_id", "balance", "last_ts")


@dataclass(frozen=True)
class PaymentsReference:
    seen_events: pd.DataFrame  # [event_id], sorted: the dedup operator's state
    balances: pd.DataFrame  # BALANCE_COLUMNS, sorted by account_id
    alerts: pd.DataFrame  # ALERT_COLUMNS, sorted by account_id
    files: int
    input_records: int
    conflicting_redeliveries: int

    @property
    def duplicate_records(self) -> int:
        return self.input_records - len(self.seen_events)


def compute_reference(
    store: ObjectStore,
    root_key: str,
    *,
    alert_limit: int = ALERT_LIMIT,
    upto: Mapping[str, object] | None = None,
) -> PaymentsReference:
    """The expected state and sink contents after reading the input (all of it, or up to
    `upto`: partition -> file count, or a SourceBarrier)."""
    keys = input_files(store, root_key, upto)
    events = read_events(store, keys)
    return reference_from_events(events, alert_limit=alert_limit, files=len(keys))


def input_files(
    store: ObjectStore, root_key: str, upto: Mapping[str, object] | None = None
) -> list[str]:
    """Input keys in the reference's record order: by (file name, partition)."""
    root = root_key.strip("/")
    prefix = f"{root}/" if root else ""
    by_partition: dict[str, list[str]] = {}
    for info in store.list(prefix):
        partition, _, name = info.key[len(prefix) :].partition("/")
        if not name or any(part.startswith((".", "_")) for part in (partition, *name.split("/"))):
            continue
        by_partition.setdefault(partition, []).append(name)
    chosen: list[tuple[str, str]] = []
    for partition, names in by_partition.items():
        names.sort()
        if upto is not None:
            names = names[: _count(upto.get(partition, 0))]
        chosen.extend((name, partition) for name in names)
    return [f"{prefix}{partition}/{name}" for name, partition in sorted(chosen)]


def _count(value: object) -> int:
    # Accepts an int, a PartitionOffset, or its JSON form.
    if isinstance(value, Mapping):
        return int(value["offset"])
    return int(getattr(value, "offset", value))  # type: ignore[arg-type]


def read_events(store: ObjectStore, keys: list[str]) -> pd.DataFrame:
    options = pa_json.ParseOptions(
        explicit_schema=PAYMENTS_SCHEMA, unexpected_field_behavior="ignore"
    )
    frames = []
    for key in keys:
        data = store.get(key).data
        if data and not data.isspace():
            frames.append(pa_json.read_json(io.BytesIO(data), parse_options=options).to_pandas())
    if not frames:
        return PAYMENTS_SCHEMA.empty_table().to_pandas()
    return pd.concat(frames, ignore_index=True)


def reference_from_events(
    events: pd.DataFrame, *, alert_limit: int = ALERT_LIMIT, files: int = 0
) -> PaymentsReference:
    """The reference over `events`, which must already be in the reference's order."""
    first = events.drop_duplicates("event_id", keep="first")
    # Only re-delivered ids can conflict; looking at those alone keeps this cheap.
    redelivered = events[events["event_id"].duplicated(keep=False)]
    distinct_copies = redelivered.drop_duplicates(list(PAYMENTS_SCHEMA.names))
    conflicting = distinct_copies.loc[distinct_copies["event_id"].duplicated(), "event_id"]
    seen = pd.DataFrame({"event_id": first["event_id"].astype(object)})
    seen = seen.sort_values("event_id", kind="stable", ignore_index=True)
    balances = (
        first.groupby("account_id", sort=True)
        .agg(
            balance=("amount", "sum"),
            event_count=("amount", "size"),
            last_ts=("ts", "max"),
        )
        .reset_index()
    )
    balances = balances.astype(
        {"account_id": object, "balance": "int64", "event_count": "int64", "last_ts": "int64"}
    )[list(BALANCE_COLUMNS)]
    alerts = balances.loc[balances["balance"] < alert_limit, list(ALERT_COLUMNS)]
    return PaymentsReference(
        seen_events=seen,
        balances=balances.reset_index(drop=True),
        alerts=alerts.reset_index(drop=True),
        files=files,
        input_records=len(events),
        conflicting_redeliveries=int(conflicting.nunique()),
    )
