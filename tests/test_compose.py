"""docker-compose.yaml, checked against the code (it cannot be started here): the
services of the deployment, the code volumes, every BATCHPOINT_* variable being one the
code reads with a value it accepts, the connections, and the ports the pieces use to find
each other."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from batchpoint.airflow.config import KNOWN_VARIABLES, parse_bool, parse_interval
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.settings import Settings

PROJECT = Path(__file__).resolve().parents[1]
AIRFLOW_SERVICES = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
CODE_MOUNTS = {
    "./dags": "/opt/airflow/dags",
    "./plugins": "/opt/airflow/plugins",
    "./spark_jobs": "/opt/airflow/spark_jobs",
    "./include": "/opt/airflow/include",
}


def _expand(text: str) -> str:
    """${VAR:-default} -> default, as compose does with VAR unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(_expand((PROJECT / "docker-compose.yaml").read_text()))


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def env_of(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


def test_the_deployment_has_every_piece(services):
    assert set(services) == {
        "postgres",
        "airflow-init",
        *AIRFLOW_SERVICES,
        "spark-master",
        "spark-worker",
        "seaweedfs",
        "seaweedfs-init",
    }
    for name, command in AIRFLOW_SERVICES.items():
        assert services[name]["command"][0] == command
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["airflow-init"]["condition"] == "service_completed_successfully"
        assert depends["seaweedfs-init"]["condition"] == "service_completed_successfully"
    assert services["airflow-init"]["command"] == ["db", "migrate"]


def test_airflow_runs_on_postgres_with_the_local_executor(services):
    postgres = services["postgres"]["environment"]
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        env = env_of(services[name])
        url = urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        assert url.scheme.startswith("postgresql") and url.hostname == "postgres"
        assert (url.username, url.password) == (
            postgres["POSTGRES_USER"],
            postgres["POSTGRES_PASSWORD"],
        )
        assert url.path == "/" + postgres["POSTGRES_DB"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"


def test_every_container_that_runs_batchpoint_code_mounts_it(services):
    for name in (*AIRFLOW_SERVICES, "airflow-init", "spark-master", "spark-worker"):
        mounts = dict(v.split(":", 1) for v in services[name]["volumes"] if v.startswith("./"))
        assert mounts == CODE_MOUNTS, name
        assert env_of(services[name])["PYTHONPATH"] == CODE_MOUNTS["./include"]
    for host_path in CODE_MOUNTS:
        assert (PROJECT / host_path).is_dir(), host_path
    assert (PROJECT / "include" / "batchpoint").is_dir()


def test_every_batchpoint_variable_is_known_and_valid(services):
    for name in (*AIRFLOW_SERVICES, "spark-master", "spark-worker"):
        env = env_of(services[name])
        used = {k for k in env if k.startswith("BATCHPOINT_")}
        assert used <= KNOWN_VARIABLES, (name, sorted(used - KNOWN_VARIABLES))
    env = env_of(services["airflow-scheduler"])
    settings = Settings.from_env(env)  # raises on a bad root or checkpoint value
    assert settings.root == "s3://batchpoint/prod"
    assert isinstance(settings.checkpoint, CheckpointConfig)
    assert parse_interval(env["BATCHPOINT_CHECKPOINT_INTERVAL"]) is not None
    assert env["BATCHPOINT_ACK_SENSOR_MODE"] in ("deferrable", "reschedule", "poke")
    assert parse_bool(env["BATCHPOINT_AUDIT"], "BATCHPOINT_AUDIT") is False
    shlex.split(env["BATCHPOINT_SPARK_SUBMIT_ARGS"])
    # the job path is inside the spark_jobs mount, and that file exists in the repo
    job = Path(env["BATCHPOINT_SPARK_JOB"])
    assert job.parent.as_posix() == CODE_MOUNTS["./spark_jobs"]
    assert (PROJECT / "spark_jobs" / job.name).is_file()
    assert env["BATCHPOINT_PIPELINE_REF"].partition(":")[0] == "batchpoint.demo.payments"


def test_spark_master_url_matches_the_cluster(services):
    env = env_of(services["airflow-scheduler"])
    master = urlparse(env["BATCHPOINT_SPARK_MASTER"])
    assert master.scheme == "spark" and master.hostname == "spark-master"
    command = services["spark-master"]["command"]
    assert command[command.index("--port") + 1] == str(master.port)
    assert command[command.index("--host") + 1] == master.hostname
    assert env["BATCHPOINT_SPARK_MASTER"] in services["spark-worker"]["command"]
    # executors connect back to the driver inside the scheduler's task processes
    args = shlex.split(env["BATCHPOINT_SPARK_SUBMIT_ARGS"])
    assert "spark.driver.host=airflow-scheduler" in args
    assert services["airflow-scheduler"]["hostname"] == "airflow-scheduler"


def _published(service: dict) -> set[int]:
    return {int(str(p).split(":")[-1]) for p in service.get("ports", [])}


def test_connections_point_at_the_services(services):
    env = env_of(services["airflow-scheduler"])
    storage = json.loads(env["AIRFLOW_CONN_BATCHPOINT_STORAGE"])
    endpoint = urlparse(storage["host"])
    assert endpoint.hostname == "seaweedfs"
    seaweed = services["seaweedfs"]["command"]
    assert f"-s3.port={endpoint.port}" in seaweed and endpoint.port in _published(
        services["seaweedfs"]
    )
    bucket = urlparse(storage["extra"]["root"]).netloc
    assert f"-name {bucket}" in services["seaweedfs-init"]["command"][0]
    assert storage["extra"]["root"] == env["BATCHPOINT_ROOT"]
    assert env["BATCHPOINT_S3_ENDPOINT_URL"] == storage["host"]
    assert (storage["login"], storage["password"]) == (
        env["BATCHPOINT_S3_ACCESS_KEY_ID"],
        env["BATCHPOINT_S3_SECRET_ACCESS_KEY"],
    )

    api = json.loads(env["AIRFLOW_CONN_BATCHPOINT_AIRFLOW_API"])
    apiserver = services["airflow-apiserver"]
    assert api["host"] == "airflow-apiserver"
    assert str(api["port"]) == apiserver["command"][apiserver["command"].index("--port") + 1]
    assert api["port"] in _published(apiserver)
    base = urlparse(env["AIRFLOW__API__BASE_URL"])
    assert (base.hostname, base.port) == ("airflow-apiserver", api["port"])
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith(env["AIRFLOW__API__BASE_URL"])


def test_the_admin_password_is_the_one_the_api_connection_uses(compose, services):
    passwords = json.loads(compose["configs"]["airflow_passwords"]["content"])
    api = json.loads(env_of(services["airflow-scheduler"])["AIRFLOW_CONN_BATCHPOINT_AIRFLOW_API"])
    users = env_of(services["airflow-apiserver"])["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    assert api["login"] in passwords and passwords[api["login"]] == api["password"]
    assert users.split(":")[0] == api["login"]
    s3 = json.loads(compose["configs"]["seaweedfs_s3"]["content"])
    creds = s3["identities"][0]["credentials"][0]
    storage = json.loads(env_of(services["airflow-scheduler"])["AIRFLOW_CONN_BATCHPOINT_STORAGE"])
    assert (creds["accessKey"], creds["secretKey"]) == (storage["login"], storage["password"])
