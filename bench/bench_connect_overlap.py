"""Do independent operators overlap on one Spark Connect server?

The payments pipeline's two sinks, `balances_table` and `alerts`, read the same input
and depend on nothing else of each other: Airflow runs their tasks side by side. Each
run here starts a local Spark Connect server, runs epochs of the pipeline on a file://
root (dedup and balances first, untimed; a first epoch untimed), and times the two
sinks as client processes (one per task, both in the pipeline's session and scheduler
pool, as operators run): on alternate epochs one after the other (each alone) and both
at once. Prints the overlapped wall time against the sum of the two alone (below 1.0:
they overlapped), on a server that schedules FIFO and on one that schedules FAIR (across
pipelines' pools: with one pipeline, only the server's mode differs), in one run; and
per round each sink's Spark jobs/stages as its ack recorded them (alone).

    python bench/bench_connect_overlap.py [--rounds 3] [--events 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_connect_warm import PaymentsStore, client_process, finished, server, split_of

UPSTREAM = ["dedup", "balances"]
PAIR = ("balances_table", "alerts")


def alone(remote: str, store: PaymentsStore) -> float:
    """One epoch with the two sinks one after the other: the sum of their work (each
    one's seconds and Spark jobs/stages said on the way)."""
    cid = store.trigger()
    finished(client_process(remote, cid, UPSTREAM, store.env))
    total = 0.0
    for name in PAIR:
        result = finished(client_process(remote, cid, [name], store.env))
        total += result["end"] - result["start"]
        print(f"  alone: {split_of(result)}", flush=True)
    store.finalize(cid)
    return total


def together(remote: str, store: PaymentsStore) -> float:
    """One epoch with the two sinks at once: first start to last end."""
    cid = store.trigger()
    finished(client_process(remote, cid, UPSTREAM, store.env))
    running = [client_process(remote, cid, [name], store.env) for name in PAIR]
    results = [finished(p) for p in running]
    store.finalize(cid)
    return max(r["end"] for r in results) - min(r["start"] for r in results)


def run_server(label: str, mode: str, rounds: int, events: int, tmp: Path) -> tuple[float, float]:
    store = PaymentsStore(tmp / f"store-{mode}", events)
    started = time.monotonic()
    with server(tmp / f"server-{mode}", True, {"spark.scheduler.mode": mode}) as spark:
        print(f"[{label}] server up in {time.monotonic() - started:.1f}s", flush=True)
        # Untimed: the pipeline's session (and its Python workers) starts here, so that
        # neither way of running pays for it in the rounds.
        together(spark.url, store)
        alone_times, together_times = [], []
        for round_ in range(rounds):
            alone_times.append(alone(spark.url, store))
            together_times.append(together(spark.url, store))
            print(
                f"[{label}] round {round_ + 1}: alone (sum) {alone_times[-1]:.2f}s, "
                f"together {together_times[-1]:.2f}s",
                flush=True,
            )
    return statistics.median(alone_times), statistics.median(together_times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alone/together epoch pairs")
    parser.add_argument("--events", type=int, default=20_000, help="events per epoch")
    args = parser.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-connect-overlap-") as tmp:
        for label, mode in (("FIFO", "FIFO"), ("FAIR, the pipeline's pool", "FAIR")):
            rows[label] = run_server(label, mode, args.rounds, args.events, Path(tmp))
    print("\nserver              sum alone  together  together/sum  (medians)")
    for label, (summed, both) in rows.items():
        print(f"{label:18s} {summed:9.2f}s {both:8.2f}s {both / summed:12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
