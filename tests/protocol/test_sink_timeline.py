"""Each published epoch's timeline against a reference with true parent pointers.

Random schedules drive a real `SinkPublisher` on a real store: checkpoints admitted in
the current restore generation build on the head and are published (by a notify that
publishes the unpublished part of the chain, oldest first; now and then a notify is
lost, and the next one or a restore publishes it), restores go to any retained
checkpoint (on a branch left behind too, or one never published) and rewind the sink,
an imported savepoint of this storage is restored to now and then, a publish decided
before a restore is refused (STALE), and GC prunes with a random kept set.

After every step, for every checkpoint ever published, `_on_timeline` (what a
downstream pipeline's barrier check asks) says what the reference says: whether it is
the sink's current checkpoint or its ancestor. Where the current epoch recorded no
timeline (an alias epoch, a release before timelines), the base-link walk answers: it
must say exactly what the links still in the manifest reach, and never claim a
checkpoint that is not an ancestor. For every pair of epochs still in the manifest,
`reaches` says exactly the reference ancestry.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointType,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
    TaskMetrics,
)
from batchpoint.protocol.layout import PipelineLayout, TaskId
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.sink_keys import ManifestKeys
from batchpoint.protocol.sink_manifest import SinkManifest, SinkMode
from batchpoint.protocol.sink_timeline import TimelineStep, generation_of, reaches
from batchpoint.protocol.sinks import PublishResult, SinkPublisher
from batchpoint.sources.upstream import UpstreamPosition, _on_timeline
from batchpoint.storage.base import ObjectStore

PIPELINE = "up"
SINK = "out"
MAX_STEPS = 24
SEEDS = {"local": 300, "s3": 15}


def completed_checkpoint(
    cid: int,
    base: int | None,
    generation: int,
    properties: CheckpointProperties | None = None,
) -> CompletedCheckpoint:
    """A completed checkpoint whose sink task staged one file (only its handle: the
    publisher records files, it does not read them)."""
    pending = PendingCheckpoint(
        pipeline=PIPELINE,
        checkpoint_id=cid,
        type=CheckpointType.CHECKPOINT if properties is None else CheckpointType.SAVEPOINT,
        base_checkpoint_id=base,
        restore_generation=generation,
        barrier={},
        base_barrier={},
        expected_tasks=(TaskId(SINK, 0),),
        trigger_time=0.0,
        deadline=4e9,
        properties=properties or CheckpointProperties(),
    )
    handle = FileHandle(f"{PIPELINE}/{cid}/sink/part-0.parquet", 10, "0" * 64, 1, name="sink")
    ack = AckRecord(cid, TaskId(SINK, 0), "a1", (handle,), TaskMetrics(), 0.0, SINK)
    return CompletedCheckpoint(pending, (ack,), 1.0)


@dataclass
class Figures:
    schedules: int = 0
    steps: int = 0
    assertions: int = 0
    walked: int = 0  # `_on_timeline` answers the base-link walk gave
    kinds: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items()))
        return (
            f"{self.schedules} schedules, {self.steps} steps ({kinds}), "
            f"{self.assertions} assertions ({self.walked} answered by the base-link walk)"
        )


class Schedule:
    """One random schedule: the reference model beside the real publisher."""

    def __init__(
        self, store: ObjectStore, pipeline: str, rng: random.Random, figures: Figures
    ) -> None:
        self.store, self.rng, self.figures = store, rng, figures
        self.layout = PipelineLayout(pipeline)
        self.sinks = SinkPublisher(store, self.layout)
        self.mode = rng.choice(list(SinkMode))
        self.parent: dict[int, int | None] = {}  # true base links (an import: its savepoint's base)
        self.admitted_in: dict[int, int] = {}
        self.records: dict[int, CompletedCheckpoint] = {}
        self.published: dict[int, int | None] = {}  # ever published -> its barrier's generation
        self.retained: set[int] = set()
        self.head: int | None = None
        self.generation = 0
        self.next_id = 1
        self.legacy = False  # publishing as a release before timelines
        self.log: list[str] = []

    # -- the reference ------------------------------------------------------------------

    def ancestry(self, cid: int | None) -> set[int]:
        out: set[int] = set()
        while cid is not None:
            out.add(cid)
            cid = self.parent[cid]
        return out

    # -- steps --------------------------------------------------------------------------

    def step(self) -> None:
        kinds: list[tuple[str, Callable[[], None], int]] = [
            ("checkpoint", self.checkpoint, 10),
            ("notify", self.notify_head, 2),
            ("restore", self.restore, 4),
            ("import", self.import_and_restore, 2),
            ("gc", self.gc, 3),
            ("stale publish", self.stale_publish, 2),
        ]
        name, run, _ = self.rng.choices(kinds, weights=[w for *_, w in kinds])[0]
        self.log.append(name)
        self.figures.steps += 1
        self.figures.kinds[name] = self.figures.kinds.get(name, 0) + 1
        run()

    def checkpoint(self) -> None:
        self.next_id += self.rng.choice([0, 0, 0, 1])  # an aborted one took an id
        cid = self.next_id
        self.next_id += 1
        self.records[cid] = completed_checkpoint(cid, self.head, self.generation)
        self.parent[cid], self.admitted_in[cid] = self.head, self.generation
        self.retained.add(cid)
        self.head = cid
        if self.rng.random() < 0.8:  # else its notify is lost: the next one publishes it
            self.notify(cid)

    def notify_head(self) -> None:
        if self.head is not None:
            self.notify(self.head)

    def notify(self, cid: int) -> None:
        """What `notify_checkpoint_complete` publishes: the unpublished part of the
        chain, oldest first, decided in the current generation."""
        chain: list[int] = []
        at: int | None = cid
        while at is not None and at not in self.published:
            chain.append(at)
            at = self.records[at].pending.base_checkpoint_id
        for i, c in reversed(list(enumerate(chain))):
            self.publish(c, self.generation, descendants=chain[:i])

    def publish(self, cid: int, generation: int, descendants: list[int]) -> None:
        result = self.sinks.publish(
            self.records[cid], SINK, self.mode, ["k"],
            generation=generation, descendants=descendants,
        )  # fmt: skip
        manifest = self._manifest()
        assert result is PublishResult.PUBLISHED or cid in manifest.epochs, (result, self.log)
        if self.legacy:
            manifest = self._strip_timelines()
        self.published[cid] = generation_of(manifest.epochs[cid].timeline)
        if self._imported(cid):
            return
        if manifest.epochs[cid].timeline:
            # a barrier records the generation the checkpoint was admitted in
            assert self.published[cid] == self.admitted_in[cid], self.log

    def restore(self, target: int | None = None, alias_of: int | None = None) -> None:
        if target is None:
            if not self.retained:
                return
            target = self.rng.choice(sorted(self.retained))
        self.generation += 1
        self.sinks.rewind(SINK, target, self.generation, alias_of)
        self.head = target
        self.notify(target)  # a restore publishes its target (runtime/restore.py)

    def import_and_restore(self) -> None:
        """Import a savepoint of this storage (taken of any checkpoint ever published:
        the savepoint's folder outlives its retention, and its epoch may be gone) and
        restore to it: the import follows the savepoint's base, beside the chain."""
        taken_of = sorted(c for c in self.published if not self._imported(c))
        gone = [c for c in taken_of if c not in self._manifest().epochs]
        if gone and self.rng.random() < 0.5:
            taken_of = gone  # the savepoint's own epoch collected: no alias
        if not taken_of:
            return
        taken = self.rng.choice(taken_of)
        base = self.records[taken].pending.base_checkpoint_id
        props = CheckpointProperties(
            imported_from="file:///savepoints/sp",
            savepoint_checkpoint_id=taken,
            savepoint_taken_from=self.store.uri,
            savepoint_base_checkpoint_id=base,
        )
        cid = self.next_id
        self.next_id += 1
        self.records[cid] = completed_checkpoint(cid, None, self.generation, props)
        self.parent[cid], self.admitted_in[cid] = base, self.generation
        self.retained.add(cid)
        # the restorer keeps the original epoch as an alias when it is still there
        self.restore(cid, alias_of=taken)

    def _imported(self, cid: int) -> bool:
        return self.records[cid].pending.properties.is_imported

    def gc(self) -> None:
        keep = {c for c in self.retained if self.rng.random() < 0.5}
        keep |= {self.head} if self.head is not None else set()
        self.retained = keep
        self.sinks.prune_unreachable(SINK, lambda: keep, self.parent.get)

    def stale_publish(self) -> None:
        """A publish decided before a restore, arriving after it: refused."""
        late = [
            c
            for c in self.records
            if c not in self.published and self.admitted_in[c] < self.generation
        ]
        if not late:
            return
        before = self._manifest_or_none()
        cid = self.rng.choice(late)
        result = self.sinks.publish(
            self.records[cid], SINK, self.mode, ["k"], generation=self.admitted_in[cid]
        )
        if before is not None:
            assert result is PublishResult.STALE, (cid, result, self.log)
            assert self._manifest() == before
        else:  # nothing published yet: the manifest starts in that generation
            self.published[cid] = generation_of(self._manifest().epochs[cid].timeline)

    def upgrade(self) -> None:
        self.legacy = False

    # -- the checks ---------------------------------------------------------------------

    def check(self) -> None:
        manifest = self._manifest_or_none()
        if manifest is None:
            return
        current = manifest.current
        if current is not None:
            # the sink's current epoch is the head's nearest published ancestor
            at = self.head
            while at is not None and at not in manifest.epochs:
                at = self.parent[at]
            assert current == at, (current, self.head, self.log)
        truth = self.ancestry(current)
        timeline = manifest.epochs[current].timeline if current is not None else ()
        walk = self._walk(manifest)
        for cid, generation in self.published.items():
            got = _on_timeline(manifest, UpstreamPosition(cid, generation))
            if timeline and generation is not None:
                want = cid in truth
            else:
                self.figures.walked += 1
                want = cid in walk
                assert not want or cid in truth, (cid, self.log)
            assert got == want, (cid, generation, current, manifest.epochs, self.log)
            self.figures.assertions += 1
        for x, epoch in manifest.epochs.items():
            if not epoch.timeline:
                continue
            # one step per generation passed through: a timeline grows with restores,
            # not with checkpoints
            steps = [s.generation for s in epoch.timeline]
            assert all(a != b for a, b in itertools.pairwise(steps)), (x, steps, self.log)
            ancestors = self.ancestry(x)
            for b, other in manifest.epochs.items():
                generation = generation_of(other.timeline)
                if generation is None:
                    continue
                got = reaches(epoch.timeline, generation, b)
                assert got == (b in ancestors), (x, b, epoch.timeline, other.timeline, self.log)
                self.figures.assertions += 1

    @staticmethod
    def _walk(manifest: SinkManifest) -> set[int]:
        """What the manifest's base links reach from its current epoch."""
        out: set[int] = set()
        epoch = manifest.epochs.get(manifest.current or -1)
        while epoch is not None and epoch.checkpoint_id not in out:
            out.add(epoch.checkpoint_id)
            epoch = manifest.epochs.get(epoch.base_checkpoint_id or -1)
        return out

    def _manifest_or_none(self) -> SinkManifest | None:
        return self.sinks.manifest(SINK)

    def _manifest(self) -> SinkManifest:
        manifest = self.sinks.manifest(SINK)
        assert manifest is not None
        return manifest

    def _strip_timelines(self) -> SinkManifest:
        """The manifest as a release before timelines would have left it."""

        def strip(current: SinkManifest | None) -> SinkManifest | None:
            assert current is not None
            epochs = {c: replace(e, timeline=()) for c, e in current.epochs.items()}
            return replace(current, epochs=epochs)

        ManifestKeys(self.store, self.layout).update(SINK, strip)
        return self._manifest()


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not under test here: thousands of small writes, each fsynced (with
    its folder), would take most of the time."""
    monkeypatch.setattr("batchpoint.storage.local.os.fsync", lambda fd: None)


def run_schedules(store: ObjectStore, legacy: bool) -> Figures:
    """Every schedule on a pipeline of its own on `store`."""
    figures = Figures()
    seeds = SEEDS["s3"] if store.uri.startswith("s3") else SEEDS["local"]
    for seed in range(seeds):
        rng = random.Random(seed)
        schedule = Schedule(store, f"up{seed}", rng, figures)
        schedule.legacy = legacy
        upgrade_at = rng.randrange(MAX_STEPS) if legacy and rng.random() < 0.5 else None
        for at in range(rng.randrange(4, MAX_STEPS)):
            if at == upgrade_at:
                schedule.upgrade()
            try:
                schedule.step()
                schedule.check()
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, mode {schedule.mode}: {exc}") from exc
        figures.schedules += 1
    return figures


def test_timelines_agree_with_the_reference(store: ObjectStore) -> None:
    figures = run_schedules(store, legacy=False)
    print(f"sink timelines: {figures}")
    assert figures.assertions > 10 * figures.steps


def test_without_timelines_the_walk_never_claims_a_checkpoint_taken_back(
    store: ObjectStore,
) -> None:
    """Epochs published by a release before timelines (some schedules upgrade midway):
    the walk over base links answers, and never for a checkpoint that is no ancestor."""
    figures = run_schedules(store, legacy=True)
    print(f"sink timelines, older releases' epochs: {figures}")
    assert figures.walked > figures.steps


def test_an_import_restored_beside_the_chain_claims_no_checkpoint_after_its_savepoint(
    local_store: ObjectStore,
) -> None:
    """A savepoint of checkpoint 3 imported as 7 (in generation 0, beside the chain
    1..6) follows 3's base, 2. With 3's snapshot epoch gone (disposed of, collected),
    the restore to 7 publishes it on 2's timeline: it must not say that 4 and 5,
    which came after 3 in generation 0, are its ancestors."""
    sinks = SinkPublisher(local_store, PipelineLayout(PIPELINE))
    for cid in range(1, 7):
        sinks.publish(completed_checkpoint(cid, cid - 1 or None, 0), SINK, "snapshot", ["k"])
    assert sinks.prune_unreachable(SINK, lambda: {2, 5, 6}) == [1, 3, 4]
    props = CheckpointProperties(
        imported_from="file:///savepoints/sp",
        savepoint_checkpoint_id=3,
        savepoint_taken_from=local_store.uri,
        savepoint_base_checkpoint_id=2,
    )
    sinks.rewind(SINK, 7, generation=1, alias_of=3)
    imported = completed_checkpoint(7, None, 0, props)
    assert sinks.publish(imported, SINK, "snapshot", ["k"], generation=1)

    manifest = sinks.manifest(SINK)
    assert manifest is not None and manifest.current == 7
    assert manifest.epochs[7].base_checkpoint_id == 2
    assert _on_timeline(manifest, UpstreamPosition(2, 0))
    assert not _on_timeline(manifest, UpstreamPosition(5, 0))
    assert not _on_timeline(manifest, UpstreamPosition(6, 0))
    # the next checkpoint, in the restore's generation, builds on 7 and reaches 7 and 2
    sinks.publish(completed_checkpoint(8, 7, 1), SINK, "snapshot", ["k"], generation=1)
    manifest = sinks.manifest(SINK)
    assert manifest is not None
    timeline = manifest.epochs[8].timeline
    assert reaches(timeline, generation_of(manifest.epochs[7].timeline) or 0, 7)
    assert reaches(timeline, 0, 2) and not reaches(timeline, 0, 5)
    assert TimelineStep(0, 2) in timeline
