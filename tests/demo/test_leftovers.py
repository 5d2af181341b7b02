"""The demo's own check that no process it started is left: every child, however deep
and even once re-parented to init, carries the run's marker; processes of other runs
do not count."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from demo.leftovers import MARKER, leftovers, mark_run, wait_for_none

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A grandchild that outlives its parent (re-parented to init), as a JVM's worker would.
ORPHAN = (
    "import subprocess, sys;"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
    "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL);"
    "print('started', flush=True)"
)


def test_a_process_the_run_started_is_found_until_it_is_gone(monkeypatch):
    monkeypatch.delenv(MARKER, raising=False)
    marker = mark_run()
    assert os.environ[MARKER] == marker
    assert leftovers(marker) == []
    done = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True)
    assert done.stdout.strip() == "started"  # its parent exited; the grandchild lives on
    (orphan,) = leftovers(marker)
    assert "time.sleep(60)" in orphan.command
    # another run's processes are not this run's
    assert leftovers(mark_run()) == []
    os.kill(orphan.pid, signal.SIGKILL)
    assert wait_for_none(marker, timeout=10) == []
