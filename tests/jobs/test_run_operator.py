"""The spark-submit entry point, killed for real: the process dies after writing its
snapshot and before acknowledging; a second submission (the scheduler's retry)
completes the checkpoint, and the result is still exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from batchpoint.protocol.checkpoint import CheckpointStatus
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _submit(
    run: PaymentsRun, checkpoint_id: int, operator: str, **env: str
) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    environment = {
        **os.environ,
        "BATCHPOINT_ROOT": run.store_ref.uri,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        **env,
    }
    environment.pop("BATCHPOINT_FAULT_MODE", None)
    return subprocess.run(
        [
            str(bin_dir / "spark-submit"),
            "--master",
            "local[1]",
            str(ROOT / "spark_jobs" / "run_operator.py"),
            "--pipeline",
            "demo.payments:pipeline",
            "--checkpoint-id",
            str(checkpoint_id),
            "--operator",
            operator,
            "--master",
            "local[1]",
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_killed_spark_job_is_resubmitted(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    cid = run.runner.driver.trigger().checkpoint_id
    killed = _submit(run, cid, "dedup", BATCHPOINT_FAULT=f"dedup:after-snapshot:{cid}")
    assert killed.returncode == 137, killed.stderr[-2000:]
    coordinator = run.runner.driver.coordinator
    assert not any(t.operator == "dedup" for t in coordinator.acks(cid))

    retried = _submit(run, cid, "dedup")
    assert retried.returncode == 0, retried.stderr[-2000:]
    assert "acks dedup#0=SUCCESS" in retried.stdout

    run.runner.run_operators(cid)
    outcome, _ = run.runner.complete(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    run.assert_matches_reference()


def test_entry_point_names_a_bad_operator_without_a_traceback(
    make_run: Callable[..., PaymentsRun],
    after_first_epoch: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sys.path.insert(0, str(ROOT / "spark_jobs"))
    try:
        import run_operator
    finally:
        sys.path.pop(0)
    run = make_run(copy_from=after_first_epoch)
    monkeypatch.setenv("BATCHPOINT_ROOT", run.store_ref.uri)
    args = ["--pipeline", "demo.payments:pipeline", "--checkpoint-id", "1"]
    assert run_operator.main([*args, "--operator", "nope"]) == 2
    assert "no operator, source or sink 'nope'" in capsys.readouterr().err
    assert run_operator.main([*args, "--operator", "dedup", "--pipeline", "no.such:thing"]) == 2
    assert "cannot import" in capsys.readouterr().err
    # a checkpoint that completed already: nothing to do, success
    assert run_operator.main([*args, "--operator", "dedup"]) == 0
    assert "nothing to do" in capsys.readouterr().out


@pytest.mark.s3
def test_storage_that_does_not_answer_ends_the_job_to_be_retried(
    spark: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """S3 down (restarting) when the job starts: it says storage-unavailable, not
    operator-failed, so the Airflow task is retried instead of failed for good and the
    checkpoint is not left to expire (it declined nothing: it could not)."""
    from batchpoint.runtime.job_status import JobReport, JobStatus
    from devstack.seaweed import SeaweedServer

    sys.path.insert(0, str(ROOT / "spark_jobs"))
    try:
        import run_operator
    finally:
        sys.path.pop(0)
    server = SeaweedServer(tmp_path / "s3").start()
    server.stop()  # its endpoint is known, and nothing answers there
    monkeypatch.setenv("BATCHPOINT_ROOT", server.uri("down"))
    for name, value in {
        "BATCHPOINT_S3_ENDPOINT_URL": server.endpoint_url,
        "BATCHPOINT_S3_REGION": server.region,
        "BATCHPOINT_S3_ACCESS_KEY_ID": server.access_key,
        "BATCHPOINT_S3_SECRET_ACCESS_KEY": server.secret_key,
    }.items():
        monkeypatch.setenv(name, value)
    args = ["--pipeline", "demo.payments:pipeline", "--checkpoint-id", "1"]
    assert run_operator.main([*args, "--operator", "dedup"]) == 3
    out, err = capsys.readouterr()
    report = JobReport.last_in(out.splitlines())
    assert report is not None and report.status is JobStatus.STORAGE_UNAVAILABLE, out[-2000:]
    assert "did not answer" in report.message and "did not answer" in err
    assert report.status.retry_may_help
