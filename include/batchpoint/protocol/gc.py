"""Garbage collection of checkpoint files (Flink's discard of subsumed and aborted
checkpoints, with a shared-state registry's rule).

A data file is deleted only when no retained checkpoint or savepoint, no head, no
pending checkpoint and no sink manifest references it. Folders of pending checkpoints,
and of checkpoints with no outcome, are never touched: tasks may still be writing there. Each pass
recomputes everything from storage, so it is idempotent and safe to interrupt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import parse_checkpoint_dir_name
from batchpoint.protocol.sinks import SinkPublisher

ProgressFn = Callable[[str], None]


@dataclass
class GcReport:
    deleted_files: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    pruned_checkpoints: list[int] = field(default_factory=list)
    kept_checkpoints: list[int] = field(default_factory=list)
    skipped_pending: list[int] = field(default_factory=list)
    dry_run: bool = False


class GarbageCollector:
    def __init__(
        self,
        coordinator: CheckpointCoordinator,
        extra_references: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self._c = coordinator
        self._extra_references = extra_references

    def referenced_files(self) -> set[str]:
        c = self._c
        keep_ids = set(c.completed.retained_ids())
        head = c.head.get().checkpoint_id
        if head is not None:
            keep_ids.add(head)
        referenced: set[str] = set()
        for cid in keep_ids:
            outcome = c.get_outcome(cid)
            if outcome is not None and outcome.completed is not None:
                referenced.update(h.path for h in outcome.completed.handles)
        referenced.update(SinkPublisher(c.store, c.layout).referenced_files())
        for pending in c.pending_checkpoints():
            # a pending checkpoint's acks may point outside its own folder (at its base)
            for ack in c.acks(pending.checkpoint_id).values():
                referenced.update(h.path for h in ack.handles)
        if self._extra_references is not None:
            referenced.update(self._extra_references())
        return referenced

    def collect(
        self,
        *,
        dry_run: bool = False,
        history_limit: int | None = None,
        progress: ProgressFn | None = None,
    ) -> GcReport:
        """Delete unreferenced data files of settled checkpoints; with `history_limit`,
        also drop all records of settled, unretained checkpoints beyond the newest
        `history_limit` ones (their ids are never reused: the counter remembers)."""
        c = self._c
        report = GcReport(dry_run=dry_run)
        # Order matters: settling adds the retained marker before it removes the active
        # one, so listing active first and retained second misses no checkpoint.
        pending_ids = {p.checkpoint_id for p in c.pending_checkpoints()}
        referenced = self.referenced_files()
        retained = set(c.completed.retained_ids())
        head = c.head.get().checkpoint_id

        settled: list[int] = []
        for prefix in c.store.list_dirs(c.layout.checkpoints_prefix):
            cid = parse_checkpoint_dir_name(prefix.rstrip("/").rsplit("/", 1)[-1])
            if cid is None:
                continue
            if cid in pending_ids:
                report.skipped_pending.append(cid)
                continue
            outcome = c.get_outcome(cid)
            if outcome is None:
                report.skipped_pending.append(cid)  # tasks may be writing: not ours
                continue
            settled.append(cid)
            doomed = [
                info
                for info in c.store.list(c.layout.data_prefix(cid))
                if info.key not in referenced
            ]
            if doomed and progress:
                status = outcome.status.value.lower()
                progress(f"checkpoint {cid} ({status}): deleting {len(doomed)} file(s)")
            report.deleted_files.extend(i.key for i in doomed)
            report.deleted_bytes += sum(i.size for i in doomed)
            if not dry_run:
                c.store.delete_many(i.key for i in doomed)
            if cid in retained or cid == head:
                report.kept_checkpoints.append(cid)

        if history_limit is not None:
            prunable = [cid for cid in settled if cid not in retained and cid != head]
            for cid in prunable[: max(0, len(prunable) - history_limit)]:
                keys = [i.key for i in c.store.list(c.layout.checkpoint(cid))]
                if any(k in referenced for k in keys):
                    continue
                if progress:
                    progress(f"checkpoint {cid}: pruning {len(keys)} record(s) from history")
                report.pruned_checkpoints.append(cid)
                if not dry_run:
                    # the outcome goes last: until then the folder still counts as settled
                    outcome_key = c.layout.outcome(cid)
                    c.store.delete_many(k for k in keys if k != outcome_key)
                    c.store.delete(outcome_key)
        return report
