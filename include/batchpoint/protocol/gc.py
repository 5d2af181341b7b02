"""Garbage collection (Flink's discard of subsumed and aborted checkpoints), fenced by the
control record so no concurrent finalize, restore, import or export can lose a file.

Rule: GC deletes files only under the data folders of ids in the control record's
`discarded` queue, and never one referenced by a retained checkpoint, the head, a
pending checkpoint's acks (listed after the control read), a sink manifest epoch or an
unpublished epoch a retained checkpoint's publish would publish (`unpublished.py`). An
id enters `discarded` only after leaving `retained`/`pending` in the same CAS that
decided it, and never comes back; a new checkpoint's base is always the head or an
admitted checkpoint (never discarded), so a checkpoint admitted later references a
discarded folder's files only by sharing them with its base (incremental checkpoints),
and the base, protected while it is pending, references them too. A queue entry leaves
(CAS) only `grace` seconds after it entered, so files a late or zombie writer puts
there after one pass are collected by a later one, and only once none of its files is
referenced any more. Work per run is the queue (plus the retained set and the
manifests), not the history; a shared folder stays queued at most as long as a
changelog chain. Record history: outcome and ack records of collected checkpoints
beyond the newest `history_limit` are pruned once their data is gone. Unreadable
records are left alone and reported as findings; while one could hold references,
nothing is deleted. A missing control record is such a finding where the pipeline has
checkpoints or sinks (it reads as nothing retained: `batchpoint repair` rebuilds it), and
history is pruned only for ids collected or dequeued as of the pass's own references.

Table sinks (`SinkTables`, injected): after the manifests are pruned, their tables
expire the snapshots of dropped epochs, and every file an unexpired snapshot reads is a
reference, wherever the table stands against its manifest; a folder holding such a file
stays queued. If a table cannot be expired or read, nothing is deleted in that pass.
The pruning keeps every epoch a table sync has pinned for a commit that can still land
(`protocol/table_pins.py::TablePin`), so a sync that planned on a manifest read before this
pass never commits an epoch whose files this pass deleted.

Late writers: a zombie that writes into a folder after its id left the queue
(`collected`) is caught by a later pass: each pass sweeps the folders of the newest
`COLLECTED_SWEEP` collected ids, and pruning an id's records deletes its unreferenced
data first, so a late file lives at most until `history_limit` newer ids are collected
and never blocks the pruning. Per pass that is a constant number of extra listings.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from attrs import define

from batchpoint.errors import CheckpointError, RecordError
from batchpoint.protocol.checkpoint import CheckpointOutcome
from batchpoint.protocol.checkpoint_files import CheckpointFiles
from batchpoint.protocol.control import (
    COLLECTED_CAP,
    ControlRecord,
    ControlUnreadable,
    DiscardedEntry,
)
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.ports import Clock, Count, ProgressFn, RollForward, count_due
from batchpoint.protocol.reads import CheckpointReads
from batchpoint.protocol.sink_tables import SinkTables, TableReferences
from batchpoint.protocol.sinks import SinkManifest, SinkPublisher, published_base
from batchpoint.protocol.unpublished import unpublished_chains

#: Folders of collected ids swept per pass for late writers (the newest ones).
COLLECTED_SWEEP = 8
_NO_CONTROL = (
    "missing: the pipeline has checkpoints or sinks but no control record, so nothing was "
    "collected; run `batchpoint repair`"
)


@dataclass
class GcReport:
    deleted_files: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    pruned_checkpoints: list[int] = field(default_factory=list)
    kept_checkpoints: list[int] = field(default_factory=list)
    skipped_pending: list[int] = field(default_factory=list)
    dropped_epochs: list[str] = field(default_factory=list)  # "sink@id"
    dequeued: list[int] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    dry_run: bool = False
    # what `ops.maintenance.gc` settled before the pass (overdue checkpoints expired)
    settled: list[CheckpointOutcome] = field(default_factory=list)


@define(kw_only=True, slots=False, eq=False)
class GarbageCollector:
    _reads: CheckpointReads
    _files: CheckpointFiles
    _control: ControlStore
    _sinks: SinkPublisher
    _clock: Clock
    # >= the checkpoint timeout (the coordinator's default): no writer of a discarded
    # checkpoint outlives it.
    grace: float
    _roll_forward: RollForward
    _extra_references: Callable[[], Iterable[str]] | None = None
    # Expired after the sink manifests are pruned, then read as references before any
    # file goes; if either raises, nothing is deleted in this pass.
    _tables: SinkTables | None = None

    def recorded_findings(self) -> list[Finding]:
        """The damage a migration or repair recorded in the control record (held
        checkpoints first: they stay until `batchpoint repair` can judge them), which
        every GC pass reports."""
        try:
            control = self._control.load()
        except ControlUnreadable:
            return []  # `collect` reports the record itself
        ordered = sorted(control.findings, key=lambda f: (not f.hold, f.checkpoint_id))
        return [
            Finding(f"checkpoint {f.checkpoint_id}", f.message, f.checkpoint_id) for f in ordered
        ]

    def referenced_files(self, control: ControlRecord | None = None) -> set[str]:
        """Every referenced file (the table sinks' too, when this GC was given them);
        raises if a record or a table that could hold references cannot be read."""
        tables = self._tables
        read = None if tables is None else lambda: tables.references().keys
        refs, _, findings = self._references(control or self._control.load(), read)
        if findings:
            raise RecordError("; ".join(map(str, findings)))
        return refs

    def _references(
        self, control: ControlRecord, read_tables: Callable[[], frozenset[str]] | None = None
    ) -> tuple[set[str], set[str], list[Finding]]:
        """Every referenced file, those of them that hold their folder in the queue (a
        retained or pending checkpoint's, a table snapshot's), and what could not be
        read."""
        findings: list[Finding] = []
        referenced: set[str] = set()
        keep = set(control.retained_ids())
        if control.head is not None:
            keep.add(control.head)
        roots: list[CheckpointOutcome] = []
        for cid in sorted(keep):
            try:
                outcome = self._reads.get_outcome(cid)
            except RecordError as exc:
                findings.append(Finding(f"checkpoint {cid}", f"unreadable outcome: {exc}", cid))
                continue
            if outcome is not None and outcome.completed is not None:
                # Its channels are not: every consumer acked, so the sweep below takes them.
                referenced.update(h.path for h in outcome.completed.durable_handles)
                roots.append(outcome)
        # Listed after the control read: acks of everything admitted by then (their
        # handles may point into their base's folder).
        for entry in control.pending:
            try:
                acks = self._reads.acks(entry.checkpoint_id)
            except RecordError as exc:
                findings.append(
                    Finding(f"checkpoint {entry.checkpoint_id}", f"unreadable ack: {exc}")
                )
                continue
            for ack in acks.values():
                referenced.update(h.path for h in ack.handles)
        manifests: list[SinkManifest] = []
        # Every manifest, one adopted at its uid's key meanwhile too (sink_keys.py).
        for sink, manifest in self._sinks.stored():
            if isinstance(manifest, RecordError):
                findings.append(Finding(f"sink {sink}", f"unreadable manifest: {manifest}"))
                continue
            manifests.append(manifest)
        # Read after the manifests: an epoch published meanwhile is the manifest's.
        referenced.update(unpublished_chains(self._reads, control, roots, manifests))
        by_checkpoints = set(referenced)
        referenced.update(f.path for m in manifests for e in m.epochs.values() for f in e.files)
        if self._extra_references is not None:
            referenced.update(self._extra_references())
        # The tables after the manifests: a commit that lands after this read was pinned
        # when it was planned, and its pin keeps its epoch in the manifest read above
        # (read before, another pass could drop the epoch in between, its pin stale).
        tables: frozenset[str] = frozenset()
        if read_tables is not None:
            try:
                tables = read_tables()
            except Exception as exc:  # a catalog's or storage's error: tried next pass
                findings.append(Finding("sink tables", f"not read, nothing deleted: {exc}"))
        # A table's files hold their folder: no manifest prune requeues it once the
        # table lets go of them (a sync that catches up, an expiry), a later pass does.
        referenced.update(tables)
        return referenced, by_checkpoints | tables, findings

    def collect(
        self,
        *,
        dry_run: bool = False,
        history_limit: int | None = None,
        progress: ProgressFn | None = None,
    ) -> GcReport:
        """One bounded, fenced pass over the discarded queue (see the module doc)."""
        report = GcReport(dry_run=dry_run)
        if not dry_run:
            self._roll_forward()
        try:
            found = self._control.read()
        except ControlUnreadable as exc:
            report.findings.append(Finding(self._control.key, str(exc)))
            return report
        if found is None:
            # A lost record reads as nothing retained: pruning the sinks on it would drop
            # every epoch a repair then finds retained (the trigger refuses it too).
            if self._sinks.sink_names() or self._reads.folder_ids():
                report.findings.append(Finding(self._control.key, _NO_CONTROL))
            return report
        control = found[0]
        report.kept_checkpoints = sorted({*control.retained_ids(), *_opt(control.head)})
        report.skipped_pending = sorted(p.checkpoint_id for p in control.pending)
        if not dry_run:
            self._prune_sinks(report)
        if not dry_run and not self._expire_tables(report):
            _say(progress, "a table sink could not be expired: nothing deleted")
            return report
        referenced, holding, findings = self._references(control, self._table_reader(report))
        report.findings.extend(findings)
        if findings:
            _say(progress, "unreadable records could hold references: nothing deleted")
            return report
        done = self._sweep(control, referenced, holding, report, progress)
        if dry_run:
            return report
        if done:
            self._dequeue(done)
            report.dequeued = done
        if history_limit is not None:
            # Only ids this pass's references were built for: one another pass collected
            # since may hold files published after this pass read the references.
            known = {*control.collected, *done}
            self._prune_history(history_limit, referenced, known, report, progress)
        return report

    def _sweep(
        self,
        control: ControlRecord,
        referenced: set[str],
        holding: set[str],
        report: GcReport,
        progress: ProgressFn | None,
    ) -> list[int]:
        """Delete the unreferenced files of every folder a pass looks at; the queued ids
        whose folder may leave the queue (past the grace, holding nothing)."""
        now = self._clock()
        done: list[int] = []
        # Retained folders too: a settled checkpoint's references are fixed, so a file
        # there that nothing references is a losing or zombie attempt's (bounded work:
        # num_retained + savepoints folders). And the newest collected folders, for
        # writers later than the grace (bounded: COLLECTED_SWEEP folders).
        queued = {e.checkpoint_id for e in control.discarded}
        late = [i for i in control.collected[-COLLECTED_SWEEP:] if i not in queued]
        sweep: list[tuple[DiscardedEntry | None, int]] = [
            (None, i) for i in dict.fromkeys([*report.kept_checkpoints, *late])
        ]
        folders = [*sweep, *((e, e.checkpoint_id) for e in control.discarded)]
        for examined, (entry, cid) in enumerate(folders, 1):
            found = self._files.data_files(cid)
            doomed = [i for i in found if i.key not in referenced]
            if doomed:
                _say(progress, f"checkpoint {cid}: deleting {len(doomed)} file(s)")
            report.deleted_files.extend(i.key for i in doomed)
            report.deleted_bytes += sum(i.size for i in doomed)
            if not report.dry_run:
                self._files.delete(i.key for i in doomed)
            # A folder whose files a newer checkpoint or a table snapshot still reads
            # stays queued, so that they are collected once nothing reads them (a chain
            # is bounded in length, a table's snapshots by its expiry). Files only a
            # sink manifest keeps are requeued by the manifest's pruning instead.
            holds = any(i.key in holding for i in found)
            if entry is not None and now >= entry.at + self.grace and not holds:
                done.append(cid)
            if progress is not None and count_due(examined, len(folders)):
                line = f"gc: {examined}/{len(folders)} checkpoint folder(s) examined"
                progress(Count("gc: examining checkpoint folders", examined, len(folders), line))
        return done

    def discard_aborted(self, checkpoint_id: int) -> list[str]:
        """GC restricted to one aborted checkpoint (a scheduler's cleanup of its run):
        delete its data files that nothing retained or pending references (all of them,
        unless a checkpoint built on it); the deleted keys."""
        outcome = self._reads.get_outcome(checkpoint_id)
        if outcome is None or outcome.completed is not None:
            # Pending: its tasks may still be writing there. Completed: its files may be
            # published, and a table sink's snapshots may read them: that is `collect`'s
            # to judge, which asks the tables. An aborted checkpoint's files no manifest
            # published, so no table reads them.
            return []
        referenced = self.referenced_files()
        doomed = [
            info.key for info in self._files.data_files(checkpoint_id) if info.key not in referenced
        ]
        self._files.delete(doomed)
        return doomed

    def _expire_tables(self, report: GcReport) -> bool:
        """Expire the table sinks' snapshots of dropped epochs; False (with a finding)
        if a table could not be: its snapshots could reference anything published, so
        nothing may go."""
        if self._tables is None:
            return True
        try:
            self._tables.expire()
        except Exception as exc:  # a catalog's or storage's error: tried next pass
            report.findings.append(Finding("sink tables", f"not expired, nothing deleted: {exc}"))
            return False
        return True

    def _table_reader(self, report: GcReport) -> Callable[[], frozenset[str]] | None:
        """What reads every file an unexpired snapshot reads (its findings go to the
        report); raising, nothing is deleted."""
        tables = self._tables
        if tables is None:
            return None

        def read() -> frozenset[str]:
            found: TableReferences = tables.references()
            report.findings.extend(found.findings)
            return found.keys

        return read

    def _prune_sinks(self, report: GcReport) -> None:
        def keep() -> set[int]:
            found = self._control.read()
            if found is None:
                raise CheckpointError(_NO_CONTROL)
            control = found[0]
            out = {*control.retained_ids(), *_opt(control.head)}
            return out | {p.checkpoint_id for p in control.pending}

        requeue: list[int] = []
        for sink in self._sinks.sink_names():
            try:
                dropped = self._sinks.prune_unreachable(sink, keep, self._base_of, self._head(sink))
            except (RecordError, CheckpointError) as exc:
                report.findings.append(Finding(f"sink {sink}", f"not pruned: {exc}"))
                continue
            report.dropped_epochs.extend(f"{sink}@{cid}" for cid in dropped)
            requeue.extend(dropped)
        if requeue:
            now = self._clock()

            def add(current: ControlRecord | None) -> ControlRecord | None:
                if current is None:
                    return None
                protected = current.protected()
                ids = [cid for cid in requeue if cid not in protected]
                new = current.with_discarded(ids, now)
                return new if new != current else None

            self._control.update(add)

    def _head(self, sink: str) -> Callable[[], int | None] | None:
        """How to read the sink's table's current snapshot, which judges its pins
        (None without table sinks: every pin is then kept)."""
        tables = self._tables
        return None if tables is None else lambda: tables.head(sink)

    def _base_of(self, checkpoint_id: int) -> int | None:
        # raises on an unreadable or missing record: that sink is then not pruned
        return published_base(self._reads.get_checkpoint(checkpoint_id), self._reads.storage_uri)

    def _dequeue(self, ids: list[int]) -> None:
        gone = set(ids)

        def drop(current: ControlRecord | None) -> ControlRecord | None:
            if current is None:
                return None
            left = tuple(e for e in current.discarded if e.checkpoint_id not in gone)
            if len(left) == len(current.discarded):
                return None
            collected = (*current.collected, *sorted(gone - set(current.collected)))
            return replace(current, discarded=left, collected=collected[-COLLECTED_CAP:])

        self._control.update(drop)

    def _prune_history(
        self,
        history_limit: int,
        referenced: set[str],
        known: set[int],
        report: GcReport,
        progress: ProgressFn | None,
    ) -> None:
        control = self._control.load()
        collected = sorted(control.collected)
        prunable = [i for i in collected[: max(0, len(collected) - history_limit)] if i in known]
        pruned = []
        ordered = sorted(referenced)
        newest = max(control.known_ids(), default=0)
        for cid in prunable:
            # Judged without listing: an append sink's manifest holds every epoch's files,
            # and listing each such folder on every pass would grow with the history.
            if _holds_a_key_under(ordered, self._files.data_prefix(cid)):
                continue  # a sink, a table or a newer checkpoint still reads its data
            found, data = self._files.folder(cid)
            if cid == newest and not found and not data:
                continue  # pruned by an earlier pass, and kept named (see `drop`)
            # What is left is a late writer's: an id that was collected (or queued) when
            # the references were read never returns into retained or pending, so no
            # reference made since can point into its folder.
            if data:
                _say(progress, f"checkpoint {cid}: deleting {len(data)} late file(s)")
                report.deleted_files.extend(i.key for i in data)
                report.deleted_bytes += sum(i.size for i in data)
            keys = [i.key for i in found]
            _say(progress, f"checkpoint {cid}: pruning {len(keys)} record(s) from history")
            self._files.prune(cid, keys)
            pruned.append(cid)
        if pruned:
            gone = set(pruned)

            def drop(current: ControlRecord | None) -> ControlRecord | None:
                if current is None:
                    return None
                # The newest id ever used stays named with its folder gone: with none
                # left, a counter put back or lost would hand it out again (invariant 5).
                newest = max(current.known_ids())
                left = tuple(c for c in current.collected if c not in gone or c == newest)
                return replace(current, collected=left) if left != current.collected else None

            self._control.update(drop)
        report.pruned_checkpoints = pruned


def _holds_a_key_under(ordered: list[str], prefix: str) -> bool:
    at = bisect.bisect_left(ordered, prefix)
    return at < len(ordered) and ordered[at].startswith(prefix)


def _opt(value: int | None) -> list[int]:
    return [] if value is None else [value]


def _say(progress: ProgressFn | None, line: str) -> None:
    if progress is not None:
        progress(line)
