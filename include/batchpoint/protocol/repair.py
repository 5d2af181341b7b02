"""`batchpoint repair`: rebuild a missing or unreadable control record from the
write-once outcome records, so a damaged pipeline continues from its newest intact
checkpoint instead of restarting from empty state.

retained = the newest `num_retained` intact completed checkpoints + every intact
savepoint; head = the newest of them; restore generation = (highest restore record) + 1
with a restore in flight to the head, so the sinks are rewound to it by the next actor;
pending = pending records without an outcome; every other settled checkpoint is queued
for GC. Unreadable records are skipped and reported.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

from batchpoint.errors import RecordError
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.control import (
    ControlRecord,
    ControlUnreadable,
    DiscardedEntry,
    PendingEntry,
    RestoreInFlight,
    RetainedEntry,
)
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.layout import parse_checkpoint_dir_name
from batchpoint.protocol.verify import check_handles


@dataclass
class RepairReport:
    control: ControlRecord
    findings: list[Finding] = field(default_factory=list)
    replaced: bool = False  # a record (readable or not) was there before

    @property
    def head(self) -> int | None:
        return self.control.head


def repair(coordinator: CheckpointCoordinator, *, dry_run: bool = False) -> RepairReport:
    c = coordinator
    findings: list[Finding] = []
    now = c.clock()
    completed: list[RetainedEntry] = []
    settled: list[int] = []
    for prefix in c.store.list_dirs(c.layout.checkpoints_prefix):
        cid = parse_checkpoint_dir_name(prefix.rstrip("/").rsplit("/", 1)[-1])
        if cid is None:
            continue
        try:
            outcome = c.get_outcome(cid)
        except RecordError as exc:
            findings.append(Finding(f"checkpoint {cid}", f"unreadable outcome: {exc}", cid))
            continue
        if outcome is None:
            continue
        settled.append(cid)
        if outcome.status is not CheckpointStatus.COMPLETED or outcome.completed is None:
            continue
        problems = check_handles(c.store, outcome.completed.durable_handles, checksums=False)
        if problems:
            findings.append(
                Finding(f"checkpoint {cid}", f"{len(problems)} file(s) not intact", cid)
            )
            continue
        p = outcome.pending
        completed.append(
            RetainedEntry(
                cid,
                p.type,
                outcome.completed.completed_at,
                bool(p.properties.get("retain_forever", False)),
            )
        )
    completed.sort(key=lambda e: e.checkpoint_id)
    savepoints = [e for e in completed if not e.subsumable]
    checkpoints = [e for e in completed if e.subsumable][-c.config.num_retained :]
    retained = sorted(savepoints + checkpoints, key=lambda e: e.checkpoint_id)
    head = retained[-1].checkpoint_id if retained else None
    generation = _max_restore_generation(c)
    open_ids = [p for p in c.pending_checkpoints() if p.checkpoint_id not in settled]
    restore = None
    pending: list[PendingEntry] = []
    abandoned: list[int] = []
    if head is not None:
        # A new generation with the head as restore target: the sinks are rewound to
        # it and every open checkpoint (decided against the lost record) is abandoned.
        generation += 1
        abandoned = [p.checkpoint_id for p in open_ids]
        restore = RestoreInFlight(generation, head, None, tuple(abandoned), False, now)
    else:
        pending = [
            PendingEntry(
                p.checkpoint_id, p.type, p.base_checkpoint_id, p.restore_generation, p.deadline
            )
            for p in open_ids
        ]
    keep = {e.checkpoint_id for e in retained} | {p.checkpoint_id for p in pending}
    control = ControlRecord(
        head=head,
        restore_generation=generation,
        retained=tuple(retained),
        pending=tuple(pending),
        discarded=tuple(
            DiscardedEntry(cid, now) for cid in [*settled, *abandoned] if cid not in keep
        ),
        restore=restore,
        moved_at=now,
        cause="restore",
        extra={"repaired_at": now},
    )
    replaced = c.store.exists(c.control.key)
    if not dry_run:
        c.store.put(c.control.key, control.encode())
        c.finish_restore()
    return RepairReport(control, findings, replaced)


def _max_restore_generation(c: CheckpointCoordinator) -> int:
    best = 0
    for info in c.store.list(c.layout.restores_prefix):
        match = re.search(r"gen-(\d+)\.json$", info.key)
        if match:
            best = max(best, int(match.group(1)))
    with contextlib.suppress(ControlUnreadable):  # the record being repaired
        best = max(best, c.control.load().restore_generation)
    with_pending = [p.restore_generation for p in c.pending_checkpoints()]
    return max([best, *with_pending])
