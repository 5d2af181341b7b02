"""Running the `batchpoint` command in a test: on a fresh local root with fake epochs
(support/fake_epochs.py: tasks ack small stand-in files, no Spark), capturing the
exit code, stdout, stderr and the JSON body."""

from __future__ import annotations

import json
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
