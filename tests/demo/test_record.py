"""What a kept demo records for `./dev ui` and the CLI (demo.record), and the admin
password `./dev ui` shows on every start."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from batchpoint.errors import ConfigError
from demo.leftovers import MARKER
from demo.record import STATE_FILE, DemoRecord, deployment_settings
from demo.ui import admin_password, port_free

ENV = {
    "AIRFLOW_HOME": "/k/airflow",
    "BATCHPOINT_ROOT": "s3://demo/demo",
    "BATCHPOINT_PIPELINE_REF": "demo.payments_v2:table_pipeline",
    "BATCHPOINT_SPARK_MODE": "connect",
    "BATCHPOINT_SPARK_REMOTE": "sc://127.0.0.1:41234",
    "BATCHPOINT_S3_SECRET_ACCESS_KEY": "it's $ecret",
}


def test_the_deployment_settings_leave_out_the_run_marker_and_faults() -> None:
    environ = {**ENV, MARKER: "abc", "BATCHPOINT_FAULT": "x", "BATCHPOINT_FAULT_ONCE": "/f"}
    settings = deployment_settings(environ)
    assert MARKER not in settings and not any(k.startswith("BATCHPOINT_FAULT") for k in settings)
    assert settings["BATCHPOINT_PIPELINE_REF"] == "demo.payments_v2:table_pipeline"
    assert "AIRFLOW_HOME" not in settings


def test_a_record_reads_back_and_an_old_one_still_reads(tmp_path: Path) -> None:
    record = DemoRecord(9333, "demo", "key", "secret", dict(ENV), spark_port=41234)
    record.write(tmp_path)
    assert DemoRecord.read(tmp_path) == record
    # kept before this change: no spark_port, the run's marker in env
    old = {"s3_port": 9333, "bucket": "demo", "access_key": "k", "secret_key": "s"}
    (tmp_path / STATE_FILE).write_text(json.dumps({**old, "env": {**ENV, MARKER: "m"}}))
    read = DemoRecord.read(tmp_path)
    assert read.spark_port is None and read.recorded_spark_port() == 41234
    assert MARKER not in read.env  # else `./dev ui`'s processes would carry the demo's
    with pytest.raises(ConfigError, match=r"run `\./dev demo --keep"):
        DemoRecord.read(tmp_path / "missing")


def test_the_served_spark_server_replaces_the_recorded_one() -> None:
    record = DemoRecord(9333, "demo", "key", "secret", dict(ENV), spark_port=41234)
    served = record.serving_spark("sc://127.0.0.1:45000", 45000)
    assert served.spark_port == 45000
    assert served.env["BATCHPOINT_SPARK_REMOTE"] == "sc://127.0.0.1:45000"
    assert record.env["BATCHPOINT_SPARK_REMOTE"] == "sc://127.0.0.1:41234"


def test_the_export_block_sets_the_settings_in_a_shell(tmp_path: Path) -> None:
    record = DemoRecord(9333, "demo", "key", "secret", {**ENV, MARKER: "m"})
    block = "\n".join(record.cli_exports(Path("/the project"), Path("/v/bin")))
    assert "AIRFLOW_HOME" not in block and MARKER not in block
    shown = subprocess.run(
        ["bash", "-c", f"{block}\nenv"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": "/mine"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert "BATCHPOINT_S3_SECRET_ACCESS_KEY=it's $ecret" in shown
    assert "BATCHPOINT_SPARK_REMOTE=sc://127.0.0.1:41234" in shown
    assert "PYTHONPATH=/the project:/mine" in shown
    assert any(line.startswith("PATH=/v/bin:") for line in shown)


def test_the_admin_password_is_made_once_and_shown_on_every_start(tmp_path: Path) -> None:
    first = admin_password(tmp_path)
    assert first and admin_password(tmp_path) == first
    # one Airflow generated (another user beside admin) is kept as it is
    path = tmp_path / "simple_auth_manager_passwords.json.generated"
    path.write_text(json.dumps({"admin": "fromAirflow", "viewer": "v"}))
    assert admin_password(tmp_path) == "fromAirflow"
    assert json.loads(path.read_text()) == {"admin": "fromAirflow", "viewer": "v"}


def test_a_port_is_free_again_as_soon_as_its_server_stopped() -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    assert not port_free(port)
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server's end closes first: it waits in TIME_WAIT after the stop
    server.close()
    client.close()
    assert port_free(port)  # as for the server started next on it (SO_REUSEADDR)
