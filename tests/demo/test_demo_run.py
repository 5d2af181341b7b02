"""The README's main job, as a new user runs it: `python -m demo.run` (what
`./dev demo` execs) drives the payments pipeline (its balances an Iceberg table), and
`reports` reading them, through Airflow on SeaweedFS and real Spark jobs, thin clients of
the one Spark Connect server it starts (connect mode), restores both as a cascade, and
must end with the exactly-once check passing, each epoch's
wall time printed, and no process of its own left."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from demo.leftovers import MARKER
from demo.payments_v2 import TABLE_REF as V3_REF
from demo.record import DemoRecord

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.airflow, pytest.mark.s3]

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(3600)
def test_the_demo_runs_end_to_end_and_is_exactly_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BATCHPOINT_"))}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    keep = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "demo.run", "--epochs", "2", "--keep", str(keep)],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]

    # the killed task was retried by Airflow and its checkpoint completed
    assert re.search(r"operators\.balances\s+success.*\(tries: 2\)", out), out
    # both checkpoints of the bad deploy were quarantined, the head went back before them
    quarantined = re.search(r"quarantined by the quality gate: (\d+), (\d+)", out)
    assert quarantined, out
    restored = int(re.search(r"head moved back to checkpoint (\d+)", out).group(1))
    assert restored < min(int(i) for i in quarantined.groups())
    assert "3 subtasks" in out  # the restored pipeline rescaled within the cascade
    # the restore was a cascade: reports, which had read the bad balances, followed, and
    # matches pandas over what payments published, after the cascade and the fix's epoch
    assert re.search(r"reports followed: head back to checkpoint \d+", out), out
    assert len(re.findall(r"reports checkpoint \d+: .* identical to pandas", out)) == 2, out
    # the deploy that keeps state: its plan printed first, then its epoch
    plan = out.split("$ batchpoint plan --pipeline-ref demo.payments_v2", 1)[-1]
    assert re.search(r"operator\s+balances\s+accounts\s+renamed", plan), out
    assert re.search(r"state\s+balances/balances\s+balances\s+migrated\s+added-nullable", plan)
    assert re.search(r"checkpoint \d+: accounts#0.* restored the state of 'balances'", plan)
    # the history table, then the check
    assert re.search(r"^\s*id\s+type\s+status", out, re.M), out
    assert "Exactly once: no event lost, none counted twice." in out
    # the balances are an Iceberg table: one commit per checkpoint, the restore's rewind
    # to the restored checkpoint, and time travel by checkpoint equal to the reference
    commits = re.findall(r"snapshot \d+: checkpoint (\d+) \((\w+), restore generation (\d)\)", out)
    assert (str(restored), "rewind", "1") in commits, out
    assert [c for c, op, _ in commits if op == "publish"] == sorted(
        {c for c, op, _ in commits if op == "publish"}, key=int
    ), out  # one publish commit per checkpoint, in order
    assert "(the head's timeline): equal to the reference" in out
    # connect mode: one server for the run, each epoch's wall time, nothing left behind
    assert re.search(r"Spark Connect server at sc://127\.0\.0\.1:\d+", out), out
    walls = re.findall(r"epoch \d+: wall time (\d+\.\d)s", out)
    assert len(walls) == 2 + 2 + 1 + 1, out  # good epochs, the bad deploy, the fix, v3
    assert re.search(r"epoch wall times \(connect mode\): (\d+\.\ds(, )?){6}$", out, re.M)
    assert "no process left behind" in out
    # what ./dev ui needs to reopen it: the last deploy (a checkpoint from the UI would be
    # refused as incompatible with another), the server's port, not the run's marker
    assert (keep / "demo.json").is_file() and (keep / "airflow" / "airflow.db").is_file()
    record = DemoRecord.read(keep)
    assert record.pipeline_ref == f"{V3_REF},demo.reports:pipeline", record.env
    assert record.spark_port is not None and MARKER not in record.env
    # each task's output in the file the UI's log page reads, and in airflow-tasks.log
    logs = keep / "airflow" / "logs" / "dag_id=payments_checkpoint"
    balances = sorted(logs.glob("run_id=*/task_id=operators.balances/attempt=*.log"))
    assert len(balances) >= 6, balances  # an epoch each until v3 renames it, one retry
    assert all(f.stat().st_size > 0 for f in balances)
    first_lines = balances[0].read_text().splitlines()[:3]
    assert all(line in (keep / "airflow-tasks.log").read_text() for line in first_lines)
