"""The concurrency model: the parts of a deployment that overlap in production, run as
actors against one store, interleaved by a seeded step scheduler, with storage faults
and crash points, then checked by an independent checker.

Actors (each plays what an Airflow task, the CLI or a stray worker would do):
  run-k      a DAG run: append a source file, trigger, run every task (with Airflow
             retries and, sometimes, a speculative duplicate attempt), finalize and
             publish; a savepoint run also exports its savepoint
  zombie-k   a late attempt of some task of some checkpoint, writing after the fact
             (and sometimes killed between its file and its ack), but, like every
             task, not after its checkpoint's deadline (Airflow's dagrun_timeout)
  gc-k       `batchpoint gc` from a terminal (sometimes with a history limit)
  restore    a restore: latest, by id, or from an exported savepoint folder
  cleanup    the cleanup task: settle (expire, finalize leftovers)

After the actors end (or the step budget runs out and they are stopped), the model
plays the quiet hours: no faults, the clock passes every deadline and grace period,
the next cleanup settles and publishes, GC runs twice; then the checker looks.

`run_schedule(seed, store)` is the whole thing; everything is derived from the seed.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from batchpoint.errors import BatchpointError, RestoreRefused, TriggerRefused
from batchpoint.ops.epoch import finalize as ops_finalize
from batchpoint.ops.maintenance import gc as ops_gc
from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.savepoints import (
    SavepointLocation,
    default_savepoint_prefix,
)
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import RestorePlanner
from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore
from support.checker import ROOT, Checker, Violation
from support.faulty_store import Crash, FaultRates, FaultyStore
from support.model_world import (
    PARTITIONS,
    BaseAborted,
    BaseNotReady,
    build_model_pipeline,
    run_task,
    write_source_file,
    write_task_file,
)
from support.scheduler import StepScheduler

T = TypeVar("T")

START = 1_800_000_000.0  # the model clock's epoch: far from the wall clock on purpose


class ModelClock:
    """Time as the model says: one second per scheduler step, jumps in the quiet hours."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class FixedStoreRef(StoreRef):
    """A StoreRef that opens the one store object it was given (the fault wrapper)."""

    store: Any = field(default=None, compare=False)

    def open(self) -> ObjectStore:
        return self.store


@dataclass(frozen=True)
class ModelOptions:
    max_concurrent: int = 1
    num_retained: int = 2
    timeout: float = 400.0
    faults: bool = True
    online_checks: bool = True
    max_steps: int = 6000
    #: Replace the GC actor's collection (used to show that the checker catches a GC
    #: that deletes what it must not).
    gc_variant: Callable[[PipelineDriver], Any] | None = None
    #: Actors every schedule gets, whatever the seed draws ("gc", "restore").
    force: tuple[str, ...] = ()


class _Refused(Exception):
    """The protocol said no (trigger or restore refused): the actor ends quietly."""


@dataclass
class ScheduleResult:
    seed: int
    steps: int
    actors: list[str]
    violations: list[Violation]
    injected: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "steps": self.steps,
            "actors": self.actors,
            "injected_faults": self.injected,
            "violations": [v.to_json() for v in self.violations],
        }


def fault_rates(rng: random.Random) -> FaultRates:
    """Per schedule: a third without faults, the rest with a mix."""
    level = rng.choice([0.0, 0.01, 0.02, 0.04])
    return FaultRates(transient=level, throttle=level / 2, lost_reply=level, crash=level / 2)


class Schedule:
    def __init__(self, seed: int, inner: ObjectStore, options: ModelOptions | None = None) -> None:
        self.seed = seed
        self.options = options or ModelOptions()
        self.plan_rng = random.Random(f"plan:{seed}")
        self.rng = random.Random(f"actors:{seed}")
        self.inner = inner
        rates = fault_rates(self.plan_rng) if self.options.faults else FaultRates()
        self.store = FaultyStore(inner, rates=rates)
        # Bursty or fine-grained: a sticky scheduler lets one actor run long stretches
        # (a whole epoch inside one GC pass), a loose one interleaves every call.
        self.scheduler = StepScheduler(
            seed,
            max_steps=self.options.max_steps,
            stickiness=self.plan_rng.choice([0.5, 0.8, 0.95, 0.98]),
            on_step=self._on_step,
        )
        self.store.uniform = self.scheduler.uniform
        self.store.crashes_allowed = self.scheduler.in_actor
        self.clock = ModelClock()
        self.config = CheckpointConfig(
            timeout=self.options.timeout,
            max_concurrent=self.options.max_concurrent,
            num_retained=self.options.num_retained,
        )
        self.driver = PipelineDriver(
            build_model_pipeline(), FixedStoreRef(inner.uri, store=self.store), self.config,
            self.clock,
        )  # fmt: skip
        self.checker = Checker(inner, seed, self.options.max_concurrent)
        self.violations: list[Violation] = []
        self.allocated: list[int] = []
        self.completed: list[int] = []
        self.exported: list[str] = []
        self.notes: list[str] = []
        self._source_files = 0
        self._checked_writes = -1

    # -- plumbing -------------------------------------------------------------------------

    def _on_step(self, step: int, actor: str, at: str) -> None:
        self.clock.advance(1.0)
        # Only a write changes what the checker sees: check after each one.
        if self.options.online_checks and len(self.store.writes) != self._checked_writes:
            self._checked_writes = len(self.store.writes)
            self.violations += self.checker.online(step)

    def _task(self, fn: Callable[[int], T], retries: int = 2) -> T | None:
        """An Airflow task with retries: a crash or a storage error fails the try, and
        the next try runs from the start; None when every try failed."""
        for attempt in range(retries + 1):
            try:
                return fn(attempt)
            except (TriggerRefused, RestoreRefused) as exc:
                raise _Refused(str(exc)) from None
            except (Crash, BatchpointError):
                continue
        return None

    def _idle(self, polls: int) -> None:
        """Wait a while: each poll is a cheap read, so other actors run meanwhile."""
        for _ in range(polls):
            self.store.inner.head(ROOT + "ids.json")
            self.scheduler.yield_point("idle", "")

    def _append_source(self) -> None:
        # The world, not the system: files land in the source without faults.
        self._source_files += 1
        values = [self.rng.randint(1, 99) for _ in range(self.rng.randint(1, 3))]
        write_source_file(self.inner, self._source_files, self.rng.choice(PARTITIONS), values)

    # -- actors -------------------------------------------------------------------------

    def dag_run(self, name: str, kind: CheckpointType) -> None:
        self._append_source()
        try:
            pending = self._task(lambda _a: self.driver.trigger(kind))
        except _Refused:
            return
        if pending is None:
            return
        cid = pending.checkpoint_id
        self.allocated.append(cid)
        tasks = list(pending.expected_tasks)
        self.rng.shuffle(tasks)
        for task in tasks:
            self._run_task(pending, task, name)
            if self.rng.random() < 0.15:  # speculation: a second attempt of the same task
                self._run_task(pending, task, name + "-spec")
        outcome = None
        for _ in range(6):
            outcome = self._task(lambda _a: ops_finalize(self.driver, cid).outcome)
            if outcome is not None:
                break
            self._idle(5)
        if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
            return
        self.completed.append(cid)
        if kind is CheckpointType.SAVEPOINT:
            prefix = default_savepoint_prefix(self.driver.pipeline.name, cid, self.clock())
            target = SavepointLocation(self.store, prefix)
            if self._task(lambda _a: self.driver.coordinator.savepoints.export(cid, target)):
                self.exported.append(prefix)

    def _run_task(self, pending: Any, task: str, who: str) -> None:
        c = self.driver.coordinator

        def attempt(n: int) -> Any:
            for _ in range(25):
                if self._killed_by_timeout(pending):
                    return None
                try:
                    return run_task(c, pending, task, f"{who}-try{n}")
                except BaseNotReady:
                    self._idle(3)
            return None

        self._task(attempt)

    def zombie(self, name: str) -> None:
        self._idle(self.rng.randint(0, 200))
        if not self.allocated:
            return
        cid = self.rng.choice(self.allocated)
        c = self.driver.coordinator
        pending = self._task(lambda _a: c.get_checkpoint(cid), retries=0)
        if pending is None:
            return
        task = self.rng.choice(list(pending.expected_tasks))
        if self._killed_by_timeout(pending):
            return
        try:
            if self.rng.random() < 0.5:
                # Killed between writing its file and acking: the file is left behind.
                self._task(lambda _a: write_task_file(c, pending, task, name), retries=0)
                return
            self._task(lambda _a: run_task(c, pending, task, name), retries=0)
        except (BaseNotReady, BaseAborted):
            return  # its base is not there (yet): a real late attempt fails the same way

    def _killed_by_timeout(self, pending: Any) -> bool:
        """Airflow ends a DAG run at its timeout, which is the checkpoint timeout (the
        dagrun_timeout): no task of a checkpoint starts writing after its deadline. This
        bound is what GC's grace relies on; a writer outliving it is outside the model."""
        return self.clock() > pending.deadline

    def gc(self, name: str) -> None:
        variant = self.options.gc_variant
        for _ in range(self.rng.randint(1, 2)):
            self._idle(self.rng.randint(0, 150))
            limit = self.rng.choice([None, None, 1, 3])

            def collect(_a: int, limit: int | None = limit) -> Any:
                if variant is not None:
                    return variant(self.driver)
                return ops_gc(self.driver.coordinator, history_limit=limit)

            self._task(collect, retries=1)

    def restore(self, name: str) -> None:
        self._idle(self.rng.randint(0, 250))
        choices: list[Any] = ["latest"]
        if self.completed:
            choices.append(self.rng.choice(self.completed))
        if self.exported:
            choices.append(self.rng.choice(self.exported))
        source = self.rng.choice(choices)
        self.notes.append(f"restore from {source}")
        planner = RestorePlanner(self.driver)

        def go(_a: int) -> Any:
            plan = planner.plan(source)
            return planner.apply(plan)

        with contextlib.suppress(_Refused):
            self._task(go, retries=1)

    def cleanup(self, name: str) -> None:
        for _ in range(self.rng.randint(1, 3)):
            self._idle(self.rng.randint(0, 200))
            self._task(lambda _a: self.driver.coordinator.settle(), retries=1)

    # -- the schedule -------------------------------------------------------------------

    def plan(self) -> list[tuple[str, Callable[[], None]]]:
        r = self.plan_rng
        actors: list[tuple[str, Callable[[], None]]] = []
        runs = r.randint(2, 4)
        savepoint_run = r.randrange(runs) if r.random() < 0.6 else -1
        for k in range(runs):
            kind = CheckpointType.SAVEPOINT if k == savepoint_run else CheckpointType.CHECKPOINT
            name = f"run{k}" + ("-savepoint" if kind is CheckpointType.SAVEPOINT else "")
            actors.append((name, lambda n=name, t=kind: self.dag_run(n, t)))
        for k in range(r.randint(0, 2)):
            actors.append((f"zombie{k}", lambda n=f"zombie{k}": self.zombie(n)))
        for k in range(r.randint(0, 2)):
            actors.append((f"gc{k}", lambda n=f"gc{k}": self.gc(n)))
        if "gc" in self.options.force and not any(n.startswith("gc") for n, _ in actors):
            actors.append(("gc0", lambda: self.gc("gc0")))
        if r.random() < 0.6 or "restore" in self.options.force:
            actors.append(("restore", lambda: self.restore("restore")))
        if r.random() < 0.5:
            actors.append(("cleanup", lambda: self.cleanup("cleanup")))
        return actors

    def warm_up(self, epochs: int) -> None:
        """Completed epochs before the schedule (no faults, no interleaving)."""
        self.store.enabled = False
        for k in range(epochs):
            kind = CheckpointType.SAVEPOINT if k == 1 else CheckpointType.CHECKPOINT
            self.dag_run(f"warm{k}", kind)
            self.clock.advance(10)
        self.store.enabled = True

    def quiet_hours(self) -> None:
        """No faults, no interleaving: every deadline and grace period passes, the next
        cleanup settles and publishes, GC runs twice."""
        self.store.enabled = False
        self.store.before_call = None
        c = self.driver.coordinator
        grace = 10 * self.options.timeout + 3600
        self.clock.advance(grace)
        step = self.scheduler.step
        try:
            c.settle()
            head = self.checker.control()
            if head is not None and head.head is not None:
                self.driver.notify_complete(head.head)
            ops_gc(self.driver.coordinator, history_limit=None)
            self.clock.advance(grace)
            ops_gc(self.driver.coordinator, history_limit=None)
        except BatchpointError as exc:
            self.violations.append(
                Violation(self.seed, step, "recovery-failed", f"{type(exc).__name__}: {exc}")
            )

    def run(self) -> ScheduleResult:
        started = time.monotonic()
        self.store.before_call = self.scheduler.yield_point
        self.warm_up(self.plan_rng.randint(0, 3))
        actors = self.plan()
        for name, fn in actors:
            self.scheduler.spawn(name, fn)
        self.scheduler.run()
        step = self.scheduler.step
        if self.scheduler.hung:
            self.violations.append(Violation(self.seed, step, "hung", self.scheduler.hung))
        for actor in self.scheduler.actors.values():
            if actor.error is not None and not isinstance(actor.error, _Refused):
                last = actor.error_trace.strip().splitlines()[-3:]
                self.violations.append(
                    Violation(
                        self.seed,
                        step,
                        "actor-error",
                        f"{actor.name}: {type(actor.error).__name__}: {actor.error} "
                        f"({' | '.join(s.strip() for s in last)})",
                    )
                )
        self.quiet_hours()
        self.violations += self.checker.final(step, self.store.writes, self.allocated)
        return ScheduleResult(
            self.seed,
            step,
            [name for name, _ in actors],
            _dedup(self.violations),
            len(self.store.injected),
            time.monotonic() - started,
            self.notes,
        )


def _dedup(violations: list[Violation]) -> list[Violation]:
    """One violation per rule and message (an online rule breaks on many steps)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for v in violations:
        if (v.rule, v.message) not in seen:
            seen.add((v.rule, v.message))
            out.append(v)
    return out


def run_schedule(
    seed: int, store: ObjectStore, options: ModelOptions | None = None
) -> ScheduleResult:
    return Schedule(seed, store, options).run()


__all__ = ["ModelOptions", "Schedule", "ScheduleResult", "run_schedule"]
