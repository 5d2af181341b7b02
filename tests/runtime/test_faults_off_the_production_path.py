"""Fault injection is off the production path: the runner, its phases and the in-process
epoch runner do not import runtime.faults, a job entry point imports it only when
BATCHPOINT_FAULT is set, and the faults' hooks are the only thing that calls it.
(tests/runtime/test_exactly_once.py shows a runner without hooks ignoring the variable.)"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchpoint.runtime.faults import POINTS, InjectedFaults, InjectedKill
from batchpoint.runtime.task_hooks import AttemptPoint
from support.python_source import parse_file

INCLUDE = Path(__file__).resolve().parents[2] / "include"
FAULTS = "batchpoint.runtime.faults"

#: The production path of an operator attempt.
PRODUCTION = [
    "batchpoint/runtime/runner.py",
    *sorted(
        p.relative_to(INCLUDE).as_posix()
        for p in (INCLUDE / "batchpoint/runtime").glob("task_*.py")
    ),
    "batchpoint/ops/epoch.py",
    "batchpoint/spark/keyed_io.py",
    "batchpoint/spark/state_writer.py",
]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def test_no_module_of_an_attempt_imports_the_faults() -> None:
    assert len(PRODUCTION) > 8, PRODUCTION  # the phases were found
    offenders = [p for p in PRODUCTION if FAULTS in _imports(INCLUDE / p)]
    assert offenders == []


def test_a_job_without_the_fault_variable_never_loads_the_faults() -> None:
    code = (
        "import sys\n"
        "import batchpoint.jobs.run_operator as job\n"
        "import batchpoint.ops.epoch\n"
        "assert job._injected_faults() is None\n"
        f"print({FAULTS!r} in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHPOINT_FAULT")}
    without = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert without.stdout.strip() == "False", without.stderr
    told = {**env, "BATCHPOINT_FAULT": "dedup:after-snapshot"}
    code = code.replace("is None", "is not None")
    with_fault = subprocess.run(
        [sys.executable, "-c", code], env=told, capture_output=True, text=True
    )
    assert with_fault.stdout.strip() == "True", with_fault.stderr


def test_the_hooks_points_are_the_faults_points(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [p.value for p in AttemptPoint] == list(POINTS[:3])
    monkeypatch.setenv("BATCHPOINT_FAULT_MODE", "raise")
    monkeypatch.setenv("BATCHPOINT_FAULT", "dedup:after-ack:1")
    hooks = InjectedFaults()
    for point in (AttemptPoint.BEFORE_SNAPSHOT, AttemptPoint.AFTER_SNAPSHOT):
        hooks.at(point, "dedup", 1)
    hooks.at(AttemptPoint.AFTER_ACK, "dedup", 2)
    with pytest.raises(InjectedKill, match="dedup dies at after-ack of 1"):
        hooks.at(AttemptPoint.AFTER_ACK, "dedup", 1)
