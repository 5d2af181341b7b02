"""`./dev ui DIR` (`python -m demo.ui`, which it execs) stops everything it started when
its process is sent SIGTERM, as on Ctrl-C: SeaweedFS and `airflow standalone` with every
Airflow process below it. Before, SIGTERM ended only the Python process and left
`airflow standalone` (in a session of its own) running. A second `./dev ui` on the same
folder is refused while the first runs.

The kept demo is made here, not by running the demo: its record (demo.record) over a
SeaweedFS data folder with its bucket, in submit mode (no Spark Connect server to wait
for)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from demo.airflow_env import AirflowSetup
from demo.record import DemoRecord
from demo.run import deployment_env
from devstack.seaweed import SeaweedServer, free_ports

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.s3]

PROJECT = Path(__file__).resolve().parents[2]
TAG = "DEV_UI_TEST_TAG"
AIRFLOW_PARTS = ("scheduler", "api-server", "api_server", "dag-processor", "triggerer")


def kept_demo(folder: Path) -> DemoRecord:
    with SeaweedServer(folder / "s3") as s3:
        env = {**AirflowSetup(folder / "airflow").environment(), **deployment_env(s3, folder)}
        record = DemoRecord(
            s3_port=int(s3.endpoint_url.rsplit(":", 1)[1]),
            bucket=s3.bucket,
            access_key=s3.access_key,
            secret_key=s3.secret_key,
            env=env,
        )
    record.write(folder)
    return record


def tagged(tag: str) -> dict[int, str]:
    """The live processes that carry `tag` (inherited by everything the ui starts)."""
    needle = f"{TAG}={tag}".encode()
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                found[int(entry.name)] = command.decode(errors="replace")
        except OSError:
            continue  # ended while we looked, or not ours to read
    return found


def airflow_children(tag: str) -> list[str]:
    return [
        c for c in tagged(tag).values() if "airflow" in c and any(p in c for p in AIRFLOW_PARTS)
    ]


class Ui:
    def __init__(self, folder: Path, port: int, tag: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BATCHPOINT_"))}
        env[TAG] = tag
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "demo.ui", str(folder), "--port", str(port)],
            cwd=PROJECT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # the leader of its group, as a shell's job is
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code


@pytest.mark.timeout(1200)
def test_sigterm_stops_airflow_and_every_server(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    folder.mkdir()
    record = kept_demo(folder)
    tag = uuid.uuid4().hex
    ui = Ui(folder, free_ports(1)[0], tag)
    try:
        deadline = time.monotonic() + 900
        while not airflow_children(tag):
            assert ui.process.poll() is None, ui.output
            assert time.monotonic() < deadline, ui.output
            time.sleep(1)
        out = ui.output
        assert f"export BATCHPOINT_PIPELINE_REF={record.pipeline_ref}" in out, out
        password = (folder / "airflow" / "simple_auth_manager_passwords.json.generated").read_text()
        assert "admin" in password
        # the same folder twice: refused, the first one untouched
        second = subprocess.run(
            [sys.executable, "-m", "demo.ui", str(folder), "--port", str(free_ports(1)[0])],
            cwd=PROJECT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 1 and "another `./dev ui`" in second.stderr, second
        assert ui.process.poll() is None

        os.kill(ui.process.pid, signal.SIGTERM)  # the leader only, as `kill PID` does
        assert ui.wait(timeout=180) == 0, ui.output
    finally:
        if ui.process.poll() is None:
            os.killpg(ui.process.pid, signal.SIGKILL)
        left = tagged(tag)
        for pid in left:  # a failed run must not leave Airflow behind either
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert left == {}, ui.output
    assert "still running after the stop" not in ui.output
