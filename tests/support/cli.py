"""Running the `batchpoint` command in a test: on a fresh local root with fake epochs
(support/fake_epochs.py: tasks ack small stand-in files, no Spark), capturing the
exit code, stdout, stderr and the JSON body."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from batchpoint.cli.main import main
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs

REF = "demo.payments:pipeline"
#: Every suite and check skipped by state: the gate runs without Spark.
EVERY_STATE = ("--skip-suite", "balances/balances", "--skip-suite", "dedup/seen")
ENV = ("BATCHPOINT_ROOT", "BATCHPOINT_PIPELINE_REF", "BATCHPOINT_QUALITY_GATE")


@dataclass
class CliRun:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)

    def refusal(self, argv: tuple[str, ...] | list[str]) -> str:
        """What a refused command said, where it says it: under --json one
        {"error": ...} object on stdout and nothing on stderr, else one `error:` line on
        stderr and nothing on stdout."""
        return said_error(argv, self.out, self.err)


def said_error(argv: tuple[str, ...] | list[str], out: str, err: str) -> str:
    if "--json" in argv:
        assert err == "", err
        return str(json.loads(out)["error"])
    assert out == "", out
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    return err


class Cli:
    """`cli("checkpoints", "list")`: runs main() and returns what it printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> CliRun:
        self.capsys.readouterr()  # drop what the set-up printed
        code = main(list(argv))
        captured = self.capsys.readouterr()
        return CliRun(code, captured.out, captured.err)


def fresh_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A local storage root as BATCHPOINT_ROOT, nothing else of batchpoint's set."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    uri = (tmp_path / "store").as_uri()
    monkeypatch.setenv("BATCHPOINT_ROOT", uri)
    return uri


def payments_driver(root: str, epochs: int = 0) -> PipelineDriver:
    """The payments pipeline on `root`, registered, with `epochs` completed fake epochs."""
    driver = PipelineDriver(build_pipeline(), StoreRef.of(root))
    driver.coordinator.register(driver.pipeline.spec())
    for _ in range(epochs):
        fake_epochs.epoch(driver)
    return driver


def payments_on_store(
    store: StoreRef, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> PipelineDriver:
    """Three completed checkpoints of payments on `store` (local or SeaweedFS), the CLI's
    environment pointing at them (the CLI reads the environment only)."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCHPOINT_ROOT", store.uri)
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    if store.uri.startswith("s3://"):
        for option, value in request.getfixturevalue("seaweed").storage_options().items():
            monkeypatch.setenv(f"BATCHPOINT_S3_{option.upper()}", value)
    driver = PipelineDriver(build_pipeline(), store)
    for _ in range(3):
        fake_epochs.epoch(driver)
    return driver


def listing(driver: PipelineDriver) -> dict[str, str]:
    """Every object under the root and its etag (equal before and after: nothing written)."""
    return fake_epochs.listing(driver.store)


#: rich's switches, which the environment of the tests' own run may set
TERMINAL_SWITCHES = ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "FORCE_COLOR", "NO_COLOR")


def run_on(
    argv: list[str], root: str, tty: bool, env: dict[str, str] | None = None, timeout: int = 120
) -> str:
    """The installed `batchpoint ARGV` with stdout and stderr on a new pseudo-terminal
    (`tty`) or a pipe; what it wrote (it must succeed)."""
    environment = {k: v for k, v in os.environ.items() if k not in TERMINAL_SWITCHES}
    environment.update(BATCHPOINT_ROOT=root, TERM="xterm-256color", COLUMNS="160", **(env or {}))
    command = [str(Path(sys.executable).parent / "batchpoint"), *argv]
    if not tty:
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr
    leader, follower = pty.openpty()
    with subprocess.Popen(command, env=environment, stdout=follower, stderr=follower) as child:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert child.wait(timeout=timeout) == 0, b"".join(chunks)
    os.close(leader)
    return b"".join(chunks).decode()
