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
  gc-k       `batchpoint gc` from a terminal (sometimes with a history limit); it also
             expires the table sink's snapshots of dropped epochs and keeps what the
             table's snapshots read
  restore    a restore: latest, by id, or from an exported savepoint folder
  import     `batchpoint savepoint import` of an exported folder, no restore after it,
             and run-next, the next scheduled run, due while it is imported: only a
             restore may make an import the head, or a base
  cleanup    the cleanup task: settle (expire, finalize leftovers)
  repair     `batchpoint repair`, with or without --force, on the readable control
             record (refused unless forced; forced, a compare-and-swap on what it read)
  sync-k     a late table sync: the table sink brought to its manifest, or a retried
             finalize of a completed checkpoint (publish + sync)
  retry      when the warm-up left the table lagging: Airflow's retry of its last
             finalize, soon after

The `sums` sink is an Iceberg table on a real SQLite catalog (support/faulty_catalog.py):
every catalog call is a scheduler step, and the catalog goes down for stretches of
steps (a finalize whose table sync fails leaves the table lagging its manifest). In a
Delta schedule (`ModelOptions.table_format`) it is a Delta table instead, synced by the
delta-rs adapter: its copies are storage calls, and delta-rs's own calls are steps with
the same outages, stalls and crash points, plus a commit that fails between its copies
and its log write and one that lands while its caller hears it failed
(support/faulty_delta.py).

After the actors end (or the step budget runs out and they are stopped), the model
plays the quiet hours: no faults, the catalog back, the clock passes every deadline and
grace period, the next cleanup settles and publishes (and syncs the table), GC runs
twice; then the checker looks.

`run_schedule(seed, store)` is the whole thing; everything is derived from the seed.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from batchpoint.errors import BatchpointError, RestoreRefused, TriggerRefused
from batchpoint.ops.epoch import finalize as ops_finalize
from batchpoint.ops.maintenance import RepairResult
from batchpoint.ops.maintenance import gc as ops_gc
from batchpoint.ops.maintenance import repair as ops_repair
from batchpoint.ops.savepoints import import_folder as ops_import_folder
from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.savepoints import (
    SavepointLocation,
    default_savepoint_prefix,
)
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import RestorePlanner
from batchpoint.storage.base import ObjectStore
from batchpoint.tables.iceberg import TableError
from support.checker import ROOT, Checker, Violation
from support.clock import FakeClock
from support.faulty_catalog import use_catalog
from support.faulty_delta import DeltaFaults, use_delta
from support.faulty_store import Crash, FaultRates, FaultyStore
from support.model_setup import (
    FixedStoreRef,
    catalog_file,
    catalog_outages,
    delta_reader,
    fault_rates,
    pick_table_format,
    table_faults,
)
from support.model_world import (
    PARTITIONS,
    TABLE,
    TABLE_CATALOG,
    BaseAborted,
    BaseNotReady,
    build_model_pipeline,
    run_task,
    write_source_file,
    write_task_file,
)
from support.scheduler import StepScheduler
from support.table_checker import TableReader

T = TypeVar("T")

#: Counted with the faults, but not faults injected: an effect, and a plan's size.
NOT_INJECTED = frozenset(
    {"sync-failed", "catalog-outage-windows", "delta-outage-windows", "delta-conflict"}
)


@dataclass(frozen=True)
class ModelOptions:
    max_concurrent: int = 1
    #: None: drawn per schedule (1 to 3: how soon an epoch leaves the sink manifest).
    num_retained: int | None = None
    timeout: float = 400.0
    faults: bool = True
    online_checks: bool = True
    max_steps: int = 6000
    #: Replace the GC actor's collection (used to show that the checker catches a GC
    #: that deletes what it must not).
    gc_variant: Callable[[PipelineDriver], Any] | None = None
    #: Actors and faults every schedule gets, whatever the seed draws ("gc", "restore",
    #: "repair", "sync", "import", "outage": the catalog down from the start for a
    #: while, "stress": a table stress schedule, see `Schedule.table_stress`).
    force: tuple[str, ...] = ()
    #: The `sums` table's format: "iceberg", "delta", or "mixed" (drawn per seed).
    table_format: str = "iceberg"


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
    #: Faults by kind: storage faults, catalog outages (failed calls, and windows),
    #: stalls and crashes, a lagging table, a damaged control record; and the table
    #: syncs that failed because of them.
    faults: Counter[str] = field(default_factory=Counter)
    table_format: str = "iceberg"

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "table_format": self.table_format,
            "steps": self.steps,
            "actors": self.actors,
            "injected_faults": self.injected,
            "faults": dict(self.faults),
            "violations": [v.to_json() for v in self.violations],
        }


class Schedule:
    def __init__(self, seed: int, inner: ObjectStore, options: ModelOptions | None = None) -> None:
        self.seed = seed
        self.options = options or ModelOptions()
        self.plan_rng = random.Random(f"plan:{seed}")
        self.rng = random.Random(f"actors:{seed}")
        # The table actors and catalog faults draw from their own streams.
        self.table_rng = random.Random(f"tables:{seed}")
        # So does the import actor (its own stream: the schedules without one are as
        # they were before it).
        self.import_rng = random.Random(f"imports:{seed}")
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
        outages = catalog_outages(self.table_rng, "outage" in self.options.force)
        self.table_format = pick_table_format(seed, self.options.table_format)
        # The table's calls (the catalog's, or delta-rs's): steps, outages, crashes.
        self.catalog_faults = table_faults(
            self.table_format,
            self.scheduler,
            self.table_rng,
            rates,
            outages if self.options.faults or "outage" in self.options.force else [],
        )
        self.catalog_path, self._catalog_folder = catalog_file(inner)
        # Model time, far from the wall clock on purpose: one second per scheduler step,
        # jumps in the quiet hours.
        self.clock = FakeClock()
        self.config = self._checkpoint_config()
        self.driver = PipelineDriver(
            build_model_pipeline(self.table_format), FixedStoreRef(inner.uri, store=self.store),
            self.config, self.clock,
        )  # fmt: skip
        delta = self.table_format == "delta"
        table = delta_reader(inner) if delta else TableReader(
            inner, self.catalog_path, TABLE_CATALOG, TABLE
        )  # fmt: skip
        self.checker = Checker(inner, seed, self.options.max_concurrent, table=table)
        self.violations: list[Violation] = []
        self.faults: Counter[str] = Counter()
        self.allocated: list[int] = []
        self.completed: list[int] = []
        self.exported: list[str] = []
        self.notes: list[str] = []
        self._source_files = 0
        self._importing = False  # the import actor is about to import (or gave up)
        self._before_damage: tuple[int, int | None] | None = None  # (generation, head)
        self._checked_writes = -1
        self._checked_tables = (-1, -1)
        self._lagging: int | None = None  # the warm-up's last checkpoint, if unsynced

    def _checkpoint_config(self) -> CheckpointConfig:
        """The pipeline's checkpoint settings, and whether this is a table stress
        schedule: one retained checkpoint (epochs leave the manifest fast), a longer
        warm-up the table missed from its start, and GC: the table catches up on epochs
        GC is dropping."""
        stress = self.table_rng.random() < 0.15 or "stress" in self.options.force
        self.table_stress = self.options.faults and stress
        retained = self.options.num_retained or self.table_rng.choice([1, 2, 2, 3])
        retained = 1 if self.table_stress and self.options.num_retained is None else retained
        return CheckpointConfig(
            timeout=self.options.timeout,
            max_concurrent=self.options.max_concurrent,
            num_retained=retained,
        )

    # -- plumbing -------------------------------------------------------------------------

    def _on_step(self, step: int, actor: str, at: str) -> None:
        self.clock.advance(1.0)
        if not self.options.online_checks:
            return
        # Only a write changes what the checker sees: check after each one.
        if len(self.store.writes) != self._checked_writes:
            self._checked_writes = len(self.store.writes)
            self.violations += self.checker.online(step)
        # The table's snapshots can stop reading when the table changes or files go.
        deletes = sum(1 for w in self.store.writes if w.op in ("delete", "delete_many"))
        now = (self.catalog_faults.changes, deletes)
        if now != self._checked_tables:
            self._checked_tables = now
            self.violations += self.checker.online_table(step)

    def _task(self, fn: Callable[[int], T], retries: int = 2) -> T | None:
        """An Airflow task with retries: a crash or a storage error fails the try, and
        the next try runs from the start; None when every try failed."""
        for attempt in range(retries + 1):
            try:
                return fn(attempt)
            except (TriggerRefused, RestoreRefused) as exc:
                raise _Refused(str(exc)) from None
            except TableError:
                self.faults["sync-failed"] += 1  # the table lags until a later sync
                continue
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

    def dag_run(self, name: str, kind: CheckpointType, due: int = 0) -> None:
        """A DAG run; `due`: polls before its scheduled time comes."""
        self._idle(due)
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
            self._export(cid)

    def _export(self, cid: int) -> None:
        prefix = default_savepoint_prefix(self.driver.pipeline.name, cid, self.clock())
        target = SavepointLocation(self.store, prefix)
        if self._task(lambda _a: self.driver.coordinator.savepoints.export(cid, target)):
            self.exported.append(prefix)

    def _run_task(self, pending: Any, task: TaskId, who: str) -> None:
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
        if pending is None or not pending.expected_tasks:
            return  # none, or one whose trigger died before its tasks were recorded
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
                return ops_gc(
                    self.driver.coordinator, self.driver.coordinator.store, history_limit=limit
                )

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

    def import_savepoint(self, name: str) -> None:
        """An import of an exported savepoint folder with no restore after it (the
        restore actor restores from folders): admitted while scheduled runs trigger,
        complete and settle, it must stay beside their timeline (the checker's
        `head-on-import`)."""
        prefix = self._folder_to_import()
        self._importing = True  # the next scheduled run is due from now on
        if prefix is None:
            return
        c = self.driver.coordinator
        admitted = len(self.allocated)
        try:
            imported = self._task(lambda _a: ops_import_folder(c, prefix), retries=3)
        except _Refused as exc:
            self.notes.append(f"import of {prefix} refused: {exc}")
            return
        done = f"as {imported.checkpoint_id}" if imported else "failed (faults)"
        raced = self.allocated[admitted:]  # triggered while it was being imported
        self.notes.append(
            f"imported {prefix} {done}" + (f", raced by checkpoints {raced}" if raced else "")
        )

    def _folder_to_import(self) -> str | None:
        r = self.import_rng
        for _ in range(5):  # a folder exported by the warm-up or by a savepoint run
            if self.exported:
                break
            self._idle(r.randint(10, 60))
        if not self.exported and self.completed:  # none yet: `batchpoint savepoint export`
            self._export(r.choice(self.completed))
        if not self.exported:
            return None
        self._idle(r.randint(0, 40))
        return r.choice(self.exported)

    def next_run(self, name: str, due: int) -> None:
        """The next scheduled run, due `due` polls after an import began: it triggers
        while the import copies, acks or finalizes, or soon after."""
        for _ in range(100):
            if self._importing:
                break
            self._idle(5)
        self.dag_run(name, CheckpointType.CHECKPOINT, due)

    def cleanup(self, name: str) -> None:
        for _ in range(self.rng.randint(1, 3)):
            self._idle(self.rng.randint(0, 200))
            self._task(lambda _a: self.driver.coordinator.settle(), retries=1)

    def repair(self, name: str) -> None:
        """`batchpoint repair`: by mistake or on purpose on the readable control record
        (refused unless forced, or unchanged where the records agree with it; forced, it
        may only win a compare-and-swap on what it read), or after the record was damaged
        (a truncated write): then it rebuilds it from the records, without --force. The
        checker sees whether it moved the head back."""
        self._idle(self.table_rng.randint(0, 300))
        damaged = self.options.faults and self.table_rng.random() < 0.4
        force = not damaged and self.table_rng.random() < 0.7
        if damaged:
            self.damage_control_record()
        result = self._task(lambda _a: ops_repair(self.driver.coordinator, force=force), 2)
        if result is None:
            return
        self.notes.append(f"repair{' --force' if force else ''}: {result.status}")
        if result.in_doubt:
            self._task(lambda _a: self.answer_doubt(result), 2)
        writes = result.status not in ("refused", "unchanged")
        if result.previous == "readable" and not force and writes:
            self.violations.append(
                Violation(
                    self.seed,
                    self.scheduler.step,
                    "repair-not-refused",
                    f"repair without --force on a readable record: {result.status}",
                )
            )

    def damage_control_record(self) -> None:
        """The world, not the system: the control record cut short (a broken tool, a
        bad manual edit), at this step, with no fault or scheduler in the way."""
        key = ROOT + "head.json"
        with contextlib.suppress(BatchpointError):
            before = self.checker.control()
            data = self.inner.get(key).data
            if before is not None and before.raw_kind == "pipeline-control":
                self._before_damage = (before.generation, before.head)
            self.inner.put(key, data[: len(data) // 2])
            self.faults["control-record-damaged"] += 1

    def late_sync(self, name: str) -> None:
        """A table sync that comes late: the sink's table brought to its manifest, or a
        retried finalize of a completed checkpoint (its publish, then the sync)."""
        for _ in range(self.table_rng.randint(1, 2)):
            self._idle(self.table_rng.randint(0, 250))
            if self.completed and self.table_rng.random() < 0.5:
                cid = self.table_rng.choice(self.completed)
                self._task(lambda _a, cid=cid: ops_finalize(self.driver, cid), retries=0)
            else:
                self._task(lambda _a: self.driver.sync_tables(), retries=0)

    def retried_finalize(self, name: str, checkpoint_id: int) -> None:
        """Airflow's retry of a finalize whose table sync failed (the warm-up's last,
        with the catalog down): soon, the catalog back, the table far behind."""
        self._idle(self.table_rng.randint(0, 40))
        self._task(lambda _a: ops_finalize(self.driver, checkpoint_id))

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
        gc_forced = "gc" in self.options.force or self.table_stress
        if gc_forced and not any(n.startswith("gc") for n, _ in actors):
            actors.append(("gc0", lambda: self.gc("gc0")))
        if r.random() < 0.6 or "restore" in self.options.force:
            actors.append(("restore", lambda: self.restore("restore")))
        if r.random() < 0.5:
            actors.append(("cleanup", lambda: self.cleanup("cleanup")))
        i = self.import_rng
        if i.random() < 0.4 or "import" in self.options.force:
            actors.append(("import", lambda: self.import_savepoint("import")))
            due = i.randint(0, 40)
            actors.append(("run-next", lambda: self.next_run("run-next", due)))
        t = self.table_rng
        if t.random() < 0.35 or "repair" in self.options.force:
            actors.append(("repair", lambda: self.repair("repair")))
        syncs = t.randint(0, 2) or (1 if "sync" in self.options.force else 0)
        for k in range(syncs):
            actors.append((f"sync{k}", lambda n=f"sync{k}": self.late_sync(n)))
        if self._lagging is not None:
            cid = self._lagging
            actors.append(("retry", lambda: self.retried_finalize("retry", cid)))
        return actors

    def warm_up(self, epochs: int) -> None:
        """Completed epochs before the schedule (no faults, no interleaving). A lagging
        table is a fault of its own: sometimes the catalog was down through the last
        warm-up finalizes, so the schedule starts with the table behind its manifest."""
        self.store.enabled = False
        self.catalog_faults.enabled = False  # only the lag below, no outage window
        # Down from warm-up epoch `lagging` on: the table lags behind its first epochs,
        # or was never made (the catalog down since the pipeline started).
        lagging = epochs
        if self.options.faults and epochs and self.table_rng.random() < 0.5:
            lagging = self.table_rng.randint(0, epochs - 1)
        if self.table_stress:
            lagging = self.table_rng.randint(0, 1)
        for k in range(epochs):
            kind = CheckpointType.SAVEPOINT if k == 1 else CheckpointType.CHECKPOINT
            self.catalog_faults.down_now = k >= lagging
            self.dag_run(f"warm{k}", kind)
            self.clock.advance(10)
        if self.catalog_faults.down_now and self.allocated:
            self.faults["lagging-table"] += 1
            self._lagging = self.allocated[-1]
        self.catalog_faults.down_now = False
        self.catalog_faults.enabled = True
        self.store.enabled = True

    def answer_doubt(self, refused: RepairResult) -> None:
        """A repair refused over a restore in doubt (protocol/restore_intents.py): the
        operator knows whether the restore moved the head (here: what the control record
        said before it was damaged) and answers with `repair --head`."""
        moved = {(d["restore_generation"], d["checkpoint"]) for d in refused.in_doubt}
        head = self._before_damage[1] if self._before_damage in moved else refused.head
        if head is None:
            return
        result = ops_repair(self.driver.coordinator, head=head)
        self.notes.append(f"repair --head {head} (restore in doubt): {result.status}")

    def quiet_hours(self) -> None:
        """No faults (the catalog back), no interleaving: every deadline and grace period
        passes, a control record left damaged is repaired, the next cleanup settles and
        publishes (syncing the table), GC runs twice."""
        self.store.enabled = False
        self.store.before_call = None
        self.catalog_faults.enabled = False  # the catalog is back
        c = self.driver.coordinator
        grace = 10 * self.options.timeout + 3600
        self.clock.advance(grace)
        step = self.scheduler.step
        try:
            # what an operator does first: the repair stopped half-way
            if self.checker.control_damaged() and (repaired := ops_repair(c)).in_doubt:
                self.answer_doubt(repaired)
            c.settle()
            head = self.checker.control()
            if head is not None and head.head is not None:
                self.driver.notify_complete(head.head)  # publish, then the table's sync
            else:
                self.driver.sync_tables()
            ops_gc(self.driver.coordinator, self.driver.coordinator.store, history_limit=None)
            self.clock.advance(grace)
            ops_gc(self.driver.coordinator, self.driver.coordinator.store, history_limit=None)
        except BatchpointError as exc:
            self.violations.append(
                Violation(self.seed, step, "recovery-failed", f"{type(exc).__name__}: {exc}")
            )

    def run(self) -> ScheduleResult:
        uri = f"sqlite:///{self.catalog_path}"
        tables = (
            use_delta(self.catalog_faults)
            if self.table_format == "delta"
            else use_catalog(TABLE_CATALOG, uri, self.catalog_faults)
        )
        try:
            with tables:
                return self._run()
        finally:
            if self._catalog_folder is not None:
                shutil.rmtree(self._catalog_folder, ignore_errors=True)

    def _run(self) -> ScheduleResult:
        started = time.monotonic()
        self.store.before_call = self.scheduler.yield_point
        epochs = self.plan_rng.randint(0, 3)
        self.warm_up(self.table_rng.randint(3, 5) if self.table_stress else epochs)
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
        faults = Counter(str(i.fault) for i in self.store.injected)
        faults.update(self.catalog_faults.injected)
        faults.update(self.faults)
        if self.catalog_faults.outages:
            windows = f"{self.catalog_faults.label}-outage-windows"
            faults[windows] += len(self.catalog_faults.outages)
        if isinstance(self.catalog_faults, DeltaFaults) and self.catalog_faults.conflicts:
            faults["delta-conflict"] += self.catalog_faults.conflicts
        return ScheduleResult(
            self.seed,
            step,
            [name for name, _ in actors],
            _dedup(self.violations),
            sum(n for kind, n in faults.items() if kind not in NOT_INJECTED),
            time.monotonic() - started,
            self.notes,
            faults,
            self.table_format,
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
