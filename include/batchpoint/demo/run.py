"""The main job: the payments pipeline end to end on a real local S3 (SeaweedFS).

    ./dev demo [--epochs 4] [--keep DIR]

It starts SeaweedFS, generates payment events epoch by epoch, runs checkpoints, takes a
savepoint, kills a task in one epoch and shows the pipeline recover, prints the
checkpoint history, and ends by checking the published sinks against a plain pandas
computation over all the input: exactly once, or it exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from batchpoint.cli.main import HISTORY_HEADERS, history_row
from batchpoint.cli.tables import render
from batchpoint.demo.payments import SOURCE_ROOT, build_pipeline
from batchpoint.demo.payments_data import write_epoch_files
from batchpoint.demo.payments_reference import compute_reference
from batchpoint.devstack.seaweed import SeaweedServer
from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.protocol.stats import CheckpointStatsTracker
from batchpoint.runtime.faults import MODE_ENV, InjectedKill
from batchpoint.runtime.local import LocalEpochRunner
from batchpoint.storage import StoreRef

DATA = {"accounts": 200, "events_per_epoch": 2_000}


def step(message: str) -> None:
    print(f"\n\033[1m== {message}\033[0m", flush=True)


def timed(label: str, fn: Callable[[], object]) -> object:
    started = time.monotonic()
    result = fn()
    print(f"   {label} in {time.monotonic() - started:.1f}s", flush=True)
    return result


def run_demo(workdir: Path, epochs: int) -> int:
    step(f"starting SeaweedFS (S3) in {workdir / 's3'}")
    with SeaweedServer(workdir / "s3") as s3:
        print(f"   S3 endpoint {s3.endpoint_url}, bucket '{s3.bucket}'")
        ref = StoreRef.of(f"s3://{s3.bucket}/demo", s3.storage_options())
        store = ref.open()

        step("starting Spark (local[2])")
        from batchpoint.spark.session import spark_session

        spark = timed("Spark up", lambda: spark_session("batchpoint-demo", "local[2,2]"))
        runner = LocalEpochRunner(
            build_pipeline(parallelism=2), ref, spark, log=lambda line: print(f"   {line}")
        )

        for epoch in range(epochs):
            step(f"epoch {epoch}: new payment files arrive, checkpoint runs")
            write_epoch_files(store, SOURCE_ROOT, epoch, **DATA)
            if epoch == 1:
                run_epoch_with_killed_task(runner)
            else:
                result = timed("checkpoint", runner.run_epoch)
                report_outcome(result.outcome)  # type: ignore[attr-defined]
            if epoch == epochs - 2:
                step("savepoint (retained, never subsumed)")
                savepoint = timed("savepoint", lambda: runner.run_epoch(CheckpointType.SAVEPOINT))
                report_outcome(savepoint.outcome)  # type: ignore[attr-defined]

        step("checkpoint history")
        coordinator = runner.driver.coordinator
        history = CheckpointStatsTracker(coordinator).history()
        print(render(HISTORY_HEADERS, [history_row(s) for s in history]))
        gc = runner.driver.gc()
        print(f"   gc: deleted {len(gc.deleted_files)} unreferenced file(s)")

        step("exactly-once check against a pandas computation over all input")
        return check_exactly_once(runner)


def run_epoch_with_killed_task(runner: LocalEpochRunner) -> None:
    pending = runner.driver.trigger()
    cid = pending.checkpoint_id
    print(f"   checkpoint {cid}: killing task 'balances' after its snapshot, before its ack")
    os.environ["BATCHPOINT_FAULT"] = f"balances:after-snapshot:{cid}"
    os.environ[MODE_ENV] = "raise"
    try:
        runner.run_operators(cid, attempt=f"c{cid}-try1")
    except InjectedKill as exc:
        print(f"   {exc}")
    finally:
        del os.environ["BATCHPOINT_FAULT"]
    status = runner.driver.coordinator.progress(cid)
    print(f"   checkpoint {cid} is {status.status}: waiting for {', '.join(status.missing)}")
    print("   retrying the failed task (what the scheduler does)")
    timed("recovery", lambda: runner.run_operators(cid, attempt=f"c{cid}-try2"))
    outcome, published = runner.complete(cid)
    report_outcome(outcome)
    print(f"   published {', '.join(published)}")


def report_outcome(outcome: object) -> None:
    if outcome is None:
        print("   checkpoint still pending")
        return
    status = outcome.status  # type: ignore[attr-defined]
    cid = outcome.checkpoint_id  # type: ignore[attr-defined]
    detail = "" if status is CheckpointStatus.COMPLETED else f": {outcome.message}"  # type: ignore[attr-defined]
    print(f"   checkpoint {cid}: {status.value}{detail}")


def check_exactly_once(runner: LocalEpochRunner) -> int:
    coordinator = runner.driver.coordinator
    store = coordinator.store
    head = coordinator.completed.get(coordinator.head.get().checkpoint_id)  # type: ignore[arg-type]
    expected = compute_reference(store, SOURCE_ROOT, upto=head.pending.barrier["events"])
    got = read_sink_table(store, "payments", "balances_table").to_pandas()
    got = got.sort_values("account_id", ignore_index=True)[list(expected.balances.columns)]
    alerts = read_sink_table(store, "payments", "alerts").to_pandas()
    alerts = alerts.sort_values("account_id", ignore_index=True)[list(expected.alerts.columns)]
    print(
        f"   input: {expected.files} files, {expected.input_records} records, "
        f"{expected.duplicate_records} re-delivered duplicates"
    )
    try:
        pd.testing.assert_frame_equal(got, expected.balances, check_dtype=False)
        pd.testing.assert_frame_equal(alerts, expected.alerts, check_dtype=False)
    except AssertionError as exc:
        print(f"   MISMATCH: {exc}")
        return 1
    print(
        f"   balances_table: {len(got)} accounts, alerts: {len(alerts)} accounts: "
        "identical to the reference. Exactly once: no event lost, none counted twice."
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--keep", type=Path, help="keep all data in this directory")
    args = parser.parse_args(argv)
    if args.epochs < 3:
        parser.error("--epochs must be at least 3 (one shows the recovery, one a savepoint)")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="batchpoint-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return run_demo(workdir, args.epochs)
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
