"""docker-compose.yaml's `seaweedfs-init`, the command the file gives it, run against a
real SeaweedFS: it makes the bucket, and a second start over kept volumes (the bucket is
there) succeeds too, or every Airflow service, waiting on it, never starts."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from devstack.compose import ComposeFile, read_dotenv
from devstack.seaweed import SeaweedServer

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yaml"


def _run_init(script: str, seaweed: SeaweedServer, bucket: str) -> subprocess.CompletedProcess[str]:
    # Pointed at this server's master (host:port.grpcPort, as weed addresses go) and at
    # a bucket of the test's own; the rest of the script is run as the file gives it.
    master = f"127.0.0.1:{seaweed.ports['master.port']}.{seaweed.ports['master.port.grpc']}"
    assert "master=seaweedfs:9333" in script and "bucket=batchpoint " in script
    script = script.replace("master=seaweedfs:9333", f"master={master}")
    script = script.replace("bucket=batchpoint ", f"bucket={bucket} ")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["/bin/sh", "-c", script], capture_output=True, text=True, env=env, timeout=120
    )


def test_seaweedfs_init_makes_the_bucket_and_starts_again_over_it(
    seaweed: SeaweedServer,
) -> None:
    trial = read_dotenv(COMPOSE.parent / "trial.env")  # the file requires its secrets
    service = ComposeFile.load(COMPOSE, variables=trial).services["seaweedfs-init"]
    assert service.entrypoint == ("/bin/sh", "-c") and service.command is not None
    bucket = f"init-{uuid.uuid4().hex[:8]}"
    client = seaweed.client()

    first = _run_init(service.command[0], seaweed, bucket)
    assert first.returncode == 0, first.stderr
    client.head_bucket(Bucket=bucket)  # made
    again = _run_init(service.command[0], seaweed, bucket)
    assert again.returncode == 0, again.stderr
    assert f"bucket {bucket} exists" in again.stdout
    client.head_bucket(Bucket=bucket)
