"""The checker's view of a table sink's Delta table, read raw: the JSON commits of its
`_delta_log/` from the store, replayed here (each version's `add` and `remove` actions,
its commit info's batchpoint keys, the `txn` of the sink's application id) and the data
files' rows from their Parquet files: no delta-rs and no batchpoint code, so the
adapter's own reading is not what judges it. One read goes through the adapter on
purpose, at the end: time travel by checkpoint (`DeltaSinkTable.read(checkpoint)`, what
a user reads) is held against the same expectations.

The rules are Iceberg's (support/table_checker.py, invariant 14) in Delta's life cycle:
the log keeps every version, and GC's expiry deletes the copies that only versions of
dropped checkpoints read, so those versions stop reading, on purpose. `keep` is what the
control record keeps (the retained checkpoints and the head):

  table-unreadable     the current version, and every batchpoint commit of a kept
                       checkpoint, reads: each file it holds exists with the size and
                       the row count its `add` says
  table-version-wrong  every batchpoint commit of a kept checkpoint holds exactly that
                       checkpoint's rows (the sums as of its barrier)
  table-commit-twice   no two commits carry one SetTransaction version (one generation
                       and checkpoint)
  table-txn-backwards  the transaction only grows along the log (a commit below an
                       earlier one: a stale sync wrote over a newer position)
  table-txn-wrong      each batchpoint commit's transaction encodes the generation and
                       checkpoint its commit info names
  table-invalid-version  no version adds and removes one path (the protocol leaves a
                       commit's actions unordered: Spark and Delta Kernel drop the file,
                       delta-rs keeps it; read here as the former)
At the end (the quiet hours synced the table): `table-wrong`, the current version holds
the head's rows and its transaction names the head, and time travel through the adapter
to each kept checkpoint with a commit reads that checkpoint's rows; `orphan`, no copy in
the table's folder that nothing reads (not the current version, not a commit of an epoch
the sink manifest lists, not such an epoch's file).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from batchpoint.errors import ObjectNotFound
from batchpoint.storage.base import ObjectStore

LOG = "_delta_log/"
COPIES = "batchpoint/"
TXN_STEP = 10**12  # the adapter's encoding: generation * TXN_STEP + checkpoint
CHECKPOINT = "batchpoint.checkpoint-id"
GENERATION = "batchpoint.generation"
_COMMIT = re.compile(r"^(\d{20})\.json$")

Rows = list[tuple[str, int]]
#: A violation found here, before the checker stamps it with its seed and step.
Problem = tuple[str, str]


@dataclass(frozen=True)
class DeltaFile:
    key: str  # the store's key
    size: int
    rows: int | None  # the `add` action's numRecords


@dataclass(frozen=True)
class DeltaVersion:
    version: int
    checkpoint_id: int | None
    generation: int | None
    batchpoint: bool  # its commit info carries batchpoint's keys
    txn: int | None  # the sink's SetTransaction version this commit set
    files: tuple[DeltaFile, ...]  # what a reader of this version reads
    clashes: tuple[str, ...] = ()  # keys it both adds and removes (invalid Delta)

    def __str__(self) -> str:
        return f"version {self.version} (checkpoint {self.checkpoint_id})"


@dataclass(frozen=True)
class DeltaState:
    versions: tuple[DeltaVersion, ...]  # every version of the log, oldest first

    @property
    def current(self) -> DeltaVersion:
        return self.versions[-1]

    @property
    def position(self) -> int | None:
        """The checkpoint of the newest transaction (what the adapter's position is)."""
        txns = [v.txn for v in self.versions if v.txn is not None]
        return (txns[-1] % TXN_STEP or None) if txns else None


def decode(txn: int) -> str:
    generation, checkpoint = divmod(txn, TXN_STEP)
    return f"(generation {generation}, checkpoint {checkpoint or None})"


class DeltaReader:
    def __init__(self, store: ObjectStore, folder: str, app_id: str) -> None:
        self.store = store
        self.folder = folder  # the table's folder as a key of the store, with a slash
        self.app_id = app_id
        #: The time travel the end checks through the adapter: set by the model.
        self.adapter: Callable[[], Any] | None = None
        self._versions: list[DeltaVersion] = []  # replayed so far (commits are written once)
        self._live: dict[str, DeltaFile] = {}  # the files after the last replayed version
        self._contents: dict[tuple[str, int], Rows] = {}  # (key, size) -> its rows
        self._judged: set[int] = set()  # versions found holding their checkpoint's rows

    # -- reading the log ----------------------------------------------------------------

    def state(self) -> DeltaState | None:
        found = sorted(
            int(m.group(1))
            for info in self.store.list(self.folder + LOG)
            if (m := _COMMIT.match(info.key.rsplit("/", 1)[-1]))
        )
        for version in found[len(self._versions) :]:
            data = self.store.get(f"{self.folder}{LOG}{version:020d}.json").data
            self._versions.append(self._replay(version, data))
        return DeltaState(tuple(self._versions)) if self._versions else None

    def _replay(self, version: int, data: bytes) -> DeltaVersion:
        info: dict[str, Any] = {}
        txn = None
        added: dict[str, DeltaFile] = {}
        removed: set[str] = set()
        for line in data.decode().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "commitInfo" in action:
                info = action["commitInfo"]
            elif "add" in action:
                add = action["add"]
                stats = json.loads(add.get("stats") or "{}")
                key = self.folder + unquote(add["path"])
                added[key] = DeltaFile(key, int(add["size"]), stats.get("numRecords"))
            elif "remove" in action:
                removed.add(self.folder + unquote(action["remove"]["path"]))
            elif action.get("txn", {}).get("appId") == self.app_id:
                txn = int(action["txn"]["version"])
        # A commit's actions are unordered (the protocol): one adding and removing a path
        # is invalid, and is read as Spark's and Delta Kernel's replays read it, the
        # file dropped (delta-rs keeps it).
        for key in removed:
            self._live.pop(key, None)
        self._live.update((k, f) for k, f in added.items() if k not in removed)
        text = str(info.get(CHECKPOINT, ""))
        generation = info.get(GENERATION)
        return DeltaVersion(
            version,
            int(text) if text else None,
            int(generation) if generation is not None else None,
            GENERATION in info,
            txn,
            tuple(sorted(self._live.values(), key=lambda f: f.key)),
            tuple(sorted(removed & set(added))),
        )

    def rows(self, version: DeltaVersion) -> Rows | None:
        """The rows a version reads, sorted; None if a file cannot be read."""
        out: Rows = []
        for f in version.files:
            got = self._content(f.key, f.size)
            if got is None:
                return None
            out += got
        return sorted(out)

    def _content(self, key: str, size: int) -> Rows | None:
        if (key, size) not in self._contents:
            try:
                table = pq.read_table(io.BytesIO(self.store.get(key).data))
            except (ObjectNotFound, OSError, ValueError):
                return None  # not kept: a file is read again once it is there
            rows = [(str(r["p"]), int(r["sum"])) for r in table.to_pylist()]
            self._contents[(key, size)] = rows
        return self._contents[(key, size)]

    def copies(self) -> list[str]:
        return sorted(i.key for i in self.store.list(self.folder + COPIES))

    # -- the rules ----------------------------------------------------------------------

    def online(
        self, state: DeltaState, keep: set[int], want: Callable[[int], Rows | None]
    ) -> list[Problem]:
        """What holds at every instant (module doc): reads, rows, transactions."""
        out = [
            ("table-invalid-version", f"{v} adds and removes {key}")
            for v in state.versions
            for key in v.clashes
        ]
        out += self._unreadable(state, keep)
        out += self._wrong_versions(state, keep, want)
        out += self._transactions(state)
        return out

    def _kept(self, state: DeltaState, keep: set[int]) -> Iterator[DeltaVersion]:
        for v in state.versions:
            if v is state.current or (v.batchpoint and v.checkpoint_id in keep):
                yield v

    def _unreadable(self, state: DeltaState, keep: set[int]) -> Iterator[Problem]:
        for v in self._kept(state, keep):
            what = "current version" if v is state.current else "version"
            for f in v.files:
                info = self.store.head(f.key)
                if info is None:
                    problem = f"{f.key} is missing"
                elif info.size != f.size:
                    problem = f"{f.key} has {info.size} bytes, its add says {f.size}"
                elif (got := self._content(f.key, f.size)) is None or len(got) != f.rows:
                    problem = f"{f.key} does not hold the {f.rows} rows its add says"
                else:
                    continue
                where = f"{what} {v.version} (checkpoint {v.checkpoint_id}) of the table"
                yield "table-unreadable", f"{where}: {problem}"

    def _wrong_versions(
        self, state: DeltaState, keep: set[int], want: Callable[[int], Rows | None]
    ) -> Iterator[Problem]:
        for v in state.versions:
            if v.version in self._judged or not v.batchpoint or v.checkpoint_id not in keep:
                continue
            assert v.checkpoint_id is not None
            expected, got = want(v.checkpoint_id), self.rows(v)
            if expected is None or got is None:
                continue  # no outcome to judge by (reported as lost), or unreadable (above)
            if got != expected:
                yield "table-version-wrong", f"{v} holds {got}, its checkpoint gives {expected}"
            else:
                self._judged.add(v.version)

    def _transactions(self, state: DeltaState) -> Iterator[Problem]:
        seen: dict[int, int] = {}  # transaction -> the version that committed it first
        top = (-1, -1)  # the greatest transaction so far, and its version
        for v in state.versions:
            if v.batchpoint:
                said = None if v.generation is None else v.generation * TXN_STEP
                said = None if said is None else said + (v.checkpoint_id or 0)
                if v.txn is None or v.txn != said:
                    sets = "no transaction" if v.txn is None else decode(v.txn)
                    yield "table-txn-wrong", f"{v} of generation {v.generation} sets {sets}"
            if v.txn is None:
                continue
            if v.txn in seen:
                both = f"versions {seen[v.txn]} and {v.version}"
                yield "table-commit-twice", f"{both} both commit {decode(v.txn)}"
            elif v.txn < top[0]:
                after = f"after version {top[1]}'s {decode(top[0])}"
                yield "table-txn-backwards", f"version {v.version} commits {decode(v.txn)} {after}"
            seen.setdefault(v.txn, v.version)
            top = max(top, (v.txn, v.version))

    # -- at the end ---------------------------------------------------------------------

    def final(
        self,
        head: int | None,
        keep: set[int],
        want: Callable[[int], Rows | None],
        manifest: dict[str, Any] | None,
    ) -> list[Problem]:
        state = self.state()
        if state is None:
            return [] if head is None else [("table-wrong", f"no table, the head is {head}")]
        out = self.online(state, keep, want)
        if any(rule == "table-unreadable" for rule, _ in out):
            return out
        rows = self.rows(state.current) or []
        expected = (want(head) or []) if head is not None else []
        if (head is not None or rows) and (rows != expected or state.position != head):
            out.append(
                (
                    "table-wrong",
                    f"the table's current version {state.current.version} (checkpoint "
                    f"{state.position}) holds {rows}, the head {head} gives {expected}",
                )
            )
        out += self._time_travel(state, head, keep, want)
        out += self._orphans(state, manifest)
        return out

    def _time_travel(
        self,
        state: DeltaState,
        head: int | None,
        keep: set[int],
        want: Callable[[int], Rows | None],
    ) -> list[Problem]:
        """What a user reads through the adapter: now, and as of each kept checkpoint."""
        if self.adapter is None:
            return []
        adapter = self.adapter()
        committed = {v.checkpoint_id for v in state.versions if v.batchpoint}
        out: list[Problem] = []
        for cid in [None, *sorted(c for c in keep if c in committed)]:
            expected = want(cid) if cid is not None else (want(head) if head is not None else [])
            try:
                got = sorted((str(r["p"]), int(r["sum"])) for r in adapter.read(cid).to_pylist())
            except Exception as exc:  # the adapter's or delta-rs's: reported as it is
                out.append(("table-unreadable", f"time travel to checkpoint {cid}: {exc}"))
                continue
            if expected is not None and got != expected:
                at = "now" if cid is None else f"as of checkpoint {cid}"
                out.append(("table-wrong", f"the adapter reads {got} {at}, expected {expected}"))
        return out

    def _orphans(self, state: DeltaState, manifest: dict[str, Any] | None) -> list[Problem]:
        epochs: list[dict[str, Any]] = (manifest or {}).get("epochs", [])
        listed = {int(e["checkpoint_id"]) for e in epochs}
        read = {f.key for f in state.current.files}
        for v in state.versions:
            if v.batchpoint and v.checkpoint_id in listed:
                read |= {f.key for f in v.files}
        read |= {self.folder + COPIES + f["path"] for e in epochs for f in e.get("files", [])}
        left = [key for key in self.copies() if key not in read]
        if not left:
            return []
        what = f"{len(left)} copy(ies) in the Delta table's folder that nothing reads"
        return [("orphan", f"{what} after the final GC: e.g. {left[0]}")]
