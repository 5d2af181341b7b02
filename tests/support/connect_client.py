"""Spark Connect clients for the tests, run as subprocesses (a Connect session cannot
share the pytest process with the classic `spark` fixture).

    python tests/support/connect_client.py operator [run_operator args...]
        batchpoint.jobs.run_operator; BATCHPOINT_TEST_CLIENT_VERSION (if set) replaces
        the client's batchpoint version first, to play a client/server version skew
    python tests/support/connect_client.py task [run_operator args...]
        the operator as a connect-mode Airflow task runs it: ConnectLauncher.launch in
        this process; SIGTERM calls the launcher's kill(), as Airflow's task runner
        calls the operator's on_kill; prints "exit=<the job's exit code>"
    python tests/support/connect_client.py session sc://host:port
        import pyspark.sql.connect, open a session, run one query: prints "rows=3"
    python tests/support/connect_client.py join sc://host:port PIPELINE [release]
        join the pipeline's server session and print its id (then release it)
    python tests/support/connect_client.py unshared sc://host:port file:///root other-dir
        the file-root probe, with the client's writes diverted to `other-dir` (as if the
        client's disk were not the server's): prints the error line
"""

from __future__ import annotations

import os
import sys


def _operator(args: list[str]) -> int:
    import batchpoint

    fake = os.environ.get("BATCHPOINT_TEST_CLIENT_VERSION")
    if fake:
        batchpoint.__version__ = fake
    from batchpoint.jobs.run_operator import main

    return main(args)


def _task(args: list[str]) -> int:
    import argparse
    import signal

    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.hooks import ConnectLauncher
    from batchpoint.settings import Settings

    parser = argparse.ArgumentParser()
    for name in ("--remote", "--pipeline", "--checkpoint-id", "--operator", "--attempt"):
        parser.add_argument(name, required=True)
    parsed = parser.parse_args(args)
    os.environ.update(BATCHPOINT_SPARK_MODE="connect", BATCHPOINT_SPARK_REMOTE=parsed.remote)
    launcher = ConnectLauncher(AirflowDeployment.from_env(), parsed.pipeline)
    assert launcher.runs_here()
    signal.signal(signal.SIGTERM, lambda signum, frame: launcher.kill())
    result = launcher.launch(
        Settings.from_env(),
        int(parsed.checkpoint_id),
        parsed.operator,
        parsed.attempt,
        lambda line: print(line, flush=True),
    )
    print(f"exit={result.returncode}", flush=True)
    return 0


def _session(remote: str) -> int:
    import pyspark.sql.connect  # noqa: F401 - what this checks is that it imports

    from batchpoint.spark.session import connect_session

    spark = connect_session(remote, "import-check")
    print(f"rows={spark.range(3).count()} connect={type(spark).__module__}")
    return 0


def _join(remote: str, pipeline: str, release: str = "") -> int:
    """Join the pipeline's session, print its id; `release` then stops (releases) it."""
    import logging

    from batchpoint.spark.session import connect_session, pipeline_session_id

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    spark = connect_session(remote, "join", session_id=pipeline_session_id(pipeline, remote))
    assert spark.range(2).count() == 2
    print(f"session={spark.session_id}", flush=True)
    if release:
        spark.stop()
    return 0


def _unshared(remote: str, root: str, elsewhere: str) -> int:
    from pathlib import Path

    from batchpoint.errors import ConfigError
    from batchpoint.spark.remote import prepare_remote
    from batchpoint.spark.session import connect_session
    from batchpoint.storage import StoreRef
    from batchpoint.storage.local import LocalObjectStore

    put = LocalObjectStore.put
    diverted = LocalObjectStore(Path(elsewhere))

    def put_elsewhere(self: LocalObjectStore, key: str, data: bytes) -> str:
        return put(diverted, key, data)

    LocalObjectStore.put = put_elsewhere  # type: ignore[method-assign]
    spark = connect_session(remote, "unshared")
    try:
        prepare_remote(spark, StoreRef.of(root))
    except ConfigError as exc:
        print(f"error: {exc}")
        return 2
    print("shared")
    return 0


def main(argv: list[str]) -> int:
    mode, rest = argv[0], argv[1:]
    if mode == "operator":
        return _operator(rest)
    if mode == "task":
        return _task(rest)
    if mode == "session":
        return _session(*rest)
    if mode == "join":
        return _join(*rest)
    if mode == "unshared":
        return _unshared(*rest)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
