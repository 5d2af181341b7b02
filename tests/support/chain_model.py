"""The chain's concurrency model: pipeline `up` and pipeline `down`, which reads up's
snapshot and append sinks, run as actors against one store under the seeded step
scheduler (support/scheduler.py), with storage faults and crash points
(support/faulty_store.py). Tasks ack stand-in files (support/fake_epochs.py): what is
modelled is the protocol, not Spark.

Actors:
  up-k       a DAG run of up: a source file lands, trigger, every task, finalize
  down-k     a DAG run of down: trigger, then each pipeline source's read as the
             operator does it (`read_between`: a restore of up that took back what it
             read, or would read, stops it), every task, finalize
  cascade    `batchpoint restore --pipeline up --cascade` to a completed checkpoint of
             up, with Airflow's retries: a crash mid-way is finished by the retry
  restore-p  a plain restore of up (to a completed checkpoint) or of down (latest)
  gc         `batchpoint gc` of both pipelines
  repair-p   `batchpoint repair` of up or down, forced or not, on its readable record

Then the quiet hours: no faults, every deadline passes, a cascade left active is
finished by one more call, both pipelines settle. The checker (`ChainChecker`) reads the
store as raw JSON and holds it against the true history the actors recorded:

  consumes-once  every completed down checkpoint read, of up, exactly the checkpoints
                 after what its base read: what it read up to descends from its base's
                 read in up's true history (no checkpoint twice, none skipped)
  stops-loudly   down's head read only up's head history, or down's next epoch stops
                 with UpstreamRestored; and when it did, that epoch does not stop
  cascade-ends   no cascade record is left active, no control record fenced
  cascade-did    each finished cascade restored every pipeline of it to its target
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from batchpoint.errors import BatchpointError, ObjectNotFound, TriggerRefused
from batchpoint.ops.cascade import CascadeContext, cascade_restore
from batchpoint.ops.epoch import finalize as ops_finalize
from batchpoint.ops.maintenance import gc as ops_gc
from batchpoint.ops.maintenance import repair as ops_repair
from batchpoint.protocol.cascade import ACTIVE, PREFIX, CascadeBusy
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import RestorePlanner
from batchpoint.sources.errors import SourceOffsetError
from batchpoint.sources.upstream import PipelineSinkSource, UpstreamPosition, UpstreamRestored
from batchpoint.storage.base import ObjectStore
from support import fake_epochs
from support.checker import Violation
from support.clock import FakeClock
from support.faulty_store import Crash, FaultRates, FaultyStore
from support.model_setup import FixedStoreRef, fault_rates
from support.scheduler import StepScheduler

T = TypeVar("T")
ROW = "k STRING NOT NULL, v BIGINT"
SOURCE_ROOT = "sources/up"


def up_pipeline() -> Pipeline:
    p = Pipeline("up", max_parallelism=8)
    p.source("src", root=SOURCE_ROOT, schema=ROW)
    p.operator("agg", inputs=["src"], key=["k"], states={"sums": ROW}, parallelism=2)(_unused)
    p.sink("snap", inputs=["agg"], key=["k"], mode="snapshot")
    p.sink("log", inputs=["agg"], key=["k"], mode="append")
    return p


def down_pipeline() -> Pipeline:
    p = Pipeline("down", max_parallelism=8)
    p.source("snap", upstream="up", sink="snap", schema=ROW, key=["k"])
    p.source("log", upstream="up", sink="log", schema=ROW)
    p.operator("join", inputs=["snap", "log"], key=["k"], states={"seen": ROW})(_unused)
    p.sink("out", inputs=["join"], key=["k"], mode="snapshot")
    return p


def _unused(_ctx: Any) -> None:  # tasks ack stand-in files: no function runs
    raise AssertionError("the model runs no operator function")


class _Refused(Exception):
    pass


@dataclass
class ChainResult:
    seed: int
    steps: int
    actors: list[str]
    violations: list[Violation]
    notes: list[str] = field(default_factory=list)
    faults: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations


class ChainSchedule:
    def __init__(self, seed: int, inner: ObjectStore, *, faults: bool = True) -> None:
        self.seed = seed
        self.rng = random.Random(f"chain:{seed}")
        self.inner = inner
        self.store = FaultyStore(inner, rates=fault_rates(self.rng) if faults else FaultRates())
        self.scheduler = StepScheduler(
            seed, max_steps=4000, stickiness=self.rng.choice([0.5, 0.8, 0.95]),
            on_step=lambda *_: self.clock.advance(1.0),
        )  # fmt: skip
        self.store.uniform = self.scheduler.uniform
        self.store.crashes_allowed = self.scheduler.in_actor
        self.clock = FakeClock()
        self.config = CheckpointConfig(
            timeout=400.0, num_retained=self.rng.choice([3, 5]), tolerable_failed_checkpoints=1000
        )
        ref = FixedStoreRef(inner.uri, store=self.store)
        self.code = {"up": up_pipeline(), "down": down_pipeline()}
        self.drivers = {
            n: PipelineDriver(p, ref, self.config, self.clock) for n, p in self.code.items()
        }
        self.context = CascadeContext(self.code, ref, self.config, clock=self.clock)
        # the true history: (pipeline, checkpoint) -> its base; down's reads of up
        self.parents: dict[tuple[str, int], int | None] = {}
        # down checkpoint -> source uid -> (what its base read of up, what it read)
        self.reads: dict[int, dict[str, tuple[int | None, int | None]]] = {}
        self.completed: dict[str, set[int]] = {"up": set(), "down": set()}
        self.notes: list[str] = []
        self._files = 0

    # -- plumbing -------------------------------------------------------------------------

    def _task(self, fn: Callable[[], T], retries: int = 2) -> T | None:
        for _ in range(retries + 1):
            try:
                return fn()
            except TriggerRefused as exc:
                raise _Refused(str(exc)) from None
            except (Crash, BatchpointError):
                continue
        return None

    def _idle(self, polls: int) -> None:
        for _ in range(polls):
            self.store.inner.head("ids")
            self.scheduler.yield_point("idle", "")

    # -- actors -------------------------------------------------------------------------

    def epoch(self, name: str, due: int = 0) -> None:
        """One DAG run of pipeline `name`."""
        self._idle(due)
        driver = self.drivers[name]
        if name == "up":  # the world: a file lands, without faults
            self._files += 1
            self.inner.put(f"{SOURCE_ROOT}/p0/f{self._files:05d}.jsonl", b'{"k":"a","v":1}\n')
        try:
            pending = self._task(driver.trigger)
        except _Refused:
            return
        if pending is None:
            return
        cid = pending.checkpoint_id
        self.parents[(name, cid)] = pending.base_checkpoint_id
        if name == "down":
            self.reads[cid] = {
                uid: (_read(pending.base_barrier.get(uid)), _read(offsets))
                for uid, offsets in pending.barrier.items()
            }
            if not self._read_upstream(driver, pending):
                return
        if self._task(lambda: fake_epochs.ack_all(driver, pending) or True) is None:
            return
        outcome = self._task(lambda: ops_finalize(driver, cid).outcome)
        if outcome is not None and outcome.status is CheckpointStatus.COMPLETED:
            self.completed[name].add(cid)

    def _read_upstream(self, driver: PipelineDriver, pending: Any) -> bool:
        """The operator's reads; a stop declines the checkpoint as the runtime does."""
        for source in driver.pipeline.sources.values():
            files = source.files(driver.store)
            assert isinstance(files, PipelineSinkSource)
            start, end = pending.base_barrier.get(source.uid), pending.barrier.get(source.uid)
            try:
                self._task(lambda f=files, s=start, e=end: _strict(f.read_between, s, e))
            except _Stop as stop:
                self.notes.append(f"down {pending.checkpoint_id} stopped: {stop}")
                self._decline(driver, pending.checkpoint_id, str(stop))
                return False
        return True

    def _decline(self, driver: PipelineDriver, cid: int, why: str) -> None:
        reason = CheckpointFailureReason.DECLINED
        self._task(lambda: driver.coordinator.abort(cid, reason, why))

    def cascade(self, due: int) -> None:
        self._idle(due)
        if not self.completed["up"]:
            return
        target = self.rng.choice(sorted(self.completed["up"]))
        self.notes.append(f"cascade to up {target}")
        try:
            run = self._task(lambda: cascade_restore(self.context, "up", target), retries=3)
        except CascadeBusy:
            return
        if run is not None:
            self.notes.append(run.render().replace("\n", " | "))

    def restore(self, name: str, due: int, to: int | None = None) -> None:
        self._idle(due)
        source: int | None = to
        if name == "up" and to is None:
            if not self.completed["up"]:
                return
            source = self.rng.choice(sorted(self.completed["up"]))
        planner = RestorePlanner(self.drivers[name])
        self.notes.append(f"restore {name} to {source or 'latest'}")
        self._task(lambda: planner.apply(planner.plan(source)), retries=1)

    def repair(self, name: str, due: int) -> None:
        """`batchpoint repair` on a readable control record: refused unless forced (or
        unchanged where the records agree with it);
        forced, a new restore generation with the sinks rewound to the head, written by
        compare-and-swap on what it read (a cascade's fence is not carried over)."""
        self._idle(due)
        force = self.rng.random() < 0.7
        result = self._task(lambda: ops_repair(self.drivers[name].coordinator, force=force))
        if result is not None:
            self.notes.append(f"repair {name}{' --force' if force else ''}: {result.status}")

    def gc(self, due: int) -> None:
        self._idle(due)
        for driver in self.drivers.values():
            self._task(lambda d=driver: ops_gc(d.coordinator, d.store), retries=1)

    def plan(self) -> list[tuple[str, Callable[[], None]]]:
        r = self.rng
        actors: list[tuple[str, Callable[[], None]]] = []

        def add(name: str, fn: Callable[[int], None], due: int) -> None:
            actors.append((name, lambda: fn(due)))

        for k in range(r.randint(2, 4)):
            add(f"up-{k}", lambda d: self.epoch("up", d), r.randint(0, 150 * k))
        for k in range(r.randint(2, 4)):
            add(f"down-{k}", lambda d: self.epoch("down", d), r.randint(0, 150 * k))
        if r.random() < 0.6:
            add("cascade", self.cascade, r.randint(0, 250))
        if r.random() < 0.5:
            add("restore-up", lambda d: self.restore("up", d), r.randint(0, 300))
        if r.random() < 0.3:
            add("restore-down", lambda d: self.restore("down", d), r.randint(0, 300))
        if r.random() < 0.5:
            add("gc", self.gc, r.randint(0, 300))
        if r.random() < 0.25:
            name = r.choice(["up", "down"])
            add(f"repair-{name}", lambda d, n=name: self.repair(n, d), r.randint(0, 300))
        return actors

    # -- the whole schedule -------------------------------------------------------------

    def run(self) -> ChainResult:
        self.store.enabled = False  # the warm-up: no faults
        for driver in self.drivers.values():
            driver.coordinator.register(driver.pipeline.spec())
        for name in ["up", "down", "up"][: self.rng.randint(1, 3)]:  # the warm-up, no faults
            self.epoch(name)
        self.store.enabled = True
        self.store.before_call = self.scheduler.yield_point
        actors = self.plan()
        for name, fn in actors:
            self.scheduler.spawn(name, fn)
        self.scheduler.run()
        step = self.scheduler.step
        violations = (
            [Violation(self.seed, step, "hung", self.scheduler.hung)] if self.scheduler.hung else []
        )
        for actor in self.scheduler.actors.values():
            if actor.error is not None and not isinstance(actor.error, _Refused):
                message = f"{actor.name}: {type(actor.error).__name__}: {actor.error}"
                violations.append(Violation(self.seed, step, "actor-error", message))
        violations += self.quiet_hours(step)
        checker = ChainChecker(self.inner, self.seed, step, self)
        violations += checker.check()
        return ChainResult(
            self.seed,
            step,
            [n for n, _ in actors],
            violations,
            self.notes,
            len(self.store.injected),
        )

    def quiet_hours(self, step: int) -> list[Violation]:
        self.store.enabled = False
        self.store.before_call = None
        self.clock.advance(10 * self.config.timeout + 3600)
        try:
            if self.inner.head(ACTIVE) is not None:  # a cascade cut short: one more call
                run = cascade_restore(self.context, "up", None)
                self.notes.append("quiet hours: " + run.render().replace("\n", " | "))
            for driver in self.drivers.values():
                driver.coordinator.settle()
        except BatchpointError as exc:
            return [Violation(self.seed, step, "recovery-failed", f"{type(exc).__name__}: {exc}")]
        return []


def _strict(read: Callable[..., Any], start: Any, end: Any) -> Any:
    """A source's refusal is the operator's answer, not a storage fault to retry."""
    try:
        return read(start, end)
    except SourceOffsetError as exc:
        raise _Stop(exc) from None


class _Stop(Exception):
    def __init__(self, cause: SourceOffsetError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _read(offsets: Any) -> int | None:
    """The up checkpoint one source's offsets read up to (None: nothing)."""
    return UpstreamPosition.of(offsets).checkpoint_id


class ChainChecker:
    """Reads the store as raw JSON (outcomes, control records, manifests, cascade and
    restore records) and holds it against the history the actors recorded."""

    def __init__(self, store: ObjectStore, seed: int, step: int, world: ChainSchedule) -> None:
        self.store, self.seed, self.step, self.world = store, seed, step, world

    def check(self) -> list[Violation]:
        return self._consumes_once() + self._stops_loudly() + self._cascades()

    def _v(self, rule: str, message: str) -> Violation:
        return Violation(self.seed, self.step, rule, message)

    def _json(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.store.get(key).data)
        except ObjectNotFound:
            return None

    def _outcome(self, pipeline: str, cid: int) -> dict[str, Any] | None:
        return self._json(f"pipelines/{pipeline}/checkpoints/chk-{cid:010d}/outcome.json")

    def _history(self, pipeline: str, cid: int | None) -> set[int]:
        """`cid` and its ancestors in the true history."""
        out: set[int] = set()
        while cid is not None and cid not in out:
            out.add(cid)
            cid = self.world.parents.get((pipeline, cid))
        return out

    def _consumes_once(self) -> list[Violation]:
        out = []
        for cid, reads in sorted(self.world.reads.items()):
            doc = self._outcome("down", cid)
            done = cid in self.world.completed["down"] or (doc or {}).get("status") == "COMPLETED"
            if not done:
                continue
            for uid, (base, read) in reads.items():
                if base is not None and base not in self._history("up", read):
                    out.append(
                        self._v(
                            "consumes-once",
                            f"down {cid} read '{uid}' up to up {read}, after its base read up "
                            f"{base}, which is not in {read}'s history",
                        )
                    )
        return out

    def _stops_loudly(self) -> list[Violation]:
        control = self._json("pipelines/down/head.json") or {}
        head = control.get("head")
        doc = self._outcome("down", head) if head is not None else None
        if doc is None:
            return []
        barrier = doc["checkpoint"].get("barrier", {})
        kept = True
        for uid, offsets in barrier.items():
            read = UpstreamPosition.of(offsets).checkpoint_id
            manifest = self._json(f"pipelines/up/sinks/{uid}/manifest.json") or {}
            if read is not None and read not in self._history("up", manifest.get("current")):
                kept = False
        driver = self.world.drivers["down"]
        try:
            pending = driver.trigger()
        except TriggerRefused as exc:
            return [self._v("stops-loudly", f"down's next trigger refused: {exc}")]
        stopped = None
        for source in driver.pipeline.sources.values():
            files = source.files(driver.store)
            assert isinstance(files, PipelineSinkSource)
            try:
                files.read_between(
                    pending.base_barrier.get(source.uid), pending.barrier[source.uid]
                )
            except UpstreamRestored as exc:
                stopped = str(exc)
            except SourceOffsetError:
                pass  # up's GC dropped the base's epoch: a stop of its own, not this rule's
        driver.coordinator.abort(pending.checkpoint_id, CheckpointFailureReason.DECLINED, "check")
        if kept and stopped:
            return [self._v("stops-loudly", f"down {head} read only up's history, yet: {stopped}")]
        if not kept and not stopped:
            return [self._v("stops-loudly", f"down {head} read what up's restore took back, "
                                            "and its next epoch went on")]  # fmt: skip
        return []

    def _cascades(self) -> list[Violation]:
        out = []
        if self.store.head(ACTIVE) is not None:
            out.append(self._v("cascade-ends", "a cascade record is still active"))
        for pipeline in ("up", "down"):
            if "cascade" in (self._json(f"pipelines/{pipeline}/head.json") or {}):
                out.append(self._v("cascade-ends", f"{pipeline}'s control record is fenced"))
        restores = {
            p: [self._json(o.key) or {} for o in self.store.list(f"pipelines/{p}/restores/")]
            for p in ("up", "down")
        }
        for info in self.store.list(PREFIX):
            record = self._json(info.key) or {}
            if info.key == ACTIVE or record.get("status") != "done":
                continue
            for step in record.get("steps", []):
                if not any(
                    r.get("checkpoint_id") == step["target"]
                    and r.get("restore_generation", 0) > step["generation_before"]
                    for r in restores[step["pipeline"]]
                ):
                    out.append(
                        self._v(
                            "cascade-did",
                            f"cascade {record['cascade_id']} is done, but {step['pipeline']} "
                            f"has no restore to {step['target']} after it began",
                        )
                    )
        return out


def run_chain_schedule(seed: int, store: ObjectStore, *, faults: bool = True) -> ChainResult:
    return ChainSchedule(seed, store, faults=faults).run()
