"""The epoch after a Spark Connect server's crash, on a Spark cluster: how long from the
server's restart to the end of that epoch, against the warm epochs that follow.

Starts a standalone Spark master and two workers (four cores each) on this machine, and
a Connect server on them as the compose file's spark-connect service starts it
(`batchpoint.jobs.connect_server`: FAIR, the preloading worker daemon, and once it
listens the warm-up of the payments pipeline's session). Per variant and round it
starts the server, runs one epoch of the payments pipeline (one client process running
the four operator tasks in order, on a file:// root) as soon as the server listens, as
the retry of the operator a crash interrupted does, then two warm epochs, then kills the
server's process group with SIGKILL. Variants: `plain` (Spark's classes loaded from the
jars) and `archive` (the server and its executors map the class-data archive of
`batchpoint.spark.fast_start`, as the compose file's server does). Prints per round the
server's time to listen, restart to the end of the first epoch, that epoch's and the
warm epochs' times with each operator's share, then per variant the medians and the
ratio first/warm.

    python bench/bench_connect_restart.py [--rounds 2] [--variants plain,archive]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from batchpoint.spark.fast_start import archive_path
from bench_connect_warm import OPERATORS, PaymentsStore, client_process, finished, split_of

PIPELINE_REF = "demo.payments:pipeline"
BIN = Path(sys.executable).parent


def variant_options(name: str) -> list[str]:
    if name == "plain":
        return []
    if name == "archive":
        option = f"-XX:SharedArchiveFile={archive_path()}"
        return [
            "--driver-java-options",
            option,
            "--conf",
            f"spark.executor.extraJavaOptions={option}",
        ]
    raise SystemExit(f"unknown variant {name!r}: plain or archive")


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def wait_for(port: int, up: bool, limit: float = 180.0) -> None:
    deadline = time.monotonic() + limit
    while listening(port) != up:
        if time.monotonic() > deadline:
            raise SystemExit(f"port {port} did not {'open' if up else 'close'} in {limit:.0f}s")
        time.sleep(0.1)


class Cluster:
    """A standalone master and two workers, each in a process group of its own."""

    def __init__(self, folder: Path) -> None:
        from devstack.seaweed import free_ports

        self.folder = folder
        self.env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        self.master_port, master_ui, *worker_uis, self.connect_port = free_ports(5)
        self.groups: list[subprocess.Popen[bytes]] = []
        master = ["--host", "127.0.0.1", "--port", str(self.master_port)]
        self.start(
            ["org.apache.spark.deploy.master.Master", *master, "--webui-port", str(master_ui)],
            "master",
        )
        wait_for(self.master_port, True)
        for n, ui in enumerate(worker_uis):
            worker = ["--cores", "4", "--memory", "3g", "--webui-port", str(ui)]
            work = ["--work-dir", str(folder / f"work-{n}")]
            self.start(
                ["org.apache.spark.deploy.worker.Worker", self.master, *worker, *work],
                f"worker-{n}",
            )

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def remote(self) -> str:
        return f"sc://127.0.0.1:{self.connect_port}"

    def start(
        self,
        args: list[str],
        log: str,
        command: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        with open(self.folder / f"{log}.log", "ab") as out:
            process = subprocess.Popen(
                command or [str(BIN / "spark-class"), *args],
                env={**self.env, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.groups.append(process)
        return process

    def connect_server(self, options: list[str]) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-m", "batchpoint.jobs.connect_server", "--master", self.master,
            "--conf", f"spark.connect.grpc.binding.port={self.connect_port}",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=1g",
            "--conf", "spark.scheduler.mode=FAIR", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.python.daemon.module=batchpoint.spark.worker_daemon",
            "--conf", "spark.sql.shuffle.partitions=4",
            "--conf", "spark.sql.session.timeZone=UTC", *options,
        ]  # fmt: skip
        env = {
            "BATCHPOINT_PIPELINE_REF": PIPELINE_REF,
            "BATCHPOINT_SPARK_REMOTE": self.remote,
            "SPARK_CONNECT_MODE": "0",
        }
        return self.start([], "connect", command, env)

    def stop(self) -> None:
        for process in self.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def cluster(folder: Path) -> Iterator[Cluster]:
    running = Cluster(folder)
    try:
        yield running
    finally:
        running.stop()


def epoch(store: PaymentsStore, remote: str) -> dict[str, object]:
    cid = store.trigger()
    result = finished(client_process(remote, cid, list(OPERATORS), store.env))
    store.finalize(cid)
    return result


def run(variants: list[str], rounds: int, tmp: Path) -> dict[str, dict[str, float]]:
    keys = ("listen", "restart", "first", "warm")
    rows: dict[str, dict[str, list[float]]] = {v: {k: [] for k in keys} for v in variants}
    with cluster(tmp) as spark:
        stores = {v: PaymentsStore(tmp / f"store-{v}", 2000) for v in variants}
        for round_ in range(rounds):
            for variant in variants:  # in turn: a load that drifts weighs on both alike
                started = time.monotonic()
                server = spark.connect_server(variant_options(variant))
                wait_for(spark.connect_port, True)
                listen = time.monotonic() - started
                first = epoch(stores[variant], spark.remote)
                restart = time.monotonic() - started
                warm = [epoch(stores[variant], spark.remote) for _ in range(2)]
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
                wait_for(spark.connect_port, False)
                first_s = float(first["end"]) - float(first["start"])  # type: ignore[arg-type]
                warm_s = [float(w["end"]) - float(w["start"]) for w in warm]  # type: ignore[arg-type]
                row = rows[variant]
                row["listen"].append(listen)
                row["restart"].append(restart)
                row["first"].append(first_s)
                row["warm"].extend(warm_s)
                print(
                    f"[{variant} {round_ + 1}] listens after {listen:.1f}s; restart to the end "
                    f"of the first epoch {restart:.1f}s; first epoch {first_s:.1f}s "
                    f"({split_of(first)}); warm {warm_s[0]:.1f}s, {warm_s[1]:.1f}s "
                    f"({split_of(warm[-1])})",
                    flush=True,
                )
    return {v: {k: statistics.median(xs) for k, xs in row.items()} for v, row in rows.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default="plain,archive")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for variant in variants:
        variant_options(variant)  # an unknown one fails before anything starts
    if "archive" in variants and not archive_path().is_file():
        parser.error(f"no class-data archive at {archive_path()}: ./dev setup builds it")
    with tempfile.TemporaryDirectory(prefix="bench-connect-restart-") as tmp:
        medians = run(variants, args.rounds, Path(tmp))
    print("\nvariant   listens  restart->first epoch done  first epoch  warm epoch  first/warm")
    for variant, m in medians.items():
        print(
            f"{variant:9s} {m['listen']:6.1f}s {m['restart']:26.1f}s {m['first']:11.1f}s "
            f"{m['warm']:10.1f}s {m['first'] / m['warm']:10.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
