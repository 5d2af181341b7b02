"""What the stack test (tests/devstack/test_stack.py) needs beside the stack itself: the
Airflow REST API as a user reaches it, Spark's monitoring API of the Connect server, a
feed of new payment files on the stack's S3, the accounting of every checkpoint DAG run
against the checkpoints it triggered, and the data files an Iceberg table reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from batchpoint.ops.runs import RUN_PROPERTY
from batchpoint.protocol.checkpoint import CheckpointStatus
from demo.payments import SOURCE_ROOT
from demo.payments_data import write_epoch_files

FINISHED = ("success", "failed")
#: spark.ui.port's default: the compose file leaves the Connect server's UI on
SPARK_UI_PORT = 4040


class RestApi:
    """Airflow's REST API v2 with a user's token (from /auth/token, as the UI's login and
    batchpoint's own api hook get theirs)."""

    def __init__(self, base_url: str, user: str, password: str) -> None:
        self.base_url = base_url
        self.user, self.password = user, password
        self._token: str | None = None

    def _headers(self) -> dict[str, str]:
        if self._token is None:
            response = httpx.post(
                f"{self.base_url}/auth/token",
                json={"username": self.user, "password": self.password},
                timeout=30,
            )
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; a few tries over a moment of unavailability (the api-server
        shares two cores with everything else)."""
        last: Exception | None = None
        for attempt in range(5):
            try:
                response = httpx.request(
                    method,
                    f"{self.base_url}/api/v2{path}",
                    headers=self._headers(),
                    timeout=60,
                    **kwargs,
                )
            except httpx.HTTPError as exc:
                last = exc
                time.sleep(2 * (attempt + 1))
                continue
            if response.status_code == 401:
                self._token = None
                continue
            if response.status_code >= 500:
                last = AssertionError(f"{method} {path}: {response.status_code}")
                time.sleep(2 * (attempt + 1))
                continue
            if response.status_code >= 400:
                raise AssertionError(f"{method} {path}: {response.status_code} {response.text}")
            return response.json() if response.content else None
        raise AssertionError(f"{method} {path}: no answer ({last})")

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.call(
            "PATCH",
            f"/dags/{dag_id}",
            params={"update_mask": "is_paused"},
            json={"is_paused": paused},
        )

    def form_conf(self, dag_id: str, **values: Any) -> dict[str, Any]:
        """The conf the UI's trigger form sends: every param of the DAG at the value
        the form shows (its default), with `values` typed over them."""
        params = self.call("GET", f"/dags/{dag_id}/details")["params"] or {}
        unknown = sorted(set(values) - set(params))
        assert not unknown, f"{dag_id} has no params {unknown}"
        return {name: spec["value"] for name, spec in params.items()} | values

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        run = self.call(
            "POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf}
        )
        return str(run["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            page = self.call(
                "GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100, "offset": len(out)}
            )
            out += page["dag_runs"]
            if len(out) >= page["total_entries"] or not page["dag_runs"]:
                return out

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        body = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in body["task_instances"]}

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int
    ) -> list[dict[str, Any]]:
        """The try's log as Airflow 3 stores it: one structured entry per line."""
        body = self.call(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
        )
        content = body.get("content", []) if isinstance(body, dict) else body
        lines = content if isinstance(content, list) else str(content).splitlines()
        return [c if isinstance(c, dict) else {"event": str(c)} for c in lines]

    def task_tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of a task instance, the first first."""
        body = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries")
        return sorted(body["task_instances"], key=lambda t: t["try_number"])

    def timeline(self, dag_id: str, run_id: str, origin: float) -> list[str]:
        """What each try of a run's tasks did, in seconds from `origin` (a fault): where
        the time to recover went."""
        lines = []
        tasks = self.task_instances(dag_id, run_id)
        for task_id, ti in sorted(tasks.items(), key=lambda kv: kv[1]["start_date"] or "~"):
            if not ti["try_number"]:
                lines.append(f"{task_id}: {ti['state']}")
                continue
            tries = self.task_tries(dag_id, run_id, task_id)
            said = []
            for t in tries:
                if not t["start_date"]:
                    said.append(f"try {t['try_number']} {t['state']}")
                    continue
                start = seconds_of(t["start_date"]) - origin
                took = seconds_of(t["end_date"]) - origin - start if t["end_date"] else None
                ran = f"{took:.0f}s" if took is not None else "..."
                said.append(f"try {t['try_number']} {t['state']} at {start:+.0f}s for {ran}")
            lines.append(f"{task_id}: " + ", ".join(said))
        return lines

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(dag_id, run_id)
            if run["state"] in FINISHED or time.monotonic() > deadline:
                return run
            time.sleep(3)

    def runs_before(self, dag_id: str, cutoff: float, timeout: float) -> list[dict[str, Any]]:
        """The runs of `dag_id` due at or before `cutoff` (wall clock), once every one of
        them has finished (or `timeout` passed: the caller checks their states)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = [r for r in self.runs(dag_id) if seconds_of(r["run_after"]) <= cutoff]
            if all(r["state"] in FINISHED for r in runs) or time.monotonic() > deadline:
                return runs
            time.sleep(3)


def seconds_of(stamp: str) -> float:
    """An ISO time stamp of the REST API as wall clock seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


#: what the trigger task logs when the protocol refuses a checkpoint (TriggerRefused)
NOT_TRIGGERED = "no checkpoint this time "


def why_not_triggered(log: Sequence[dict[str, Any]]) -> str | None:
    """Why a trigger task's try made no checkpoint, from its log: the refusal it logged
    (reason and detail), or the exception it failed with."""
    for entry in reversed(log):
        event = str(entry.get("event", ""))
        if NOT_TRIGGERED in event:
            return "not triggered " + event.split(NOT_TRIGGERED, 1)[1]
        if event == "Task failed with exception":
            errors = entry.get("error_detail") or [{}]
            error = errors[-1] if isinstance(errors, list) else {}
            text = f"{error.get('exc_type', '?')}: {error.get('exc_value', '')}"
            return f"trigger failed with {text[:200]}"
    return None


class SparkApp:
    """The Connect server's Spark application, through Spark's monitoring REST API on
    its UI port (a restarted server is a new application: looked up each time)."""

    def __init__(self, host: str) -> None:
        self.base_url = f"http://{host}:{SPARK_UI_PORT}/api/v1/applications"

    def _get(self, path: str = "") -> Any:
        response = httpx.get(f"{self.base_url}{path}", timeout=30)
        response.raise_for_status()
        return response.json()

    def running_jobs(self) -> int:
        (app,) = self._get()
        return len(self._get(f"/{app['id']}/jobs?status=running"))

    def failed_tasks(self) -> int:
        """Task attempts failed on executors (the workers' side) since the server began."""
        (app,) = self._get()
        executors = self._get(f"/{app['id']}/allexecutors")
        return sum(int(e["failedTasks"]) for e in executors if e["id"] != "driver")

    def wait_running_job(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not self.running_jobs():
            if time.monotonic() > deadline:
                raise AssertionError(f"no Spark job ran within {timeout:.0f}s")
            time.sleep(0.5)


@dataclass
class PaymentsFeed:
    """New payment files on the stack's S3 every `every` seconds, from a thread: one file
    per source partition (and the one an earlier write held back), as each file is a
    Spark task wherever the whole input is read again (the restore gate's recompute)."""

    store_ref: Any
    every: float
    accounts: int = 40
    events_per_epoch: int = 300
    written: list[tuple[float, int, int]] = field(default_factory=list)  # (when, epoch, files)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)

    def write(self) -> None:
        epoch = len(self.written)
        files = write_epoch_files(
            self.store_ref.open(),
            SOURCE_ROOT,
            epoch,
            accounts=self.accounts,
            events_per_epoch=self.events_per_epoch,
            files_per_partition=1,
        )
        self.written.append((time.time(), epoch, len(files)))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.write()
            except Exception as exc:  # S3 restarting: the next interval writes
                self.errors.append(f"{time.strftime('%H:%M:%S')} {exc}")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="payments-feed", daemon=True)
        self._thread.start()

    def stop(self) -> float:
        """Stop writing; returns when the last write ended (wall clock)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
        return time.time()


@dataclass(frozen=True)
class RunAccount:
    run_id: str
    state: str
    checkpoint_id: int | None
    outcome: str  # COMPLETED, ABORTED (reason: message), or why no checkpoint
    start: str | None
    end: str | None

    def __str__(self) -> str:
        cid = "-" if self.checkpoint_id is None else str(self.checkpoint_id)
        return f"{self.run_id:<48} {self.state:<8} checkpoint {cid:>3}: {self.outcome}"


def checkpoints_by_run(coordinator: Any) -> dict[str, Any]:
    """run id -> the outcome (or pending record) of the checkpoint that run triggered."""
    out: dict[str, Any] = {}
    for cid in range(1, coordinator.ids.peek()):
        outcome = coordinator.get_outcome(cid)
        pending = outcome.pending if outcome is not None else coordinator.get_checkpoint(cid)
        run_id = pending.properties.get(RUN_PROPERTY)
        if run_id:
            out[str(run_id)] = outcome if outcome is not None else pending
    return out


def account_runs(
    runs: Sequence[dict[str, Any]],
    coordinator: Any,
    why_not: Callable[[dict[str, Any]], str],
) -> list[RunAccount]:
    """Each of `runs` with the checkpoint it triggered and that checkpoint's fate;
    `why_not(run)` says why a run triggered none."""
    triggered = checkpoints_by_run(coordinator)
    rows = []
    for run in sorted(runs, key=lambda r: r["run_after"] or ""):
        record = triggered.get(run["dag_run_id"])
        if record is None:
            cid, outcome = None, why_not(run)
        elif getattr(record, "status", None) is CheckpointStatus.COMPLETED:
            cid, outcome = record.checkpoint_id, "COMPLETED"
        elif getattr(record, "status", None) is CheckpointStatus.ABORTED:
            reason = record.reason.code if record.reason else "?"
            cid, outcome = record.checkpoint_id, f"ABORTED ({reason}: {record.message})"
        else:
            cid, outcome = record.checkpoint_id, "PENDING"
        rows.append(
            RunAccount(
                run["dag_run_id"], run["state"], cid, outcome, run["start_date"], run["end_date"]
            )
        )
    return rows


def table_data_keys(table: Any, root_prefix: str) -> set[str]:
    """Store keys (under the root) of every data file an unexpired snapshot of the
    Iceberg `table` reads: GC must keep them, whatever the manifests say."""
    keys: set[str] = set()
    for snapshot in table.snapshots():
        for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            path = task.file.file_path
            _, _, key = path.partition("://")
            key = key.partition("/")[2]  # drop the bucket
            keys.add(key.removeprefix(root_prefix).lstrip("/"))
    return keys
