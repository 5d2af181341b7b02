"""Integrity of a completed checkpoint or savepoint, before anyone trusts its state.

Each check answers one question and reports what it finds as `Finding`s instead of
raising, so that one run names every problem of a candidate (the gate then falls back to
an older one):

  metadata        the outcome record parses, has a known version, says COMPLETED, and
                  holds exactly one ack per expected task
  file            every referenced file exists with its recorded size and sha256
  key-groups      every key group 0..max_parallelism-1 of every state the checkpoint
                  holds (by uid: its topology and its acks) is covered by exactly one
                  state file, in each layer
  source-offsets  the barriers agree with the base chain (each base_barrier is the base's
                  barrier; offsets never go backwards) and the source still holds the
                  files they cover
  sink-manifest   the files a sink published from the checkpoint exist

Nothing here imports Spark or Great Expectations; checksums are computed by a pluggable
`FileChecker` (on the driver by default, on executors when the gate has Spark).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from batchpoint.errors import ObjectNotFound, RecordError, UnsupportedRecordVersion
from batchpoint.protocol.checkpoint import (
    CheckpointOutcome,
    CheckpointStatus,
    CompletedCheckpoint,
    FileHandle,
)
from batchpoint.protocol.layout import PipelineLayout, TaskId
from batchpoint.protocol.sink_manifest import PublishedEpoch
from batchpoint.protocol.sinks import SinkPublisher, staged_output
from batchpoint.protocol.topology import SINK_STREAM_NAME
from batchpoint.protocol.verify import FileProblem, check_handles
from batchpoint.quality.findings import Check, Finding
from batchpoint.quality.identity import (
    DeclaredState,
    HeldState,
    StateId,
    declared_states,
    match_states,
    max_parallelism_of,
)
from batchpoint.quality.source_offsets import check_source_offsets
from batchpoint.runtime.api import Pipeline, SourceDef
from batchpoint.storage.base import ObjectStore

#: Checks the files of a checkpoint; returns the problems found.
FileChecker = Callable[[Sequence[FileHandle]], list[FileProblem]]


@dataclass
class IntegrityReport:
    checkpoint_id: int
    completed: CompletedCheckpoint | None  # None when the metadata cannot be read
    findings: list[Finding] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings


def driver_file_checker(store: ObjectStore, checksums: bool = True) -> FileChecker:
    """Size (and sha256) of every file, checked by threads of this process."""

    def check(handles: Sequence[FileHandle]) -> list[FileProblem]:
        return check_handles(store, handles, checksums=checksums)

    return check


# -- entry points ---------------------------------------------------------------------


def check_checkpoint(
    store: ObjectStore,
    layout: PipelineLayout,
    checkpoint_id: int,
    *,
    pipeline: Pipeline | None = None,
    sources: Mapping[str, SourceDef] | None = None,
    file_checker: FileChecker | None = None,
) -> IntegrityReport:
    """Every integrity check of a settled checkpoint, starting from its outcome record."""
    completed, findings = read_metadata(store, layout, checkpoint_id)
    report = IntegrityReport(checkpoint_id, completed, findings)
    if completed is not None:
        report.findings += check_completed(
            store,
            layout,
            completed,
            pipeline=pipeline,
            sources=sources,
            file_checker=file_checker,
        )
    return report


def check_completed(
    store: ObjectStore,
    layout: PipelineLayout,
    completed: CompletedCheckpoint,
    *,
    pipeline: Pipeline | None = None,
    sources: Mapping[str, SourceDef] | None = None,
    file_checker: FileChecker | None = None,
) -> list[Finding]:
    """The checks that need the metadata but not the record it came from: an audit runs
    them on a checkpoint whose acks are in but whose outcome is not yet written.
    `pipeline`, the code, names the states in the findings (they are found by uid)."""
    checker = file_checker or driver_file_checker(store)
    findings = check_acks(completed)
    findings += check_files(completed.durable_handles, checker)
    findings += check_key_groups(completed, declared_states(pipeline) if pipeline else None)
    findings += check_source_offsets(store, layout, completed.pending, sources)
    findings += check_sinks(store, layout, completed, checker)
    return findings


# -- metadata -------------------------------------------------------------------------


def read_metadata(
    store: ObjectStore, layout: PipelineLayout, checkpoint_id: int
) -> tuple[CompletedCheckpoint | None, list[Finding]]:
    key = layout.outcome(checkpoint_id)
    try:
        data = store.get(key).data
    except ObjectNotFound:
        return None, [Finding(key, Check.METADATA, "missing: the checkpoint has no outcome record")]
    try:
        outcome = CheckpointOutcome.decode(key, data)
    except UnsupportedRecordVersion as exc:
        problem = f"unknown record version {exc.version!r}: this batchpoint cannot read it"
        return None, [Finding(key, Check.METADATA, problem)]
    except RecordError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [Finding(key, Check.METADATA, f"unreadable: {problem}")]
    if outcome.status is not CheckpointStatus.COMPLETED or outcome.completed is None:
        why = f" ({outcome.reason.code}: {outcome.message})" if outcome.reason else ""
        problem = f"the checkpoint did not complete: it is {outcome.status.value}{why}"
        return None, [Finding(key, Check.METADATA, problem)]
    return outcome.completed, []


def check_acks(completed: CompletedCheckpoint) -> list[Finding]:
    """Exactly one ack per expected task: a missing ack means a task's state or output
    is missing from the metadata altogether."""
    expected = completed.pending.expected_tasks
    seen: dict[TaskId, int] = {}
    for ack in completed.acks:
        seen[ack.task] = seen.get(ack.task, 0) + 1
    what = f"checkpoint {completed.checkpoint_id}"
    findings = [
        Finding(what, Check.METADATA, f"no acknowledgement of expected task {task}")
        for task in expected
        if task not in seen
    ]
    findings += [
        Finding(what, Check.METADATA, f"{n} acknowledgements of task {task}")
        for task, n in seen.items()
        if n > 1
    ]
    findings += [
        Finding(what, Check.METADATA, f"an acknowledgement of unexpected task {task}")
        for task in seen
        if task not in expected
    ]
    return findings


# -- files ----------------------------------------------------------------------------


def check_files(handles: Iterable[FileHandle], checker: FileChecker) -> list[Finding]:
    unique = list({h.path: h for h in handles}.values())
    return [Finding(p.path, Check.FILE, p.problem) for p in checker(unique)]


# -- key groups -----------------------------------------------------------------------


def check_key_groups(
    completed: CompletedCheckpoint, declared: Mapping[StateId, DeclaredState] | None = None
) -> list[Finding]:
    """Every state the checkpoint holds (by uid: see identity.py), named as the code
    `declared` names it, else as the checkpoint did."""
    return [
        Finding(held.label, Check.KEY_GROUPS, problem, uid=held.id.key)
        for held in match_states(completed, declared or {}).held
        for problem in _key_group_problems(held)
    ]


def _key_group_problems(held: HeldState) -> list[str]:
    max_par, problem = max_parallelism_of(held)
    if max_par is None:
        return [problem]
    # Each layer (the full snapshot, then each changelog) covers every key group once.
    layers: dict[int, list[FileHandle]] = {}
    for handle in held.handles:
        layers.setdefault(int(handle.meta.get("layer", 0)), []).append(handle)
    problems = [] if 0 in layers else ["changelogs without a full snapshot"]
    for layer, files in sorted(layers.items()):
        prefix = f"changelog layer {layer}: " if layer else ""
        problems += [prefix + p for p in coverage_problems(files, max_par)]
    return problems


def coverage_problems(handles: Sequence[FileHandle], max_parallelism: int) -> list[str]:
    """Every gap, overlap and out-of-range key group of one state's files (unlike
    format.check_coverage, which stops at the first)."""
    problems = [
        f"file '{h.path}' records no key-group range" for h in handles if h.key_group_range is None
    ]
    ranged = sorted(
        (h for h in handles if h.key_group_range is not None),
        key=lambda h: h.key_group_range,  # type: ignore[arg-type,return-value]
    )
    last = max_parallelism - 1
    next_group = 0
    previous: FileHandle | None = None
    for handle in ranged:
        start, end = handle.key_group_range  # type: ignore[misc]
        if start > end or start < 0 or end > last:
            problems.append(
                f"file '{handle.path}' claims key groups [{start}, {end}], outside 0..{last}"
            )
            continue
        if start > next_group:
            problems.append(f"key groups [{next_group}, {start - 1}] are covered by no file")
        elif previous is not None and start < next_group:
            problems.append(
                f"key groups [{start}, {min(end, next_group - 1)}] are covered by both "
                f"'{previous.path}' and '{handle.path}'"
            )
        if end + 1 > next_group:
            next_group, previous = end + 1, handle
    if next_group <= last:
        problems.append(f"key groups [{next_group}, {last}] are covered by no file")
    return problems


# -- sinks ----------------------------------------------------------------------------


def check_sinks(
    store: ObjectStore,
    layout: PipelineLayout,
    completed: CompletedCheckpoint,
    checker: FileChecker,
) -> list[Finding]:
    """The files each sink's manifest says it published from this checkpoint: they must
    be the ones the checkpoint staged, and exist. A checkpoint not published yet (or an
    audited one) has nothing to check here."""
    publisher = SinkPublisher(store, layout)
    checked = {h.path for h in completed.durable_handles}  # check_files covered them
    findings = []
    for sink, manifest in publisher.stored():
        if isinstance(manifest, RecordError):
            findings.append(
                Finding(layout.sink_manifest(sink), Check.SINK_MANIFEST, f"unreadable: {manifest}")
            )
            continue
        epoch = manifest.epochs.get(completed.checkpoint_id)
        if epoch is None:
            continue
        published = {f.path for f in epoch.files}
        stray = sorted(published - _expected(completed, sink, manifest.epochs, epoch))
        if stray:
            findings.append(
                Finding(
                    f"sink {sink}",
                    Check.SINK_MANIFEST,
                    f"published {len(stray)} file(s) the checkpoint did not stage: {stray[:3]}",
                )
            )
        missing = [f for f in epoch.files if f.path not in checked]
        findings += [
            Finding(p.path, Check.SINK_MANIFEST, f"published by sink {sink}: {p.problem}")
            for p in checker(missing)
        ]
    return findings


def _expected(
    completed: CompletedCheckpoint,
    sink: str,
    epochs: Mapping[int, PublishedEpoch],
    epoch: PublishedEpoch,
) -> set[str]:
    """What the epoch may publish: what the checkpoint staged, or for a savepoint
    imported from this storage (an alias epoch of the savepoint the import's record
    names, protocol/sinks.py rewind) its original epoch's files, which the restore
    published again on purpose; all it lists if the original epoch was pruned since
    (its files still exist: the checker reads them)."""
    props = completed.pending.properties
    if epoch.alias_of is None or not props.is_imported:
        return _staged(completed, sink)
    if props.savepoint_checkpoint_id != epoch.alias_of:
        return _staged(completed, sink)  # an alias of another savepoint: not this import's
    original = epochs.get(epoch.alias_of)
    return {f.path for f in (original or epoch).files}


def _staged(completed: CompletedCheckpoint, key: str) -> set[str]:
    """What the sink whose manifest is at `key` staged in the checkpoint: by uid (the
    key), or by name for a manifest an older release kept under the sink's name."""
    by_name = [a for a in completed.acks if a.task.operator == key]
    named = {h.path for a in by_name for h in a.handles if h.name == SINK_STREAM_NAME}
    return {h.path for h in staged_output(completed, key)} | named
