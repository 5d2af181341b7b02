"""The model's independent checker: it reads the store directly, as raw JSON and bytes,
and never asks the coordinator, GC or the sink publisher what they think. It knows only
the documented layout (pipelines/<p>/...) and the record fields, and recomputes what the
sinks and the state must hold from the source files alone.

A table sink's Iceberg table is read raw too (support/table_checker.py): the catalog's
SQLite row, the metadata and manifests from the store; a Delta table's log likewise
(support/delta_checker.py), which judges it by the same rules in Delta's life cycle.

Violations are data (seed, step, rule, message), so a thousand schedules can be run and
reported, and a failing one replayed from its seed.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.parquet as pq

from batchpoint.storage.base import ObjectStore
from support.delta_checker import DeltaReader, Problem, Rows
from support.faulty_store import Write
from support.model_world import PARTITIONS, PIPELINE, SOURCE, SOURCE_ROOT
from support.table_checker import TableReader, TableState

ROOT = f"pipelines/{PIPELINE}/"
CHECKPOINTS = ROOT + "checkpoints/"
SINKS = ("log", "sums")


@dataclass(frozen=True)
class Violation:
    seed: int
    step: int
    rule: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"seed {self.seed} step {self.step} [{self.rule}] {self.message}"


def _chk(cid: int) -> str:
    return f"chk-{cid:010d}"


def _cid(name: str) -> int | None:
    name = name.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")
    return int(name[4:]) if name.startswith("chk-") and name[4:].isdigit() else None


@dataclass
class Control:
    """The decision state as stored, whatever the record's generation of format."""

    head: int | None
    generation: int
    retained: set[int]
    pending: dict[int, str]  # id -> type, of checkpoints admitted and not yet settled
    raw_kind: str
    discarded: set[int] = field(default_factory=set)
    repaired_at: str | None = None  # set by `batchpoint repair`'s write
    restored_to: int | None = None  # the target of the restore that began this generation


class Checker:
    def __init__(
        self,
        store: ObjectStore,
        seed: int,
        max_concurrent: int,
        pipeline: str = PIPELINE,
        table: TableReader | DeltaReader | None = None,
    ) -> None:
        self.store = store
        #: The `sums` sink's table (None: the checks of tables are off).
        self.table = table
        self.root = f"pipelines/{pipeline}/"
        self.checkpoints = self.root + "checkpoints/"
        self.seed = seed
        self.max_concurrent = max_concurrent
        self._last_head: tuple[int, int | None] | None = None  # (generation, head)
        self._last_repair: str | None = None
        self._last_next_id = 0
        self._handles: dict[int, list[dict[str, Any]]] = {}
        #: Checkpoints a restore (not a repair) moved the head to: the only imports the
        #: head may stand on.
        self._restored: set[int] = set()
        #: Checkpoints whose chain of bases holds no import but a restored one.
        self._chain_checked: set[int] = set()
        self._rows: dict[int, Rows | None] = {}  # a completed checkpoint's `sums` rows

    # -- raw reads -----------------------------------------------------------------------

    def _json(self, key: str) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.store.get(key).data)
        except Exception:  # missing, or not JSON: the rules that need it report it
            return None
        return doc if isinstance(doc, dict) else None

    def outcome(self, cid: int) -> dict[str, Any] | None:
        return self._json(f"{self.checkpoints}{_chk(cid)}/outcome.json")

    def control_damaged(self) -> bool:
        """Whether the control record is there but cannot be read (until a repair)."""
        key = self.root + "head.json"
        return self.store.head(key) is not None and self._json(key) is None

    def control(self) -> Control | None:
        doc = self._json(self.root + "head.json")
        if doc is None:
            return Control(None, 0, self._marker_ids(), self._active(), "none")
        kind = doc.get("kind")
        if kind == "pipeline-control":
            retained = {int(e["id"]) for e in doc.get("retained", [])}
            pending = {
                int(e["id"]): str(e.get("type", "checkpoint")) for e in doc.get("pending", [])
            }
            discarded = {int(e["id"]) for e in doc.get("discarded", [])}
            generation = int(doc.get("restore_generation", 0))
            restore = doc.get("restore") or {}
            target = restore.get("target") if restore.get("generation") == generation else None
            return Control(
                doc.get("head"), generation, retained, pending, kind, discarded,
                doc.get("repaired_at"), target,
            )  # fmt: skip
        if kind == "head-pointer":
            return Control(
                doc.get("checkpoint_id"), int(doc.get("restore_generation", 0)),
                self._marker_ids(), self._active(), kind,
            )  # fmt: skip
        return None

    def _marker_ids(self) -> set[int]:
        return {
            cid
            for info in self.store.list(self.root + "retained/")
            if (cid := _cid(info.key)) is not None
        }

    def _active(self) -> dict[int, str]:
        out = {}
        for info in self.store.list(self.root + "active/"):
            cid = _cid(info.key)
            doc = self._json(info.key) if cid is not None else None
            if cid is not None:
                out[cid] = str((doc or {}).get("type", "checkpoint"))
        return out

    def handles(self, cid: int, cached: bool = False) -> list[dict[str, Any]] | None:
        """The files a COMPLETED checkpoint references, or None if it has no such outcome.
        `cached`: reuse what an earlier call read (an outcome is write-once), for the
        checks between steps; the final checks always read again."""
        if cached and cid in self._handles:
            return self._handles[cid]
        doc = self.outcome(cid)
        if doc is None or str(doc.get("status", "")).upper() != "COMPLETED":
            return None
        found = [h for ack in doc.get("acks", []) for h in ack.get("handles", [])]
        self._handles[cid] = found
        return found

    # -- checks while the schedule runs ------------------------------------------------

    def online(self, step: int) -> list[Violation]:
        """What must hold at every instant: checked between two storage calls."""
        out: list[Violation] = []
        if self.control_damaged():
            return []  # damaged on purpose (the model's fault): judged once repaired
        control = self.control()
        if control is None:
            return [self._v(step, "control-unreadable", "head.json has an unknown kind")]
        running = [
            cid
            for cid, kind in control.pending.items()
            if kind != "savepoint"
            and self.store.head(f"{self.checkpoints}{_chk(cid)}/outcome.json") is None
        ]
        if len(running) > self.max_concurrent:
            out.append(
                self._v(
                    step,
                    "max-concurrent",
                    f"{len(running)} checkpoints pending at once {sorted(running)}, "
                    f"max_concurrent is {self.max_concurrent}",
                )
            )
        if control.head is not None:
            out += self._files_present(step, control.head, "head", sizes_only=True, cached=True)
        now = (control.generation, control.head)
        repaired = control.repaired_at not in (None, self._last_repair)
        if now != self._last_head:
            if not repaired and control.restored_to is not None:
                new_generation = self._last_head is None or self._last_head[0] != now[0]
                if new_generation:
                    self._restored.add(control.restored_to)
            out += self._head_on_import(step, control.head)
        if self._last_head is not None:
            gen, head = self._last_head
            if control.generation < gen:
                out.append(self._v(step, "generation-backwards", f"{gen} -> {control.generation}"))
            elif control.generation == gen and (head or 0) > (control.head or 0):
                out.append(
                    self._v(step, "head-backwards", f"head {head} -> {control.head} in gen {gen}")
                )
            # A repair is a restore to the head the records prove: in the model nothing
            # is quarantined or damaged, so that head is never behind the one it replaced
            # (a repair that wrote over a newer head lost a completed checkpoint).
            if repaired and head is not None and (control.head or 0) < head:
                out.append(self._v(step, "repair-head-backwards", f"head {head} -> {control.head}"))
        self._last_head = now
        self._last_repair = control.repaired_at
        ids = self._json(self.root + "ids.json")
        next_id = int(ids.get("next_id", 0)) if ids else 0
        if next_id < self._last_next_id:
            out.append(self._v(step, "ids-backwards", f"next id {self._last_next_id} -> {next_id}"))
        self._last_next_id = max(next_id, self._last_next_id)
        return out

    def _head_on_import(self, step: int, head: int | None) -> list[Violation]:
        """The head is never an imported savepoint, nor a checkpoint built on one, that no
        restore chose (issue 36): an import is beside the timeline, and completing it or
        a checkpoint on it must not move the head onto it with no new generation, no
        gate and no sink rewind. Its bases are walked down to one walked before."""
        walked: list[int] = []
        cid = head
        while cid is not None and cid not in self._chain_checked:
            doc = self.outcome(cid)
            if doc is None:
                return []  # lost (reported as such), or its records pruned: judged before
            body = doc.get("checkpoint") or {}
            if (body.get("properties") or {}).get("imported_from") and cid not in self._restored:
                return [
                    self._v(
                        step,
                        "head-on-import",
                        f"head {head} is imported savepoint {cid} or built on it, and no "
                        "restore chose it",
                    )
                ]
            walked.append(cid)
            base = body.get("base_checkpoint_id")
            cid = base if isinstance(base, int) and base < cid else None
        self._chain_checked.update(walked)
        return []

    def _built_on_imports(self, step: int) -> list[Violation]:
        """No trigger built on an import no restore chose, whatever became of what it
        built (issue 36's rule; `head-on-import` is what it would cost): read from each
        checkpoint's own record (every id handed out), and its base's."""
        out = []
        ids = self._json(self.root + "ids.json") or {}
        for cid in range(1, int(ids.get("next_id", 1))):
            base = self._base(cid)
            if base is None or base in self._restored:
                continue
            doc = self.outcome(base) or self._json(f"{self.root}active/{_chk(base)}.json") or {}
            body = doc.get("checkpoint", doc)
            if (body.get("properties") or {}).get("imported_from"):
                message = f"checkpoint {cid} was built on imported savepoint {base}"
                out.append(self._v(step, "built-on-import", message + ", which no restore chose"))
        return out

    def online_table(self, step: int) -> list[Violation]:
        """Every snapshot the table lists reads (checked after a table or a delete
        changed: invariant 14 holds at every instant, not only at the end)."""
        if self.table is None:
            return []
        if isinstance(self.table, DeltaReader):
            delta = self.table.state()
            if delta is None:
                return []
            return self._stamp(step, self.table.online(delta, self._kept(), self.rows_at))
        state = self.table.state()
        return [] if state is None else self._table_reads(step, state)

    def _kept(self) -> set[int]:
        """What the control record keeps now (nothing while it is damaged: judged once
        repaired)."""
        control = None if self.control_damaged() else self.control()
        if control is None:
            return set()
        return set(control.retained) | ({control.head} if control.head is not None else set())

    def rows_at(self, cid: int) -> Rows | None:
        """The `sums` rows as of a completed checkpoint, from the source files (None
        without its COMPLETED outcome). A barrier is fixed: kept once read."""
        if cid not in self._rows:
            doc = self.outcome(cid)
            if doc is None or str(doc.get("status", "")).upper() != "COMPLETED":
                return None
            sums = self.expected(doc["checkpoint"]["barrier"])[0]
            self._rows[cid] = sorted(zip(PARTITIONS, sums, strict=True))
        return self._rows[cid]

    def _stamp(self, step: int, problems: list[Problem]) -> list[Violation]:
        return [self._v(step, rule, message) for rule, message in problems]

    def _table_reads(self, step: int, state: TableState) -> list[Violation]:
        out = []
        table = self.table if isinstance(self.table, TableReader) else None
        for snapshot, problem in table.problems(state) if table else []:
            what = "current snapshot" if snapshot.snapshot_id == state.current else "snapshot"
            out.append(
                self._v(
                    step,
                    "table-unreadable",
                    f"{what} {snapshot.snapshot_id} (checkpoint {snapshot.checkpoint_id}) "
                    f"of the table: {problem}",
                )
            )
        return out

    # -- checks after the final settle and GC -----------------------------------------

    def final(
        self, step: int, writes: Iterable[Write], allocated: Iterable[int]
    ) -> list[Violation]:
        out: list[Violation] = []
        control = self.control()
        if control is None:
            return [self._v(step, "control-unreadable", "head.json has an unknown kind")]
        keep = set(control.retained) | ({control.head} if control.head is not None else set())
        for cid in sorted(keep):
            out += self._files_present(step, cid, "retained", sizes_only=False)
        if control.head is not None and control.head not in control.retained:
            out.append(self._v(step, "head-not-retained", f"head {control.head} is not retained"))
        if self._last_head is None and control.restored_to is not None:
            self._restored.add(control.restored_to)  # not online: the last restore is all known
        out += self._head_on_import(step, control.head)
        out += self._built_on_imports(step)
        out += self._state_and_sinks(step, control)
        out += self._table_final(step, control)
        out += self._orphans(step, control, keep)
        out += self._write_once(step, writes)
        counts = Counter(allocated)
        reused = sorted(cid for cid, n in counts.items() if n > 1)
        if reused:
            out.append(self._v(step, "id-reused", f"ids handed out twice: {reused}"))
        return out

    def _files_present(
        self, step: int, cid: int, what: str, sizes_only: bool, cached: bool = False
    ) -> list[Violation]:
        handles = self.handles(cid, cached)
        if handles is None:
            return [self._v(step, "lost-checkpoint", f"{what} {cid} has no COMPLETED outcome")]
        out = []
        for h in handles:
            info = self.store.head(h["path"])
            if info is None:
                out.append(self._v(step, "lost-file", f"{what} {cid}: {h['path']} is missing"))
            elif info.size != h["size"]:
                out.append(self._v(step, "bad-file", f"{what} {cid}: {h['path']} size changed"))
            elif not sizes_only:
                digest = hashlib.sha256(self.store.get(h["path"]).data).hexdigest()
                if digest != h["sha256"]:
                    out.append(self._v(step, "bad-file", f"{what} {cid}: {h['path']} sha256"))
        return out

    def expected(self, barrier: dict[str, Any]) -> tuple[list[int], Counter[str]]:
        """Per-partition sums and the multiset of log lines of every source record up to
        a barrier, straight from the source files."""
        offsets = barrier.get(SOURCE, {})
        sums = [0] * len(PARTITIONS)
        lines: Counter[str] = Counter()
        for i, partition in enumerate(PARTITIONS):
            prefix = f"{SOURCE_ROOT}/{partition}/"
            entry = offsets.get(partition, 0)
            n = entry.get("offset", 0) if isinstance(entry, dict) else int(entry)
            keys = sorted(info.key for info in self.store.list(prefix))[:n]
            for key in keys:
                name = key.rsplit("/", 1)[-1]
                for j, text in enumerate(self.store.get(key).data.decode().splitlines()):
                    v = int(json.loads(text)["v"])
                    sums[i] += v
                    lines[f"{partition}/{name}#{j}:{v}"] += 1
        return sums, lines

    def _state_and_sinks(self, step: int, control: Control) -> list[Violation]:
        out: list[Violation] = []
        if control.head is None:
            expect_sums, expect_lines = [0] * len(PARTITIONS), Counter()
        else:
            doc = self.outcome(control.head)
            if doc is None:
                return out  # reported as a lost checkpoint
            expect_sums, expect_lines = self.expected(doc["checkpoint"]["barrier"])
            for ack in doc.get("acks", []):
                if ack["task"].startswith("total#"):
                    i = int(ack["task"].split("#")[1])
                    data = self._bytes(ack["handles"][0]["path"])
                    if data is not None and data.decode() != str(expect_sums[i]):
                        out.append(
                            self._v(
                                step,
                                "state-wrong",
                                f"head {control.head} {ack['task']} holds {data.decode()}, "
                                f"the source gives {expect_sums[i]}",
                            )
                        )
        visible = {sink: self._visible(sink) for sink in SINKS}
        lines: Counter[str] = Counter()
        for data in visible["log"]:
            lines.update(data.decode().splitlines())
        if lines != expect_lines:
            extra = sorted((lines - expect_lines).elements())[:3]
            missing = sorted((expect_lines - lines).elements())[:3]
            out.append(
                self._v(
                    step,
                    "sink-wrong",
                    f"append sink 'log' for head {control.head}: {sum(lines.values())} lines, "
                    f"expected {sum(expect_lines.values())} (extra {extra}, missing {missing})",
                )
            )
        want = _sums_text(expect_sums)
        got = [_parquet_sums(d) for d in visible["sums"]]
        if (control.head is None and got not in ([], [want])) or (
            control.head is not None and got != [want]
        ):
            out.append(
                self._v(
                    step,
                    "sink-wrong",
                    f"snapshot sink 'sums' for head {control.head}: {got!r}, expected {want!r}",
                )
            )
        return out

    def _table_final(self, step: int, control: Control) -> list[Violation]:
        """After the quiet hours (the catalog back, one sync): every snapshot listed
        reads, and the current one holds the sums as of the head."""
        if self.table is None:
            return []
        if isinstance(self.table, DeltaReader):
            keep = set(control.retained) | ({control.head} if control.head is not None else set())
            manifest = self.manifest("sums")
            found = self.table.final(control.head, keep, self.rows_at, manifest)
            return self._stamp(step, found)
        state = self.table.state()
        if state is None:
            if control.head is None:
                return []
            return [self._v(step, "table-wrong", f"no table, the head is {control.head}")]
        out = self._table_reads(step, state)
        if out:
            return out
        doc = self.outcome(control.head) if control.head is not None else None
        sums = self.expected(doc["checkpoint"]["barrier"])[0] if doc else [0] * len(PARTITIONS)
        rows = sorted((str(r["p"]), int(r["sum"])) for r in self.table.rows(state))
        want = sorted(zip(PARTITIONS, sums, strict=True))
        if control.head is None and rows in ([], want):
            return out
        if rows != want or state.position != control.head:
            out.append(
                self._v(
                    step,
                    "table-wrong",
                    f"the table's current snapshot (checkpoint {state.position}) holds "
                    f"{rows}, the head {control.head} gives {want}",
                )
            )
        return out

    def _bytes(self, key: str) -> bytes | None:
        return self.store.get(key).data if self.store.head(key) is not None else None

    def _published_base(self, cid: int) -> int | None:
        """The checkpoint whose output a reader as of `cid` follows while `cid` published
        none: its base; for a savepoint of this storage imported (it has no base), the base
        the savepoint was taken on (the rule of protocol/sinks.py's `published_base`)."""
        base = self._base(cid)
        if base is not None:
            return base
        doc = self.outcome(cid) or self._json(f"{self.root}active/{_chk(cid)}.json") or {}
        props = doc.get("checkpoint", doc).get("properties") or {}
        taken_on = props.get("savepoint_base_checkpoint_id")
        here = props.get("savepoint_taken_from") == self.store.uri
        if props.get("imported_from") and here and isinstance(taken_on, int) and taken_on < cid:
            return taken_on
        return None

    def _base(self, cid: int) -> int | None:
        doc = self.outcome(cid) or self._json(f"{self.root}active/{_chk(cid)}.json") or {}
        body = doc.get("checkpoint", doc)
        base = body.get("base_checkpoint_id")
        return base if isinstance(base, int) and base < cid else None

    def sink_names(self) -> list[str]:
        prefix = self.root + "sinks/"
        return [p[len(prefix) :].strip("/") for p in self.store.list_dirs(prefix)]

    def manifest(self, sink: str) -> dict[str, Any] | None:
        return self._json(f"{self.root}sinks/{sink}/manifest.json")

    @staticmethod
    def _epochs(manifest: dict[str, Any]) -> dict[int, dict[str, Any]]:
        return {int(e["checkpoint_id"]): e for e in manifest.get("epochs", [])}

    @classmethod
    def _chain(cls, manifest: dict[str, Any], start: int | None) -> list[dict[str, Any]]:
        epochs = cls._epochs(manifest)
        out, cid, seen = [], start, set()
        while cid is not None and cid in epochs and cid not in seen:
            seen.add(cid)
            out.append(epochs[cid])
            cid = epochs[cid].get("base_checkpoint_id")
        return out[::-1]

    def _visible(self, sink: str) -> list[bytes]:
        manifest = self.manifest(sink)
        if manifest is None:
            return []
        chain = self._chain(manifest, manifest.get("current"))
        if manifest.get("mode") == "snapshot":
            chain = chain[-1:]
        out = []
        for epoch in chain:
            for f in epoch.get("files", []):
                data = self._bytes(f["path"])
                out.append(data if data is not None else b"<missing>\n")
        return out

    def orphans(self) -> list[str]:
        """Data files nothing retained, pending or reachable in a sink references."""
        control = self.control()
        assert control is not None, "unreadable control record"
        keep = set(control.retained) | ({control.head} if control.head is not None else set())
        return self._orphan_keys(control, keep)

    def _orphans(self, step: int, control: Control, keep: set[int]) -> list[Violation]:
        orphans = self._orphan_keys(control, keep)
        if not orphans:
            return []
        ids = sorted({_cid(k.split("/")[3]) for k in orphans} - {None})  # type: ignore[misc]
        return [
            self._v(
                step,
                "orphan",
                f"{len(orphans)} unreferenced data file(s) after the final GC, in checkpoints "
                f"{ids[:10]}: e.g. {orphans[0]}",
            )
        ]

    def _orphan_keys(self, control: Control, keep: set[int]) -> list[str]:
        referenced: set[str] = set()
        for cid in keep:
            referenced.update(h["path"] for h in self.handles(cid) or [])
        for cid in control.pending:
            for info in self.store.list(f"{self.checkpoints}{_chk(cid)}/acks/"):
                doc = self._json(info.key) or {}
                referenced.update(h["path"] for h in doc.get("handles", []))
        roots = set(keep) | set(control.pending)
        for sink in self.sink_names():
            manifest = self.manifest(sink)
            if manifest is None:
                continue
            epochs = self._epochs(manifest)
            for root in roots | {manifest.get("current")}:
                # A kept checkpoint not published (yet) is read through its nearest
                # published ancestor, until its own publish.
                start = root
                while start is not None and start not in epochs:
                    start = self._published_base(start)
                chain = self._chain(manifest, start)
                # A snapshot sink's reader sees one epoch; an append sink's, the chain.
                for epoch in chain[-1:] if manifest.get("mode") == "snapshot" else chain:
                    referenced.update(f["path"] for f in epoch.get("files", []))
        # A table snapshot not expired reads its files (invariant 14).
        if isinstance(self.table, TableReader):  # a Delta table reads only its own copies
            state = self.table.state()
            if state is not None:
                referenced |= self.table.referenced_keys(state)
        files = [i.key for i in self.store.list(self.checkpoints) if "/data/" in i.key]
        return sorted(k for k in files if k not in referenced)

    def _write_once(self, step: int, writes: Iterable[Write]) -> list[Violation]:
        out = []
        by_key: dict[str, list[Write]] = {}
        for w in writes:
            if w.key.startswith(self.checkpoints) and (
                w.key.endswith("/outcome.json") or "/acks/" in w.key
            ):
                by_key.setdefault(w.key, []).append(w)
        for key, ws in sorted(by_key.items()):
            bad = [w for w in ws if w.op in ("put", "replace", "upload_file")]
            contents = {w.digest for w in ws if w.op == "create"}
            if bad or len(contents) > 1:
                ops = ", ".join(w.op for w in ws)
                out.append(self._v(step, "write-once", f"{key} written more than once ({ops})"))
        return out

    def _v(self, step: int, rule: str, message: str) -> Violation:
        return Violation(self.seed, step, rule, message)


def _sums_text(sums: list[int]) -> str:
    return "".join(f"{p}={s}\n" for p, s in zip(PARTITIONS, sums, strict=True))


def _parquet_sums(data: bytes) -> str:
    """A `sums` file as text (`p0=3\n...`), or what it holds when it is no such file."""
    try:
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    except Exception:  # missing (b"<missing>"), truncated: shown as it is
        return data.decode(errors="replace")
    return "".join(f"{r['p']}={r['sum']}\n" for r in rows)
