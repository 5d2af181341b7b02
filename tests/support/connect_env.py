"""The environment of the tests' shared Spark Connect server."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: What the shared Spark Connect server finds in its environment: wrong S3 settings and
#: credentials everywhere, so that a task which works on it proves that its storage
#: settings travelled with it (batchpoint.spark.remote), never taken from the server.
WRONG_SERVER_ENV = {
    "AWS_ACCESS_KEY_ID": "wrong-server-key",
    "AWS_SECRET_ACCESS_KEY": "wrong-server-secret",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9",
    "AWS_DEFAULT_REGION": "eu-north-1",
    "BATCHPOINT_S3_ENDPOINT_URL": "http://127.0.0.1:9",
    "BATCHPOINT_S3_ACCESS_KEY_ID": "wrong-server-key",
    "BATCHPOINT_S3_SECRET_ACCESS_KEY": "wrong-server-secret",
    "BATCHPOINT_ROOT": "s3://no-such-bucket/nowhere",
}


def client_env(include: Path) -> dict[str, str]:
    """This process's environment for a client subprocess: none of batchpoint's settings,
    Airflow connections or the shared server's wrong ones (the test sets its own), the
    package imported from `include` and the demo's pipelines from the project root."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BATCHPOINT_", "AIRFLOW_CONN_")) and k not in WRONG_SERVER_ENV
    }
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env["PYTHONPATH"] = os.pathsep.join([str(include), str(PROJECT_ROOT)])
    return env
