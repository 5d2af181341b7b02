"""Another batchpoint pipeline's sink read as a source, exactly once (a chain of pipelines).

The barrier is the upstream sink's published position: the checkpoint its manifest's
`current` names (only completed, published checkpoints of the upstream's head timeline
get there) and the restore generation that checkpoint was admitted in, recorded as one
partition named `<pipeline>/<sink uid>` whose offset is that checkpoint id. The name
makes a barrier say by itself which pipeline it read (`batchpoint lineage`).

An epoch reads what the upstream published after its base checkpoint's barrier, up to
its own:

- an append sink: the rows of every epoch published after the base's, each once;
- a snapshot sink: the changes between the two published contents, per row with a row
  kind as Flink's changelog streams carry it (`_row_kind`: +I, -U, +U, -D; an update
  is its old row and its new one), computed by the Spark side (spark/upstream_io.py).

Before reading, both ends are checked against the upstream's timeline
(protocol/sink_timeline.py): when a restore of the upstream took back what the base
read, or what the barrier names, the epoch stops with `UpstreamRestored`, naming the
restore; it never reads output a restore took back and never declines forever.
"""

from __future__ import annotations

import enum
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.parquet as pq

from batchpoint.codec import to_iso
from batchpoint.errors import ConfigError, ObjectNotFound, RecordError
from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout, check_name
from batchpoint.protocol.pipeline import OperatorKind, PipelineSpec
from batchpoint.protocol.restores import RestoreRecord
from batchpoint.protocol.sink_manifest import PublishedEpoch, SinkManifest, SinkMode
from batchpoint.protocol.sink_timeline import generation_of, reaches
from batchpoint.protocol.sinks import SinkPublisher, rewound
from batchpoint.protocol.timeline import is_stale
from batchpoint.sources.barrier import PartitionOffset, SourceBarrier
from batchpoint.sources.errors import SourceOffsetError
from batchpoint.sources.files import SourceSplit
from batchpoint.sources.readers import select_declared
from batchpoint.storage import ObjectStore

ROW_KIND_COLUMN = "_row_kind"
#: How many base links a walk follows at most (an old manifest's, no timeline recorded).
MAX_WALK = 100_000


class RowKind(enum.StrEnum):
    """Flink's RowKind, as its changelog streams print it."""

    INSERT = "+I"
    UPDATE_BEFORE = "-U"
    UPDATE_AFTER = "+U"
    DELETE = "-D"


@dataclass(frozen=True)
class UpstreamBinding:
    """Sink `sink` (its name or uid) of pipeline `pipeline`, on the reader's storage."""

    pipeline: str
    sink: str
    reader: str = ""  # the pipeline that reads it, named in its errors

    def __post_init__(self) -> None:
        check_name(self.pipeline, "upstream pipeline")
        check_name(self.sink, f"upstream pipeline '{self.pipeline}': sink")

    def partition(self, uid: str | None = None) -> str:
        return f"{self.pipeline}/{uid or self.sink}"

    def __str__(self) -> str:
        return f"sink '{self.sink}' of pipeline '{self.pipeline}'"


def upstream_of(partition: str) -> tuple[str, str] | None:
    """(pipeline, sink uid) when a barrier partition is a pipeline source's."""
    pipeline, slash, sink = partition.partition("/")
    return (pipeline, sink) if slash and pipeline and sink and "/" not in sink else None


@dataclass(frozen=True)
class UpstreamPosition:
    """Where a barrier has the upstream: its checkpoint (None: nothing published yet)
    and the generation that checkpoint was admitted in (None: not recorded)."""

    checkpoint_id: int | None
    generation: int | None = None

    @classmethod
    def of(cls, barrier: SourceBarrier | Mapping[str, object] | None) -> UpstreamPosition:
        offsets = SourceBarrier.coerce(barrier)
        found = next(iter(offsets.values()), None)
        if found is None or found.offset == 0:
            return cls(None)
        return cls(found.offset, found.generation)

    def __str__(self) -> str:
        return "nothing" if self.checkpoint_id is None else f"checkpoint {self.checkpoint_id}"


@dataclass(frozen=True)
class UpstreamRead:
    """What one epoch reads of an upstream sink. Append mode: `after` holds the files
    published since the base. Snapshot mode: `before` is the content as of the base,
    `after` the content as of the barrier, and the reader emits their difference."""

    mode: SinkMode
    key_columns: tuple[str, ...]
    before: tuple[SourceSplit, ...] = ()
    after: tuple[SourceSplit, ...] = ()
    unchanged: bool = False  # the same position (or the same files): nothing to read

    @property
    def splits(self) -> int:
        return len(self.before) + len(self.after)


class UpstreamRestored(SourceOffsetError):
    """A restore of the upstream took back what this pipeline read (or was about to)."""


class PipelineSinkSource:
    format = "pipeline"

    def __init__(
        self, store: ObjectStore, binding: UpstreamBinding, *, schema: pa.Schema | None = None
    ) -> None:
        self.store = store
        self.binding = binding
        self.schema = schema
        self._layout = PipelineLayout(binding.pipeline)
        self._uid: str | None = None  # the sink's uid, looked up once per source object

    @property
    def uri(self) -> str:
        return f"pipeline:{self.binding.pipeline}/{self.binding.sink}"

    def _error(
        self, problem: str, cls: type[SourceOffsetError] = SourceOffsetError
    ) -> SourceOffsetError:
        return cls(self.binding.partition(), problem, uri=self.uri)

    # -- the upstream's records ---------------------------------------------------------

    def sink_uid(self) -> str:
        """The sink's uid, from the upstream's registered spec (given as name or uid)."""
        if self._uid is not None:
            return self._uid
        spec = self._spec()
        sinks = [op for op in spec.operators if op.kind is OperatorKind.SINK]
        for op in sinks:
            if self.binding.sink in (op.uid or op.name, op.name):
                self._uid = op.uid or op.name
                return self._uid
        raise ConfigError(
            f"pipeline '{self.binding.pipeline}' has no sink '{self.binding.sink}' "
            f"(its sinks: {', '.join(sorted(op.name for op in sinks)) or 'none'})"
        )

    def _spec(self) -> PipelineSpec:
        try:
            data = self.store.get(self._layout.spec).data
        except ObjectNotFound:
            raise ConfigError(
                f"upstream pipeline '{self.binding.pipeline}' is not registered in "
                f"{self.store.uri} (a pipeline source reads a pipeline on its own storage)"
            ) from None
        return PipelineSpec.decode(self._layout.spec, data)

    def manifest(self, uid: str | None = None) -> SinkManifest | None:
        """The sink's manifest as the upstream's restores leave it. A restore moves the
        control record first and rewinds the manifests after (protocol/restorer.py), so
        a manifest read in between (the restore under way, or its process dead before
        the rewind) still shows what the restore took back. The control record, read
        after the manifest, names every restore committed before it: a manifest not in
        its generation yet is read as its rewind will leave it (`rewound`, pure).
        Without a readable control record that cannot be told, and nothing is read:
        the manifest may still show what a restore took back. Nothing is written."""
        found = SinkPublisher(self.store, self._layout).manifest(uid or self.sink_uid())
        if found is None:
            return None
        upstream = CheckpointCoordinator(self.store, self.binding.pipeline)
        try:
            last = upstream.control.load().restore
        except ControlUnreadable as exc:
            raise self._error(
                f"whether a restore of the upstream took its output back cannot be told: {exc}"
            ) from None
        if last is None or not is_stale(found.generation, last.generation):
            return found
        alias = upstream.restorer.alias_of(last.target)
        base_of = upstream.restorer.base_of
        return rewound(found, last.target, last.generation, alias, base_of) or found

    # -- barriers -----------------------------------------------------------------------

    def capture_barrier(self) -> SourceBarrier:
        uid = self.sink_uid()
        manifest = self.manifest(uid)
        partition = self.binding.partition(uid)
        if manifest is None or manifest.current is None:
            return SourceBarrier({partition: PartitionOffset(0)})
        epoch = manifest.epochs[manifest.current]
        generation = generation_of(epoch.timeline)
        return SourceBarrier({partition: PartitionOffset(manifest.current, generation=generation)})

    def verify_barrier(
        self, barrier: SourceBarrier | Mapping[str, object], *, as_of: int | None = None
    ) -> None:
        """The barrier's upstream checkpoint is on the upstream's timeline: today's, or
        with `as_of` the one of that upstream checkpoint (a cascade's restore target)."""
        position = UpstreamPosition.of(barrier)
        if position.checkpoint_id is None:
            return
        manifest = self._manifest_or_error()
        if as_of is not None:
            if as_of not in manifest.epochs:
                raise self._error(
                    f"the upstream's checkpoint {as_of} published nothing to {self.binding}: "
                    "what it keeps cannot be told",
                    UpstreamRestored,
                )
            manifest = replace(manifest, current=as_of)
            if not _on_timeline(manifest, position):
                raise self._error(
                    f"restoring pipeline '{self.binding.pipeline}' to checkpoint {as_of} takes "
                    f"back its checkpoint {position.checkpoint_id}, which the barrier read up to",
                    UpstreamRestored,
                )
            return
        self._check_on_timeline(manifest, position, "the barrier")

    def _manifest_or_error(self) -> SinkManifest:
        manifest = self.manifest()
        if manifest is None:
            raise self._error(f"{self.binding} has no manifest any more", UpstreamRestored)
        return manifest

    def _check_on_timeline(
        self, manifest: SinkManifest, position: UpstreamPosition, what: str
    ) -> None:
        if not _on_timeline(manifest, position):
            raise self._taken_back(manifest, position, what)

    def _taken_back(
        self, manifest: SinkManifest, position: UpstreamPosition, what: str
    ) -> SourceOffsetError:
        cid = position.checkpoint_id
        reader = self.binding.reader or "<pipeline>"
        return self._error(
            f"upstream pipeline '{self.binding.pipeline}' was restored{self._restore(manifest)}"
            f", and its checkpoint {cid}, which {what} read up to, was taken back with it: "
            f"pipeline '{reader}' must follow: `batchpoint restore --pipeline {reader}` "
            "restores its newest checkpoint that read only what the upstream kept, and "
            f"`batchpoint restore --pipeline {self.binding.pipeline} --cascade` restores a "
            "whole chain together",
            UpstreamRestored,
        )

    def _restore(self, manifest: SinkManifest) -> str:
        """' to checkpoint N (restore generation G, <when>)' from the upstream's restore
        record, or what the manifest says when the record cannot be read."""
        key = self._layout.restore(manifest.generation)
        try:
            record = RestoreRecord.decode(key, self.store.get(key).data)
        except (ObjectNotFound, RecordError):
            return f" (its sink is in restore generation {manifest.generation})"
        return (
            f" to checkpoint {record.checkpoint_id} (restore generation "
            f"{record.restore_generation}, at {to_iso(record.restored_at)})"
        )

    # -- what an epoch reads ------------------------------------------------------------

    def _check_same_sink(
        self,
        start: SourceBarrier | Mapping[str, object] | None,
        end: SourceBarrier | Mapping[str, object],
    ) -> None:
        """The base's offset is another sink's when the code now names another one under
        the source's uid: read as this sink's, it skipped this sink's history. A sink
        renamed keeping its uid is the same partition (`<pipeline>/<sink uid>`)."""
        read, reads = set(SourceBarrier.coerce(start)), set(SourceBarrier.coerce(end))
        if read and reads and read != reads:
            raise self._error(
                f"the base checkpoint read {', '.join(sorted(read))} under this source's uid, "
                f"and this code reads {', '.join(sorted(reads))}: its offsets are another "
                "sink's. Read the sink it read, or give the source a new uid to read this "
                "one from its beginning (with pipeline.drop_source of the old uid)"
            )

    def read_between(
        self,
        start: SourceBarrier | Mapping[str, object] | None,
        end: SourceBarrier | Mapping[str, object],
    ) -> UpstreamRead:
        """What an epoch with base barrier `start` and barrier `end` reads."""
        self._check_same_sink(start, end)
        base, target = UpstreamPosition.of(start), UpstreamPosition.of(end)
        if target.checkpoint_id is None and base.checkpoint_id is not None:
            # the sink stood at no published checkpoint when triggered: a restore to one
            # not published yet (it publishes it next); reading nothing would go back
            raise self._error(
                f"{self.binding} stood at no published checkpoint when this epoch was "
                f"triggered (a restore of '{self.binding.pipeline}' under way); the next "
                f"epoch reads on from checkpoint {base.checkpoint_id}",
                UpstreamRestored,
            )
        if target.checkpoint_id is None or target.checkpoint_id == base.checkpoint_id:
            return UpstreamRead(SinkMode.APPEND, (), unchanged=True)
        manifest = self._manifest_or_error()
        self._check_on_timeline(manifest, target, "this epoch's barrier")
        if base.checkpoint_id is not None and not _on_timeline(
            replace(manifest, current=target.checkpoint_id), base
        ):
            if _on_timeline(manifest, base):  # restored to and fro while it triggered
                raise self._error(
                    f"this epoch's barrier (checkpoint {target.checkpoint_id} of pipeline "
                    f"'{self.binding.pipeline}') does not follow from what the base checkpoint "
                    f"read ({base.checkpoint_id}): the upstream was restored while it was "
                    "triggered. The next epoch reads on from the base",
                    UpstreamRestored,
                )
            raise self._taken_back(manifest, base, "the base checkpoint")
        self._check_columns(manifest)
        top = manifest.epochs[target.checkpoint_id]
        if manifest.mode is SinkMode.SNAPSHOT:
            before = self._snapshot_files(manifest, base.checkpoint_id)
            after = self._splits(top.files)
            same = [s.key for s in before] == [s.key for s in after]
            return UpstreamRead(manifest.mode, manifest.key_columns, before, after, same)
        added = self._published_after(manifest, top, base.checkpoint_id)
        return UpstreamRead(manifest.mode, manifest.key_columns, (), self._splits(added))

    def _check_columns(self, manifest: SinkManifest) -> None:
        missing = [k for k in manifest.key_columns if self.schema and k not in self.schema.names]
        if missing and manifest.mode is SinkMode.SNAPSHOT:
            raise ConfigError(
                f"source {self.uri}: the declared schema lacks the upstream sink's key "
                f"columns {missing}: a snapshot sink's changes are keyed by them"
            )

    def _snapshot_files(self, manifest: SinkManifest, base: int | None) -> tuple[SourceSplit, ...]:
        if base is None:
            return ()
        epoch = manifest.epochs.get(base)
        if epoch is None:
            raise self._error(
                f"the upstream's checkpoint {base}, which the base checkpoint read, is no "
                f"longer retained by pipeline '{self.binding.pipeline}': its snapshot sink's "
                "changes since then cannot be computed (retain more upstream checkpoints "
                "than this pipeline lags behind, or restore this pipeline)"
            )
        return self._splits(epoch.files)

    def _published_after(
        self, manifest: SinkManifest, top: PublishedEpoch, base: int | None
    ) -> list[FileHandle]:
        """The files of the epochs after `base` up to `top`, oldest first."""
        chain: list[PublishedEpoch] = []
        cid: int | None = top.checkpoint_id
        for _ in range(MAX_WALK):
            if cid is None or cid == base:
                break
            epoch = manifest.epochs.get(cid)
            if epoch is None:
                raise self._error(
                    f"the upstream's published epoch {cid} is gone (GC), between checkpoint "
                    f"{base} and {top.checkpoint_id}: rows would be missed"
                )
            chain.append(epoch)
            cid = epoch.base_checkpoint_id
        if cid != base:
            raise self._error(
                f"the upstream's checkpoint {base} is not an ancestor of {top.checkpoint_id}",
                UpstreamRestored,
            )
        return [f for e in reversed(chain) for f in e.files]

    @staticmethod
    def _splits(files: Sequence[FileHandle]) -> tuple[SourceSplit, ...]:
        return tuple(
            SourceSplit("published", i, f.path, f.size) for i, f in enumerate(files) if f.rows
        )

    # -- reading (on executors: only the files) -----------------------------------------

    def read_split(self, split: SourceSplit) -> pa.Table:
        try:
            data = self.store.get(split.key).data
        except ObjectNotFound:
            raise self._error(
                f"published file {split.key} is gone (the upstream's GC removed it)"
            ) from None
        table = pq.read_table(io.BytesIO(data))
        return select_declared(table, self.schema, split.key)


def _on_timeline(manifest: SinkManifest, position: UpstreamPosition) -> bool:
    """Whether the position's checkpoint is the manifest's current one or its ancestor."""
    cid, now = position.checkpoint_id, manifest.current
    if cid is None or now is None or now not in manifest.epochs:
        return cid is None
    timeline = manifest.epochs[now].timeline
    if timeline and position.generation is not None:
        return reaches(timeline, position.generation, cid)
    # recorded by a release before timelines: the base links, as far as they go
    walked, epoch = 0, manifest.epochs.get(now)
    while epoch is not None and walked < MAX_WALK:
        if epoch.checkpoint_id == cid:
            return True
        epoch = manifest.epochs.get(epoch.base_checkpoint_id or -1)
        walked += 1
    return False
