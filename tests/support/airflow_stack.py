"""A real Airflow 3 deployment for one test: api-server, scheduler (LocalExecutor) and
triggerer on a SQLite copy of the session's database, on free ports, each in its own
process group so that stopping it stops everything it started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx

from devstack.seaweed import free_ports

AIRFLOW = str(Path(sys.executable).parent / "airflow")
USER, PASSWORD = "admin", "bp-stack-secret"
REQUEST_TIMEOUT = 60.0
GET_ATTEMPTS = 3


class AirflowStack:
    def __init__(self, home: Path, template_db: Path, env: dict[str, str]) -> None:
        self.home = home
        self.home.mkdir(parents=True, exist_ok=True)
        self.port, log_port, trigger_log_port = free_ports(3)
        self.base_url = f"http://127.0.0.1:{self.port}"
        # A consistent copy even if the session still holds connections to the original.
        with sqlite3.connect(template_db) as source, sqlite3.connect(home / "airflow.db") as copy:
            source.backup(copy)
        (home / "passwords.json").write_text(json.dumps({USER: PASSWORD}))
        self.env = {
            **env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            # Workers reach the execution API at {base_url}/execution/.
            "AIRFLOW__API__BASE_URL": self.base_url,
            # One secret for every component: tokens the scheduler issues to its
            # workers must validate at the api-server.
            "AIRFLOW__API_AUTH__JWT_SECRET": "bp-test-jwt-secret-" + os.urandom(8).hex(),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
            "AIRFLOW_CONN_BATCHPOINT_AIRFLOW_API": json.dumps(
                {
                    "conn_type": "http",
                    "host": "127.0.0.1",
                    "port": self.port,
                    "schema": "http",
                    "login": USER,
                    "password": PASSWORD,
                }
            ),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        }
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}
        self._token: str | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def airflow(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def start(self, components: tuple[str, ...] = ("api-server", "scheduler", "triggerer")) -> None:
        for name in components:
            log = self._logs[name] = (self.home / f"{name}.log").open("wb")
            self._processes[name] = subprocess.Popen(
                [AIRFLOW, name],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_healthy(self, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            for name, process in self._processes.items():
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {process.returncode}:\n{self.tail(name)}"
                    )
            try:
                last = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=15).json()
                wanted = [c for c in ("scheduler", "triggerer") if c in self._processes]
                if all(last.get(c, {}).get("status") == "healthy" for c in wanted):
                    return last
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(1)
        raise TimeoutError(f"Airflow not healthy after {timeout}s: {last}")

    def stop(self, grace: float = 40) -> None:
        for process in self._processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self._processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # Children (task supervisors, gunicorn/uvicorn workers) share the group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for log in self._logs.values():
            log.close()

    def __enter__(self) -> AirflowStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.home / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # -- REST -----------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        if self._token is None:
            response = httpx.post(
                f"{self.base_url}/auth/token",
                json={"username": USER, "password": PASSWORD},
                timeout=REQUEST_TIMEOUT,
            )
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        # A GET is asked again when the api-server, on SQLite and on cores the rest of the
        # suite shares, does not answer in time (CI saw one take over 30 s); a write is
        # never sent twice.
        attempts = GET_ATTEMPTS if method == "GET" else 1
        for attempt in range(1, attempts + 1):
            try:
                response = httpx.request(
                    method,
                    f"{self.base_url}/api/v2{path}",
                    headers=self._headers(),
                    timeout=REQUEST_TIMEOUT,
                    **kwargs,
                )
                break
            except httpx.TimeoutException:
                if attempt == attempts:
                    raise
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()

    def get(self, path: str) -> httpx.Response:
        """GET a path of the api-server outside its REST API (a plugin's page or JSON),
        as the admin; an error status fails."""
        response = httpx.get(
            f"{self.base_url}{path}", headers=self._headers(), timeout=REQUEST_TIMEOUT
        )
        if response.status_code >= 400:
            raise AssertionError(f"GET {path}: {response.status_code} {response.text}")
        return response

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        state = "?"
        while time.monotonic() < deadline:
            state = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        return state

    def wait_for_runs(self, dag_id: str, count: int, timeout: float = 300) -> list[dict[str, Any]]:
        """The DAG's runs once `count` of them have finished (or whatever is there at the
        timeout): runs the scheduler starts by itself, such as asset-triggered ones."""
        deadline = time.monotonic() + timeout
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            runs = self.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]
            if sum(r["state"] in ("success", "failed") for r in runs) >= count:
                return runs
            time.sleep(2)
        return runs

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        body = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in body["task_instances"]}
