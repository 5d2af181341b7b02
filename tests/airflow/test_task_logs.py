"""A checkpoint run's logs tell its story: the trigger names the barrier and the tasks
it expects, the ack sensor how many acks are in, finalize the outcome and what the new
checkpoint subsumed."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


def test_a_runs_log_tells_its_story(bp, write_epoch, capsys):
    bp.set(num_retained=1)
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"
    capsys.readouterr()
    more = write_epoch(1)
    assert bp.run("payments_checkpoint")[0].state == "success"
    log = capsys.readouterr().out

    pending = bp.driver().coordinator.get_checkpoint(2)
    barrier = re.search(r"barrier of source 'events': (\d+) new file\(s\) in (\d+) partition", log)
    assert barrier, log[-3000:]
    assert int(barrier.group(1)) == len(more)  # only the files written since checkpoint 1
    assert int(barrier.group(2)) == len(pending.barrier["events"])
    assert f"expected tasks: {', '.join(map(str, pending.expected_tasks))}" in log
    n = len(pending.expected_tasks)
    assert f"checkpoint 2: acks {n} of {n}" in log
    assert "checkpoint 2 COMPLETED" in log
    assert "retained now: 2; no longer retained (subsumed, queued for GC): 1" in log
