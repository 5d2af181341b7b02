"""Soak: many epochs of the payments demo through the real runtime (local Spark, SeaweedFS)
with random task kills and retries, GC from a second process while epochs run, and two
restores (one by id, one from an exported savepoint folder).

    .venv/bin/python bench/soak.py                 # 100 epochs
    .venv/bin/python bench/soak.py --epochs 20     # a shorter one

Prints storage objects and bytes under the pipeline's folder and the GC time at epochs
10/50/100 (or the run's own milestones), the orphan files after the final GC, and checks
the final sinks and state against the pandas reference. Exits 1 if the sinks differ or an
orphan is left. The clock is simulated (an hour per epoch) so deadlines and GC's grace
period pass as they would in production; every byte goes to a real SeaweedFS.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)

ROOT = Path(__file__).resolve().parents[1]
# The model and its checker are the test suite's own (tests/support), shared as `support`.
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

import pandas as pd  # noqa: E402

from batchpoint.ops.local_epoch import LocalEpochRunner  # noqa: E402
from batchpoint.ops.maintenance import gc as ops_gc  # noqa: E402
from batchpoint.protocol.checkpoint import CheckpointType  # noqa: E402
from batchpoint.protocol.config import CheckpointConfig  # noqa: E402
from batchpoint.protocol.savepoints import (  # noqa: E402
    SavepointLocation,
    default_savepoint_prefix,
)
from batchpoint.protocol.sinks import read_sink_table  # noqa: E402
from batchpoint.runtime.faults import POINTS, InjectedFaults, InjectedKill  # noqa: E402
from batchpoint.runtime.restore import RestorePlanner  # noqa: E402
from batchpoint.storage import StoreRef  # noqa: E402
from demo.payments import SOURCE_ROOT, build_pipeline  # noqa: E402
from demo.payments_data import write_epoch_files  # noqa: E402
from demo.payments_reference import compute_reference  # noqa: E402
from support.checker import Checker  # noqa: E402

DATA = {"accounts": 40, "events_per_epoch": 200}
HOUR = 3600.0
KILL_POINTS = [p for p in POINTS if p != "spark-task"]


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def gc_process(uri: str, options: dict[str, str], now: float, out: Any) -> None:
    """`batchpoint gc` from another process: its own store client, the same clock time."""
    from batchpoint.runtime.driver import PipelineDriver

    driver = PipelineDriver(
        build_pipeline(), StoreRef.of(uri, options), CheckpointConfig(), lambda: now
    )
    started = time.perf_counter()
    report = ops_gc(driver.coordinator, driver.coordinator.store, history_limit=20)
    out.send({"seconds": time.perf_counter() - started, "deleted": len(report.deleted_files)})


def storage(store: Any, prefix: str) -> tuple[int, int, dict[str, int]]:
    """Objects and bytes under `prefix`, and the objects by kind: a checkpoint's data
    files, its records (outcome, acks), the sinks' files, the pipeline's own records."""
    objects = list(store.list(prefix))
    kinds: dict[str, int] = {}
    for o in objects:
        if "/checkpoints/" in o.key:
            kind = "checkpoint data" if "/data/" in o.key else "checkpoint records"
        elif "/sinks/" in o.key:
            kind = "sinks"
        else:
            kind = "pipeline records"
        kinds[kind] = kinds.get(kind, 0) + 1
    kinds["checkpoint folders"] = len(
        {o.key.split("/checkpoints/")[1].split("/")[0] for o in objects if "/checkpoints/" in o.key}
    )
    return len(objects), sum(o.size for o in objects), kinds


@dataclass(frozen=True)
class Plan:
    """When the run does what: milestone epochs, the savepoint and the two restores."""

    epochs: int
    milestones: list[int]
    savepoint_at: int
    restore_by_id_at: int
    restore_folder_at: int

    @staticmethod
    def of(epochs: int) -> Plan:
        milestones = [10, 50, 100] if epochs >= 100 else sorted({10, epochs // 2, epochs})
        return Plan(epochs, milestones, int(epochs * 0.3), int(epochs * 0.4), int(epochs * 0.75))


@dataclass
class Soak:
    """The run in progress: its runtime, its simulated clock, and what it saw."""

    runner: LocalEpochRunner
    store: Any
    uri: str
    options: dict[str, str]
    clock: Clock
    rng: random.Random
    kill_rate: float
    started: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    gc_seconds: list[float] = field(default_factory=list)
    savepoint_prefix: str = ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill-rate", type=float, default=0.3)
    args = parser.parse_args(argv)
    if args.epochs < 10:
        parser.error("--epochs must be >= 10 (the restores happen at 40% and 75%)")
    plan = Plan.of(args.epochs)

    from batchpoint.spark.session import spark_session
    from devstack.seaweed import SeaweedServer

    os.environ["BATCHPOINT_FAULT_MODE"] = "raise"
    tmp = Path(tempfile.mkdtemp(prefix="bp-soak-"))
    started = time.monotonic()
    try:
        with SeaweedServer(tmp / "weed") as server:
            options = server.storage_options()
            uri = server.uri(f"soak-{uuid.uuid4().hex[:8]}")
            ref = StoreRef.of(uri, options)
            store = ref.open()
            spark = spark_session("batchpoint-soak", "local[2,2]")
            clock = Clock()
            config = CheckpointConfig(num_retained=3, timeout=HOUR / 2)
            runner = LocalEpochRunner(
                build_pipeline(), ref, spark, config, clock=clock, hooks=InjectedFaults()
            )
            rng = random.Random(args.seed)
            soak = Soak(runner, store, uri, options, clock, rng, args.kill_rate, started)
            for epoch in range(1, args.epochs + 1):
                run_epoch(soak, plan, epoch)
            orphans, final_gc = final_gc_and_orphans(soak)
            ok_sinks, detail = check_reference(runner, store)
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_figures(soak, args.epochs, orphans, final_gc, ok_sinks, detail)
    return 0 if ok_sinks and not orphans else 1


def run_epoch(soak: Soak, plan: Plan, epoch: int) -> None:
    """One epoch an hour after the last, with GC from a second process overlapping it,
    perhaps a kill and always a retry; then the savepoint, restore or milestone that
    falls on it."""
    driver = soak.runner.driver
    write_epoch_files(soak.store, SOURCE_ROOT, epoch - 1, **DATA)
    soak.clock.now += HOUR
    # GC from a second process, overlapping this epoch.
    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    gc = ctx.Process(target=gc_process, args=(soak.uri, soak.options, soak.clock.now, send))
    gc.start()
    kind_savepoint = epoch == plan.savepoint_at
    pending = driver.trigger(
        CheckpointType.SAVEPOINT if kind_savepoint else CheckpointType.CHECKPOINT
    )
    cid = pending.checkpoint_id
    if soak.rng.random() < soak.kill_rate:
        kill_one(soak, epoch, cid)
    soak.runner.run_operators(cid, attempt="retry")  # what an Airflow retry does
    outcome, _ = soak.runner.complete(cid)
    if outcome is None or outcome.completed is None:
        soak.events.append(f"epoch {epoch}: checkpoint {cid} did not complete")
    gc.join(600)
    result = receive.recv() if receive.poll(1) else {"seconds": float("nan")}
    soak.gc_seconds.append(result["seconds"])
    status = outcome.status.value if outcome is not None else "pending"
    print(
        f"epoch {epoch}: checkpoint {cid} {status}, GC {result['seconds']:.2f}s "
        f"({time.monotonic() - soak.started:.0f}s so far)",
        flush=True,
    )
    if kind_savepoint and outcome is not None and outcome.completed is not None:
        soak.savepoint_prefix = default_savepoint_prefix("payments", cid, soak.clock.now)
        driver.coordinator.savepoints.export(
            cid, SavepointLocation(soak.store, soak.savepoint_prefix)
        )
        soak.events.append(f"epoch {epoch}: savepoint {cid} exported to {soak.savepoint_prefix}")
    restore(soak, plan, epoch)
    if epoch in plan.milestones:
        milestone(soak, epoch)


def kill_one(soak: Soak, epoch: int, cid: int) -> None:
    """A first attempt of the operators with one task killed at a random point."""
    operator = soak.rng.choice(soak.runner.task_order())
    point = soak.rng.choice(KILL_POINTS)
    os.environ["BATCHPOINT_FAULT"] = f"{operator}:{point}:{cid}"
    try:
        soak.runner.run_operators(cid, attempt="first")
    except InjectedKill:
        soak.events.append(f"epoch {epoch}: killed {operator} at {point}, retried")
    finally:
        del os.environ["BATCHPOINT_FAULT"]


def restore(soak: Soak, plan: Plan, epoch: int) -> None:
    """At 40%: to the last retained checkpoint but one, by id; at 75%: from the
    exported savepoint's folder."""
    driver = soak.runner.driver
    if epoch == plan.restore_by_id_at:
        retained = Checker(soak.store, 0, 1, pipeline="payments").control()
        assert retained is not None
        target = sorted(retained.retained)[-2]
        planner = RestorePlanner(driver)
        planner.apply(planner.plan(target))
        soak.events.append(f"epoch {epoch}: restored to checkpoint {target} by id")
    if epoch == plan.restore_folder_at and soak.savepoint_prefix:
        planner = RestorePlanner(driver)
        done = planner.apply(planner.plan(soak.savepoint_prefix))
        soak.events.append(
            f"epoch {epoch}: restored from folder {soak.savepoint_prefix} "
            f"(imported as {done.checkpoint_id})"
        )


def milestone(soak: Soak, epoch: int) -> None:
    objects, size, kinds = storage(soak.store, "pipelines/")
    soak.rows.append(
        {
            "epoch": epoch,
            "objects": objects,
            "bytes": size,
            "gc_seconds": round(soak.gc_seconds[-1], 3),
            "by_kind": kinds,
            "load": round(os.getloadavg()[0], 1),
        }
    )
    print(json.dumps({"milestone": soak.rows[-1]}), flush=True)


def final_gc_and_orphans(soak: Soak) -> tuple[list[str], float]:
    """The final GC, past every grace period: the orphans it leaves, and its seconds."""
    coordinator = soak.runner.driver.coordinator
    soak.clock.now += 10 * HOUR
    coordinator.settle()
    ops_gc(coordinator, coordinator.store)
    soak.clock.now += 10 * HOUR
    final = time.perf_counter()
    ops_gc(coordinator, coordinator.store)
    final_gc = time.perf_counter() - final
    return Checker(soak.store, 0, 1, pipeline="payments").orphans(), final_gc


def print_figures(
    soak: Soak, epochs: int, orphans: list[str], final_gc: float, ok_sinks: bool, detail: str
) -> None:
    """The events, the milestones' table, the final checks, and all as one JSON line."""
    print()
    for line in soak.events:
        print(line)
    print()
    print(f"{'epoch':>6}{'objects':>9}{'bytes':>12}{'GC s':>8}")
    for r in soak.rows:
        print(f"{r['epoch']:>6}{r['objects']:>9}{r['bytes']:>12}{r['gc_seconds']:>8.3f}")
    print(
        f"orphan files after the final GC: {len(orphans)}"
        + (f" e.g. {orphans[0]}" if orphans else "")
    )
    print(
        f"final GC: {final_gc:.3f}s; sinks vs pandas reference: {'equal' if ok_sinks else detail}"
    )
    print(
        json.dumps(
            {
                "bench": "soak",
                "epochs": epochs,
                "milestones": soak.rows,
                "orphans": len(orphans),
                "final_gc_seconds": round(final_gc, 3),
                "sinks_match_reference": ok_sinks,
                "kills": sum("killed" in e for e in soak.events),
                "seconds": round(time.monotonic() - soak.started, 1),
            }
        )
    )


def check_reference(runner: LocalEpochRunner, store: Any) -> tuple[bool, str]:
    """Published sinks equal the pandas reference over exactly the head's input."""
    coordinator = runner.driver.coordinator
    control = Checker(store, 0, 1, pipeline="payments").control()
    assert control is not None and control.head is not None
    completed = coordinator.completed.get(control.head)
    expected = compute_reference(store, SOURCE_ROOT, upto=completed.pending.barrier["events"])
    try:
        for sink, frame in (("balances_table", expected.balances), ("alerts", expected.alerts)):
            got = read_sink_table(store, "payments", sink).to_pandas()
            got = got.sort_values("account_id", ignore_index=True)[list(frame.columns)]
            pd.testing.assert_frame_equal(got, frame, check_dtype=False)
    except AssertionError as exc:
        return False, str(exc).splitlines()[0]
    return True, ""


if __name__ == "__main__":
    sys.exit(main())
