"""The compatibility job: the payments pipeline's epochs, a restore and the DAGs' parsing
on one Spark and one Airflow version, each pair in an environment of its own.

    .venv/bin/python bench/compat.py                      # lowest and highest
    .venv/bin/python bench/compat.py --pair lowest        # Spark 4.0, Airflow 3.0
    .venv/bin/python bench/compat.py --spark 4.1.4 --airflow 3.1.8

For each pair it builds the wheel (once a run), makes the environment
ENVS/spark-S-airflow-A with uv, or reuses it (never the project's .venv): the wheel with
its `spark`, `airflow` and `quality` extras, `pyspark==S` and `apache-airflow==A`, the
rest as uv's resolver picks it for them (uv's cache first). Then it runs
bench/compat_run.py with that environment's interpreter (SeaweedFS and a Spark Connect
server of its own; the phases are listed there), killed after --timeout seconds, and
prints the matrix: each pair passed or failed, its phases' seconds and the first
failure. Exit 0 when every pair passed. `--results FILE` writes the matrix as JSON.

Environments take 0.6 to 1.1 GB each (pyspark's jars); delete ENVS to start afresh.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's devstack/, for the SeaweedFS binary)

ROOT = Path(__file__).resolve().parents[1]
#: The lowest and highest of each range the extras allow (pyproject.toml); their
#: newest patch releases.
PAIRS = {"lowest": ("4.0.5", "3.0.6"), "highest": ("4.3.0", "3.3.2")}
EXTRAS = "spark,airflow,quality"
#: Pins an Airflow minor needs beyond its own requirements, as the constraints file
#: Airflow installs each release with has them: Airflow 3.0's task runner posts JSON
#: without a Content-Type, which FastAPI refuses from 0.132 on (every task fails with a
#: 422 at its start), so 3.0 gets the FastAPI of its 3.0.6 release.
AIRFLOW_PINS = {"3.0": ("fastapi==0.116.1",)}
RESULT = "@compat "  # bench/compat_run.py's result line


@dataclass
class PairResult:
    spark: str
    airflow: str
    passed: bool = False
    setup_seconds: float = 0.0
    run_seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    failure: str | None = None


def uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    if not os.access(found, os.X_OK):
        raise SystemExit("uv is not installed (./dev setup installs it)")
    return found


def clean_env() -> dict[str, str]:
    """This environment without the project's: no venv, no PYTHONPATH, no settings."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith(("BATCHPOINT_", "AIRFLOW"))
    }


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(
        argv, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed:\n{done.stdout}\n{done.stderr}")


def build_wheel(envs: Path) -> Path:
    dist = envs / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    _run([uv(), "build", "--wheel", "--out-dir", str(dist), str(ROOT)], envs)
    (wheel,) = dist.glob("batchpoint-*.whl")
    return wheel


def environment(envs: Path, wheel: Path, spark: str, airflow: str) -> Path:
    """The pair's environment (made once, then reused) with this wheel; its python."""
    home = envs / f"spark-{spark}-airflow-{airflow}"
    home.mkdir(parents=True, exist_ok=True)
    python = home / "venv" / "bin" / "python"
    if not python.exists():
        _run([uv(), "venv", "--python", sys.executable, str(home / "venv")], home)
    pins = home / "pins.txt"
    extra = AIRFLOW_PINS.get(".".join(airflow.split(".")[:2]), ())
    pins.write_text("\n".join([f"pyspark=={spark}", f"apache-airflow=={airflow}", *extra]) + "\n")
    # The wheel's version stays 0.1.0 while its code changes: always reinstalled.
    _run(
        [uv(), "pip", "install", "--python", str(python), "-c", str(pins),
         "--reinstall-package", "batchpoint", f"batchpoint[{EXTRAS}] @ {wheel.as_uri()}"],
        home,
    )  # fmt: skip
    return python


def run_pair(python: Path, workdir: Path, epochs: int, timeout: float) -> dict[str, Any]:
    """bench/compat_run.py in the environment, its output passed through; its result."""
    from devstack.seaweed import find_weed

    shutil.rmtree(workdir, ignore_errors=True)
    env = {**clean_env(), "PYTHONPATH": str(ROOT), "BATCHPOINT_WEED": str(find_weed())}
    argv = [str(python), str(ROOT / "bench" / "compat_run.py"), str(workdir)]
    child = subprocess.Popen(
        [*argv, "--epochs", str(epochs)],
        cwd=workdir.parent,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: a timeout stops all of it
    )
    result: dict[str, Any] = {"failure": f"no result line (see {workdir})"}
    deadline = time.monotonic() + timeout
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith(RESULT):
                result = json.loads(line[len(RESULT) :])
            else:
                print(f"  {line}", end="", flush=True)
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(argv, timeout)
        child.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _stop(child)
        result = {**result, "failure": f"timed out after {timeout:.0f}s"}
    if child.returncode not in (0, None) and not result.get("failure"):
        result["failure"] = f"exit {child.returncode}"
    return result


def _stop(child: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(child.pid, sig)
            child.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def check_pair(envs: Path, wheel: Path, spark: str, airflow: str, args: Any) -> PairResult:
    result = PairResult(spark, airflow)
    print(f"== Spark {spark}, Airflow {airflow}", flush=True)
    started = time.monotonic()
    try:
        python = environment(envs, wheel, spark, airflow)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        result.failure = f"environment: {exc}"
        return result
    finally:
        result.setup_seconds = round(time.monotonic() - started, 1)
    started = time.monotonic()
    found = run_pair(python, python.parents[2] / "run", args.epochs, args.timeout)
    result.run_seconds = round(time.monotonic() - started, 1)
    result.phases = found.get("seconds", {})
    result.versions = found.get("versions", {})
    result.failure = found.get("failure")
    result.passed = result.failure is None
    return result


def matrix(results: list[PairResult]) -> str:
    names = list(dict.fromkeys(p for r in results for p in r.phases))
    head = f"{'spark':<7} {'airflow':<8} {'result':<6} {'env s':>6} {'run s':>6}"
    lines = [head + "".join(f" {n:>10}" for n in names)]
    for r in results:
        row = f"{r.spark:<7} {r.airflow:<8} {'pass' if r.passed else 'FAIL':<6}"
        row += f" {r.setup_seconds:6.1f} {r.run_seconds:6.1f}"
        row += "".join(f" {r.phases[n]:10.1f}" if n in r.phases else f" {'-':>10}" for n in names)
        lines.append(row + (f"  {r.failure}" if r.failure else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", action="append", choices=sorted(PAIRS), help="repeatable")
    parser.add_argument("--spark", help="a pyspark version (with --airflow)")
    parser.add_argument("--airflow", help="an apache-airflow version (with --spark)")
    parser.add_argument("--envs", type=Path, default=ROOT / "build" / "compat")
    parser.add_argument("--epochs", type=int, default=2, help="epochs before the restore")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds a pair may run")
    parser.add_argument("--results", type=Path, help="write the matrix here as JSON")
    args = parser.parse_args(argv)
    if bool(args.spark) != bool(args.airflow):
        parser.error("--spark and --airflow go together")
    pairs = [PAIRS[p] for p in args.pair or []]
    if args.spark:
        pairs.append((args.spark, args.airflow))
    envs = args.envs.resolve()
    envs.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(envs)
    results = [check_pair(envs, wheel, s, a, args) for s, a in pairs or PAIRS.values()]
    print("\n" + matrix(results), flush=True)
    if args.results:
        args.results.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
