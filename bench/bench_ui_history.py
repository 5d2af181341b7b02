"""How fast the Checkpoints tab renders the first page of a long history.

Seeds one pipeline with N checkpoint records on a real SeaweedFS (default 10,000: one in
ten aborted, the rest completed, each with six task acks, cloned from a checkpoint the
real protocol completed), then times, `--repeat` times each:

- page:     the plugin's HTML page of the newest 50, through the plugin's FastAPI app
            (batchpoint.airflow.ui; the Airflow user dependency answers a fixed user),
- reader:   the same page's records only (CheckpointStatsTracker.page),
- baseline: what the page read before paging: list every checkpoint folder, then read
            the newest 50 (timed once: it is slow).

It prints the medians, the storage requests each made, and the ratio page / baseline, as
a table and one JSON line. Target: the page under 0.5 s at 10,000 checkpoints.

    .venv/bin/python bench/bench_ui_history.py
    .venv/bin/python bench/bench_ui_history.py --checkpoints 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
)
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.ids import NextCheckpointId
from batchpoint.settings import Settings
from batchpoint.storage.base import ObjectStore
from devstack.seaweed import SeaweedServer

# The tests' helpers: fake epochs (acks without Spark) and a store that counts calls.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.counting_store import CountingStore

PIPELINE = "payments"
PAGE = 50


def template(settings: Settings) -> CheckpointOutcome:
    """One checkpoint completed by the real protocol: the payments pipeline's tasks ack
    stand-in files (tests' fake epochs, without Spark)."""
    from batchpoint.runtime.driver import PipelineDriver
    from demo.payments import pipeline
    from support.fake_epochs import epoch

    driver = PipelineDriver(pipeline, settings.store_ref, settings.checkpoint)
    cid = epoch(driver)
    outcome = driver.coordinator.get_outcome(cid)
    assert outcome is not None and outcome.completed is not None
    return outcome


def clone(outcome: CheckpointOutcome, cid: int, when: float) -> CheckpointOutcome:
    assert outcome.completed is not None
    pending = replace(outcome.pending, checkpoint_id=cid, trigger_time=when, deadline=when + 600)
    if cid % 10 == 0:
        return replace(
            outcome,
            status=CheckpointStatus.ABORTED,
            pending=pending,
            decided_at=when + 30,
            completed=None,
            reason=CheckpointFailureReason.EXPIRED,
            message="expired before all tasks acknowledged",
        )
    acks = tuple(replace(a, checkpoint_id=cid, acked_at=when + 5) for a in outcome.completed.acks)
    completed = replace(outcome.completed, pending=pending, acks=acks, completed_at=when + 6)
    return replace(outcome, pending=pending, completed=completed, decided_at=when + 6)


def seed(store: ObjectStore, coordinator: CheckpointCoordinator, n: int, first: int) -> None:
    """Outcome records for ids first..n (the real ones below stay) and the id counter."""
    base = coordinator.get_outcome(first - 1)
    assert base is not None
    start = time.time() - n * 60
    layout = coordinator.layout

    def write(cid: int) -> None:
        record = clone(base, cid, start + cid * 60)
        store.put(layout.outcome(cid), record.encode())

    with ThreadPoolExecutor(max_workers=32) as pool:
        for done, _ in enumerate(pool.map(write, range(first, n + 1)), first):
            if done % 2000 == 0:
                print(f"  seeded {done:,} of {n:,} checkpoints", flush=True)
    store.put(layout.id_counter, NextCheckpointId(n + 1).encode())


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    if args.checkpoints < 10 or args.repeat < 1:
        parser.error("--checkpoints must be at least 10 and --repeat at least 1")

    tmp = Path(tempfile.mkdtemp(prefix="bp-bench-ui-"))
    server = SeaweedServer(tmp / "weed").start()
    try:
        root = server.uri(f"bench-ui-{uuid.uuid4().hex[:8]}")
        settings = Settings(root, server.storage_options(), "local[1]")
        print(f"SeaweedFS at {server.endpoint_url}; seeding {args.checkpoints:,} checkpoints")
        store = seeded_store(settings, args.checkpoints)
        rows = measure(settings, CountingStore(store), args)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print_figures(rows, args)
    return 0


def seeded_store(settings: Settings, checkpoints: int) -> ObjectStore:
    """The store, holding one real checkpoint and clones of it up to `checkpoints`."""
    base = template(settings)
    store = settings.store_ref.open()
    coordinator = CheckpointCoordinator(store, PIPELINE, settings.checkpoint)
    started = time.perf_counter()
    seed(store, coordinator, checkpoints, base.pending.checkpoint_id + 1)
    print(f"  seeded in {time.perf_counter() - started:.1f}s")
    return store


def measure(
    settings: Settings, counting: CountingStore, args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """page, reader and baseline: each one's median seconds and storage requests, its
    result checked."""
    counted = CheckpointCoordinator(counting, PIPELINE, settings.checkpoint)  # type: ignore[arg-type]
    tracker = counted.stats

    def reader() -> list[int]:
        return [s.checkpoint_id for s in tracker.page(limit=PAGE).checkpoints]

    def baseline() -> list[int]:
        ids = counted.checkpoint_ids()[-PAGE:]
        return [tracker.checkpoint(cid)[0].checkpoint_id for cid in ids][::-1]

    rows: dict[str, dict[str, Any]] = {}
    with page_client(settings) as client:

        def page() -> str:
            answer = client.get(f"/{PIPELINE}")
            answer.raise_for_status()
            return answer.text

        for name, fn in (("page", page), ("reader", reader), ("baseline", baseline)):
            # The baseline lists every folder (on SeaweedFS confirming each prefix, about
            # 17 s at 10,000): once is enough.
            repeat = 1 if name == "baseline" else args.repeat
            if repeat > 1:
                fn()  # warm: connections, imports
            counting.calls.clear()
            seconds, result = median_time(fn, repeat)
            requests = {k: v // repeat for k, v in counting.calls.items()}
            rows[name] = {"seconds": seconds, "requests": requests}
            check(name, result, args.checkpoints)
    return rows


@contextmanager
def page_client(settings: Settings) -> Iterator[Any]:
    """A test client of the plugin's FastAPI app, the Airflow user a fixed one."""
    from fastapi.testclient import TestClient

    from batchpoint.airflow.ui import create_app

    app = create_app(lambda: settings, lambda: [PIPELINE], lambda user, name: True)
    from airflow.api_fastapi.core_api.security import get_user

    app.dependency_overrides[get_user] = lambda: "bench"
    client = TestClient(app)
    try:
        yield client
    finally:
        client.close()


def check(name: str, result: Any, checkpoints: int) -> None:
    """The reader's ids are the newest page's (all of them below a page: ids start at
    1), the page shows the newest checkpoint."""
    if name == "reader":
        expected = list(range(checkpoints, max(checkpoints - PAGE, 0), -1))
        assert result == expected, (result[:5], expected[:5])
    if name == "page":
        newest = f"checkpoints/{checkpoints}'>{checkpoints}</a>"
        assert newest in result, "newest checkpoint not on the page"


def print_figures(rows: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    """The table, then the same figures as one JSON line."""
    ratio = rows["page"]["seconds"] / rows["baseline"]["seconds"]
    print(
        f"\nfirst page of {PAGE} at {args.checkpoints:,} checkpoints "
        f"(median of {args.repeat}, baseline once):"
    )
    for name, row in rows.items():
        calls = ", ".join(f"{k} {v}" for k, v in sorted(row["requests"].items()))
        calls = calls or "those of reader (the app opens its own store)"
        print(f"  {name:<9} {row['seconds'] * 1000:8.1f} ms   requests: {calls}")
    print(f"  page / baseline = {ratio:.2f}; target: page under 0.5 s")
    print(
        json.dumps(
            {
                "bench": "ui_history",
                "checkpoints": args.checkpoints,
                "page_s": round(rows["page"]["seconds"], 4),
                "reader_s": round(rows["reader"]["seconds"], 4),
                "baseline_s": round(rows["baseline"]["seconds"], 4),
                "page_over_baseline": round(ratio, 3),
                "requests": {k: v["requests"] for k, v in rows.items() if k != "page"},
            }
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
