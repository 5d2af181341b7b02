"""Is a freshly started Spark Connect server warm? The first epoch against the warm ones.

Starts two local Spark Connect servers (devstack.spark_connect) in one run,
one cold (no warm-up job, pyspark's own worker daemon) and one as devstack starts it
(the warm-up job, the preloading worker daemon), and on each, in turn, runs epochs of the payments
pipeline on a file:// root: per epoch one client process runs the four operator tasks in
order, as the demo's in-process tasks do, in the pipeline's session and pool. Prints
each epoch's time (client work: sessions, probe, the operators; not the Python imports,
the same either way) and each operator's Spark jobs/stages as its acks recorded them
(both servers run their UI, on a free port, for the count), then per server the first
epoch against the median warm one (epochs 2 and later) and the server's start-up time
(warm-up included).

    python bench/bench_connect_warm.py [--epochs 4] [--events 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)

OPERATORS = ("dedup", "balances", "balances_table", "alerts")
PIPELINE = "demo.payments:pipeline"


def client(remote: str, checkpoint_id: int, operators: list[str]) -> int:
    """Run `operators` of one checkpoint in this process, in order; print one JSON line:
    when the work started and ended (wall clock), each operator's seconds and the Spark
    jobs and stages its ack recorded."""
    from batchpoint.jobs.run_operator import operator_session
    from batchpoint.runtime.loader import load_pipeline
    from batchpoint.runtime.runner import OperatorRunner
    from batchpoint.settings import Settings

    started = time.time()
    pipeline = load_pipeline(PIPELINE)
    settings = Settings.from_env()
    seconds, work = {}, {}
    for name in operators:
        t0 = time.monotonic()
        spark = operator_session(pipeline.name, name, settings, remote)
        runner = OperatorRunner(pipeline, settings.store_ref, spark, log=lambda line: None)
        report = runner.run(checkpoint_id, name)
        seconds[name] = time.monotonic() - t0
        work[name] = [report.spark_jobs, report.spark_stages]
    result = {"start": started, "end": time.time(), "seconds": seconds, "work": work}
    print(json.dumps(result), flush=True)
    return 0


def client_process(remote: str, cid: int, operators: list[str], env: dict[str, str]) -> Any:
    return subprocess.Popen(
        [sys.executable, __file__, "--client", remote, str(cid), ",".join(operators)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: Any) -> dict[str, Any]:
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"a client failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


class PaymentsStore:
    """The payments pipeline on a file:// root: epoch files, triggers, finalizes."""

    def __init__(self, root: Path, events: int) -> None:
        from batchpoint.runtime.driver import PipelineDriver
        from batchpoint.storage import StoreRef
        from demo.payments import build_pipeline

        self.ref = StoreRef.of(root.as_uri())
        self.driver = PipelineDriver(build_pipeline(parallelism=2), self.ref)
        self.events = events
        self.epoch = 0
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "MASTER")
        } | {"BATCHPOINT_ROOT": self.ref.uri}

    def trigger(self) -> int:
        from demo.payments import SOURCE_ROOT
        from demo.payments_data import write_epoch_files

        accounts = max(40, self.events // 10)
        write_epoch_files(
            self.driver.store, SOURCE_ROOT, self.epoch, accounts=accounts,
            events_per_epoch=self.events,
        )  # fmt: skip
        self.epoch += 1
        return self.driver.trigger().checkpoint_id

    def finalize(self, cid: int) -> None:
        from batchpoint.ops.epoch import finalize

        finalize(self.driver, cid)


def server(workdir: Path, warm: bool, conf: dict[str, str] | None = None) -> Any:
    """A devstack server, cold or warm (as the demo starts it: its warm-up also opens
    the payments operators' sessions), with its UI on a free port: the REST API an
    operator over Connect counts its Spark jobs by."""
    from devstack.seaweed import free_ports
    from devstack.spark_connect import SparkConnectServer

    ui = {"spark.ui.enabled": "true", "spark.ui.port": str(free_ports(1, "127.0.0.1")[0])}
    settings = ui | dict(conf or {})
    if not warm:
        settings.setdefault("spark.python.daemon.module", "pyspark.daemon")
    pipelines = [PIPELINE] if warm else []
    return SparkConnectServer(workdir, conf=settings, warm_up=warm, pipelines=pipelines)


def split_of(result: dict[str, Any]) -> str:
    """Each operator's seconds and Spark jobs/stages (`-`: not counted)."""
    work = result.get("work", {})
    return ", ".join(
        f"{name} {s:.2f}s {'/'.join('-' if n is None else str(n) for n in work.get(name, []))}"
        for name, s in result["seconds"].items()
    )


def run_servers(epochs: int, events: int, tmp: Path) -> dict[str, dict[str, float]]:
    """Both servers up at once, their epochs in turn (cold, warm, cold, ...), so that the
    load of a shared machine drifts alike over both; per server the first epoch, the
    median warm one and their ratio."""
    variants = {"without warm-up": False, "with warm-up": True}
    rows: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        runs = {}
        for n, (label, warm) in enumerate(variants.items()):
            started = time.monotonic()
            spark = stack.enter_context(server(tmp / f"server-{n}", warm))
            up = time.monotonic() - started
            print(f"[{label}] server up in {up:.1f}s (warm-up {spark.warm_up_seconds or 0:.1f}s)")
            runs[label] = (spark, PaymentsStore(tmp / f"store-{n}", events), [])
            rows[label] = {"up": up}
        for epoch in range(epochs):
            for label, (spark, store, times) in runs.items():
                cid = store.trigger()
                result = finished(client_process(spark.url, cid, list(OPERATORS), store.env))
                store.finalize(cid)
                times.append(result["end"] - result["start"])
                split = split_of(result)
                print(f"[{label}] epoch {epoch + 1}: {times[-1]:.2f}s ({split})", flush=True)
    for label, (_, _, times) in runs.items():
        warm_median = statistics.median(times[1:])
        rows[label].update(first=times[0], warm=warm_median, ratio=times[0] / warm_median)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--events", type=int, default=2000, help="events per epoch")
    parser.add_argument("--client", nargs=3, metavar=("REMOTE", "CHECKPOINT", "OPERATORS"))
    args = parser.parse_args(argv)
    if args.client:
        return client(args.client[0], int(args.client[1]), args.client[2].split(","))
    if args.epochs < 2:
        parser.error("--epochs: at least 2 (a first epoch and a warm one)")
    with tempfile.TemporaryDirectory(prefix="bench-connect-warm-") as tmp:
        rows = run_servers(args.epochs, args.events, Path(tmp))
    print("\nserver           start-up  first epoch  warm epoch (median)  first/warm")
    for label, row in rows.items():
        print(
            f"{label:16s} {row['up']:7.1f}s {row['first']:11.2f}s {row['warm']:19.2f}s "
            f"{row['ratio']:10.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
