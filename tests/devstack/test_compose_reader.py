"""The compose reader of `./dev stack` on the real docker-compose.yaml: it starts every
service of the file and nothing else, each with the command, entrypoint, environment and
healthcheck the file gives it (checked against a plain YAML read), in an order its
depends_on allows; compose's interpolation and override merging; the container paths it
makes local; a local equivalent for every image, at the versions the file pins; the keys
of how a container runs (user, secrets, deploy limits and replicas, init, pull_policy,
profiles), read and honoured: volumes owned as Docker makes them, limits in cgroups."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from batchpoint.errors import ConfigError
from devstack.compose import COMPLETED, ComposeFile, duration, interpolate, merge, read_dotenv
from devstack.replicas import aliases

PROJECT = Path(__file__).resolve().parents[2]
COMPOSE = PROJECT / "docker-compose.yaml"
#: the file's required secrets, as a trial gives them
TRIAL = read_dotenv(PROJECT / "trial.env")


def _defaults(text: str) -> str:
    """trial.env's values, ${VAR:-default} -> default and $$ -> $, as compose reads the
    file with --env-file trial.env."""

    def value(match: re.Match[str]) -> str:
        return TRIAL.get(match[1], match[3] if match[2] == ":-" else "")

    text = re.sub(r"(?<!\$)\$\{([A-Z0-9_]+)(?:(:?[-?+])([^}]*))?\}", value, text)
    return text.replace("$$", "$")


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(_defaults(COMPOSE.read_text()))


@pytest.fixture(scope="module")
def compose() -> ComposeFile:
    return ComposeFile.load(COMPOSE, variables=TRIAL)


def _argv(value: object) -> tuple[str, ...] | None:
    return None if value is None else tuple(map(str, value))  # type: ignore[arg-type]


def test_every_service_of_the_file_is_started_and_nothing_else(compose, raw):
    order = compose.start_order()
    assert sorted(order) == sorted(raw["services"])
    assert len(order) == len(set(order))
    for name in order:  # each after what it depends on
        for dependency in compose.services[name].depends_on:
            assert order.index(dependency.service) < order.index(name), (name, dependency)
    waited = {
        d
        for s in raw["services"].values()
        for d, spec in (s.get("depends_on") or {}).items()
        if isinstance(spec, dict) and spec["condition"] == COMPLETED
    }
    assert {n for n in order if compose.one_shot(n)} == waited


def test_a_service_brings_exactly_what_it_depends_on(compose, raw):
    def needs(name: str) -> set[str]:
        found = set(raw["services"][name].get("depends_on") or [])
        return found.union(*(needs(d) for d in found)) if found else found

    for name in raw["services"]:
        assert set(compose.start_order([name])) == {name} | needs(name), name


def test_each_service_runs_what_the_file_says(compose, raw):
    for name, spec in raw["services"].items():
        service = compose.services[name]
        assert service.image == spec["image"]
        assert service.command == _argv(spec.get("command")), name
        assert service.entrypoint == _argv(spec.get("entrypoint")), name
        expected_env = {k: str(v) for k, v in (spec.get("environment") or {}).items()}
        assert dict(service.environment) == expected_env, name
        assert service.restart == spec.get("restart", "no")
        assert service.hostname == spec.get("hostname", name)
        check = spec.get("healthcheck")
        if check is None:
            assert service.healthcheck is None
        else:
            kind, *test = check["test"]
            assert service.healthcheck is not None
            assert service.healthcheck.shell is (kind == "CMD-SHELL"), name
            assert list(service.healthcheck.test) == (
                [" ".join(test)] if kind == "CMD-SHELL" else test
            )
        targets = sorted(m.target for m in service.mounts)
        volumes = [v.split(":")[1] for v in spec.get("volumes", [])]
        configs = [c["target"] for c in spec.get("configs", [])]
        assert targets == sorted(volumes + configs), name


def test_healthchecks_are_spaced_as_docker_spaces_them(compose, raw):
    checked = 0
    for name, spec in raw["services"].items():
        if "healthcheck" not in spec:
            continue
        given, check = spec["healthcheck"], compose.services[name].healthcheck
        assert check is not None
        assert check.interval == duration(given.get("interval", "30s"), name)
        assert check.start_period == duration(given.get("start_period", "0s"), name)
        assert check.timeout == duration(given.get("timeout", "30s"), name)
        # start_interval (Docker's default 5 s) in the start period, interval after it
        assert check.gap(0.0) == (5.0 if check.start_period > 0 else check.interval)
        assert check.gap(check.start_period) == check.interval
        checked += 1
    assert checked >= 9  # every long-running service of the file has one


def test_variables_are_interpolated_as_compose_does(tmp_path):
    variables = {"SET": "x", "EMPTY": ""}
    assert interpolate("${SET:-d} ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d}", variables) == "x d d "
    assert interpolate("$SET/${SET}/$$SET/${UNSET}", variables) == "x/x/$SET/"
    assert interpolate("${SET:+alt}${UNSET:+alt}", variables) == "alt"
    with pytest.raises(ConfigError, match=r"\$\{UNSET\} is required: give it"):
        interpolate("${UNSET:?give it}", variables)
    # on the real file: a secret from the environment reaches every place that uses it
    compose = ComposeFile.load(COMPOSE, variables={**TRIAL, "AIRFLOW_ADMIN_PASSWORD": "s3cret"})
    init = compose.services["airflow-init"].environment
    assert init["AIRFLOW_ADMIN_PASSWORD"] == "s3cret"
    api_conn = compose.services["airflow-scheduler"].environment[
        "AIRFLOW_CONN_BATCHPOINT_AIRFLOW_API"
    ]
    assert '"password": "s3cret"' in api_conn
    # and $$ stays a literal $ for the service's shell
    check = compose.services["airflow-triggerer"].healthcheck
    assert check is not None and '"${HOSTNAME}"' in check.test[0]


def test_an_override_file_merges_environments_key_by_key(tmp_path):
    override = tmp_path / "override.yaml"
    override.write_text(
        "services:\n"
        "  airflow-scheduler:\n"
        "    environment:\n"
        '      BATCHPOINT_CHECKPOINT_INTERVAL: "30"\n'
        '      EXTRA: "1"\n'
    )
    base = ComposeFile.load(COMPOSE, variables=TRIAL)
    merged = ComposeFile.load(COMPOSE, variables=TRIAL, overrides=[override])
    before = dict(base.services["airflow-scheduler"].environment)
    after = dict(merged.services["airflow-scheduler"].environment)
    assert after == {**before, "BATCHPOINT_CHECKPOINT_INTERVAL": "30", "EXTRA": "1"}
    assert (
        merged.services["airflow-scheduler"].command == base.services["airflow-scheduler"].command
    )
    assert merged.services["airflow-triggerer"] == base.services["airflow-triggerer"]
    assert merge({"a": [1], "b": {"c": 1}}, {"a": [2], "b": {"d": 2}}) == {
        "a": [2],
        "b": {"c": 1, "d": 2},
    }


def test_what_the_stack_cannot_honour_is_refused(tmp_path):
    path = tmp_path / "docker-compose.yaml"
    path.write_text("services:\n  web:\n    image: nginx:1.27\n    networks: [front]\n")
    with pytest.raises(ConfigError, match=r"networks not supported by \./dev stack"):
        ComposeFile.load(path, variables={})
    path.write_text("services:\n  web:\n    image: nginx:1.27\n    depends_on: [db]\n")
    with pytest.raises(ConfigError, match="depends on db, which the file does not define"):
        ComposeFile.load(path, variables={})


def _container(compose: ComposeFile, name: str, workdir: Path):
    from devstack.container import Container
    from devstack.images import local_image
    from devstack.netns import Host

    service = compose.services[name]
    host = Host(name, f"bpstest-{name}", "10.213.255.2", "bpstestv0")
    return Container(service, compose, local_image(service.image), host, workdir, "bpstest")


def test_container_paths_become_local_ones(compose, tmp_path):
    seaweed = _container(compose, "seaweedfs", tmp_path)
    seaweed.prepare()
    argv = seaweed.command()
    assert argv[:3] == [str(Path(sys.executable).parent / "weed"), "-logtostderr=true", "server"]
    assert f"-dir={tmp_path / 'volumes' / 'seaweedfs-data'}" in argv
    (config,) = [a.split("=", 1)[1] for a in argv if a.startswith("-s3.config=")]
    assert Path(config).read_text() == compose.configs["seaweedfs_s3"]
    assert "-s3.port=8333" in argv  # not a path: as it is

    scheduler = _container(compose, "airflow-scheduler", tmp_path)
    scheduler.prepare()
    env = scheduler.environment()
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == str(
        tmp_path / "volumes" / "airflow-auth" / "passwords.json"
    )
    assert env["BATCHPOINT_PYSPARK_PYTHON"] == sys.executable  # the image's Python
    assert env["AIRFLOW_HOME"] == str(tmp_path / "hosts" / "airflow-scheduler" / "opt/airflow")
    # $AIRFLOW_HOME/dags is the project's dags/, as the bind mount says
    assert (Path(env["AIRFLOW_HOME"]) / "dags").resolve() == PROJECT / "dags"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == (
        "http://airflow-apiserver:8080/execution/"
    )
    assert env["HOSTNAME"] == "airflow-scheduler" and env["SPARK_LOCAL_IP"] == "10.213.255.2"
    assert scheduler.command()[1:] == ["scheduler"]  # the image's entrypoint: airflow ...


def test_every_image_has_a_local_equivalent_at_the_pinned_version(compose):
    from devstack.images import local_image

    if not list(Path("/usr/lib/postgresql").glob("*/bin/postgres")):
        pytest.skip("no PostgreSQL here (apt-get install postgresql)")
    if shutil.which("redis-server") is None:
        pytest.skip("no Redis here (apt-get install redis-server)")
    for image in sorted({s.image for s in compose.services.values()}):
        local = local_image(image)
        assert local.difference == "", str(local)
    with pytest.raises(ConfigError, match="no local equivalent of image mysql:8"):
        local_image("mysql:8")


def test_a_scaled_service_is_a_host_per_replica(tmp_path):
    path = tmp_path / "docker-compose.yaml"
    path.write_text(
        "services:\n"
        "  master: {image: m}\n"
        "  worker:\n"
        "    image: w\n"
        "    deploy: {replicas: 3}\n"
        "    depends_on: {master: {condition: service_healthy}}\n"
        "  client:\n"
        "    image: c\n"
        "    depends_on: {worker: {condition: service_healthy}}\n"
    )
    compose = ComposeFile.load(path, variables={})
    assert compose.services["worker"].replicas == 3
    scaled = compose.scaled()
    workers = ["worker-1", "worker-2", "worker-3"]
    assert [n for n in scaled.services if n.startswith("worker")] == workers
    for name in workers:
        replica = scaled.services[name]
        assert (replica.hostname, replica.replica_of, replica.replicas) == (name, "worker", 1)
        assert [d.service for d in replica.depends_on] == ["master"]
    # what waited on the service waits on every replica, with the same condition
    needs = scaled.services["client"].depends_on
    assert [(d.service, d.condition) for d in needs] == [(n, "service_healthy") for n in workers]
    # the service's own name answers at its first replica, as compose's DNS answers at one
    assert aliases(scaled)["worker-1"] == ("worker",) and aliases(scaled)["worker-2"] == ()
    assert scaled.start_order(["worker"]) == ["master", *workers]
    # the file as it is, unscaled, is the one read back (nothing else sees replicas)
    assert compose.scaled().services.keys() == scaled.services.keys()
    assert ComposeFile.load(path, variables={}).services.keys() == {"master", "worker", "client"}


@pytest.mark.parametrize(
    ("deploy", "said"),
    [
        ("{replicas: 0}", "at least 1"),
        ("{replicas: many}", "a whole number"),
        ("{replicas: 2}\n    hostname: w", "cannot share a hostname"),
    ],
)
def test_replicas_the_stack_cannot_make_are_refused(tmp_path, deploy, said):
    path = tmp_path / "docker-compose.yaml"
    path.write_text(f"services:\n  worker:\n    image: w\n    deploy: {deploy}\n")
    with pytest.raises(ConfigError, match=said):
        ComposeFile.load(path, variables={})


RUNTIME_KEYS = """\
secrets:
  token:
    file: ./token.txt
  password:
    environment: DB_PASSWORD
services:
  app:
    image: batchpoint/airflow-spark:0.1.0-3.3.2-4.3
    build: {context: ., dockerfile: docker/Dockerfile}
    pull_policy: build
    user: "50000:0"
    init: true
    secrets:
      - token
      - source: password
        target: db_password
    deploy:
      replicas: 2
      resources:
        limits: {cpus: "0.5", memory: 512m}
  tools:
    image: postgres:15.18
    profiles: [debug]
    depends_on: [app]
"""


def _runtime_file(tmp_path: Path, text: str = RUNTIME_KEYS) -> Path:
    (tmp_path / "token.txt").write_text("t0ken\n")
    path = tmp_path / "docker-compose.yaml"
    path.write_text(text)
    return path


def test_how_a_container_runs_is_read(tmp_path):
    path = _runtime_file(tmp_path)
    compose = ComposeFile.load(path, variables={"DB_PASSWORD": "pw"})
    app = compose.services["app"]
    assert (app.user, app.init, app.pull_policy, app.replicas) == ("50000:0", True, "build", 2)
    assert (app.limits.cpus, app.limits.memory) == (0.5, 512 * 1024**2)
    secrets = {m.target: m.source for m in app.mounts if m.kind == "secret"}
    assert secrets == {"/run/secrets/token": "token", "/run/secrets/db_password": "password"}
    assert all(m.read_only for m in app.mounts if m.kind == "secret")
    assert compose.secrets["token"].file == tmp_path / "token.txt"
    assert compose.secrets["password"].content == "pw"
    # a service of a profile starts only when its profile is active, or when named
    assert compose.start_order() == ["app"]
    assert compose.start_order(["tools"]) == ["app", "tools"]
    for active in (
        ComposeFile.load(path, variables={"DB_PASSWORD": "pw"}, profiles=["debug"]),
        ComposeFile.load(path, variables={"DB_PASSWORD": "pw", "COMPOSE_PROFILES": "x,debug"}),
    ):
        assert active.start_order() == ["app", "tools"]
    plain = compose.services["tools"]
    assert (plain.user, plain.replicas, plain.pull_policy, plain.limits.memory) == (
        None,
        1,
        "missing",
        None,
    )


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (("replicas: 2", "replicas: 2\n      placement: {}"), r"deploy: placement not supported"),
        (("limits:", "reservations:"), r"resources: reservations not supported"),
        (("memory: 512m", "memory: lots"), r"'lots' is not a size"),
        (('user: "50000:0"', "user: airflow"), r"runs a numeric UID or UID:GID"),
        (("pull_policy: build", "pull_policy: sometimes"), r"pull_policy: 'sometimes'"),
        (("- token\n", "- nosuch\n"), r"secret nosuch undeclared"),
    ],
)
def test_what_a_container_cannot_honour_is_refused(tmp_path, change, refusal):
    path = _runtime_file(tmp_path, RUNTIME_KEYS.replace(*change))
    with pytest.raises(ConfigError, match=refusal):
        ComposeFile.load(path, variables={"DB_PASSWORD": "pw"})
    path.write_text(RUNTIME_KEYS)
    with pytest.raises(ConfigError, match="variable DB_PASSWORD is not set"):
        ComposeFile.load(path, variables={})


@pytest.mark.skipif(os.geteuid() != 0, reason="owners are set as root, as the stack runs")
def test_volumes_are_owned_as_docker_makes_them(compose, tmp_path):
    from devstack.images import AIRFLOW_IMAGE_UID

    scheduler = _container(compose, "airflow-scheduler", tmp_path)
    scheduler.prepare()
    volumes = tmp_path / "volumes"
    # the image has /opt/airflow/logs (its airflow user's): Docker copies its owner
    logs = (volumes / "airflow-logs").stat()
    assert (logs.st_uid, logs.st_gid, logs.st_mode & 0o777) == (AIRFLOW_IMAGE_UID, 0, 0o775)
    # it has no /opt/airflow/auth: a new volume there is root's, until airflow-init
    # (root) hands it over
    auth = (volumes / "airflow-auth").stat()
    assert (auth.st_uid, auth.st_gid, auth.st_mode & 0o777) == (0, 0, 0o755)
    home = Path(scheduler.environment()["AIRFLOW_HOME"]).stat()
    assert (home.st_uid, home.st_gid) == (AIRFLOW_IMAGE_UID, 0)
    # a kept volume is left as it is
    os.chown(volumes / "airflow-auth", 1234, 0)
    _container(compose, "airflow-apiserver", tmp_path).prepare()
    assert (volumes / "airflow-auth").stat().st_uid == 1234

    # the service runs as AIRFLOW_UID in group 0, known by the image's name for it
    assert scheduler.user == (50000, 0)
    assert scheduler.as_user()[1:] == ["--reuid=50000", "--regid=0", "--clear-groups", "--"]
    env = scheduler.environment()
    assert env["USER"] == env["LOGNAME"] == "airflow"
    assert scheduler.cwd == Path(env["AIRFLOW_HOME"])  # the image's WORKDIR
    init = _container(compose, "airflow-init", tmp_path)
    assert init.user == (0, 0) and "USER" not in init.environment()
    assert _container(compose, "seaweedfs", tmp_path).as_user() == []


def test_secrets_are_read_only_files_at_run_secrets(tmp_path):
    path = _runtime_file(tmp_path)
    compose = ComposeFile.load(path, variables={"DB_PASSWORD": "pw"})
    app = _container(compose, "app", tmp_path / "stack")
    app.prepare()
    assert Path(app.translate("/run/secrets/token")).read_text() == "t0ken\n"
    password = Path(app.translate("/run/secrets/db_password"))
    assert password.read_text() == "pw" and password.stat().st_mode & 0o777 == 0o444
    assert str(password) in app.read_only_paths()


def test_limits_are_set_in_a_control_group_or_said_not_to_be(tmp_path):
    from devstack.compose_keys import Limits
    from devstack.limits import control_group

    limits = Limits(cpus=1.5, memory=256 * 1024**2)
    v1 = tmp_path / "v1"
    for controller in ("memory", "cpu"):
        (v1 / controller).mkdir(parents=True)
    group = control_group("bps1-app", limits, root=v1)
    assert (v1 / "memory/bps1-app/memory.limit_in_bytes").read_text() == str(256 * 1024**2)
    assert (v1 / "cpu/bps1-app/cpu.cfs_quota_us").read_text() == "150000"
    assert (v1 / "cpu/bps1-app/cpu.cfs_period_us").read_text() == "100000"
    assert group.procs == [v1 / "memory/bps1-app/cgroup.procs", v1 / "cpu/bps1-app/cgroup.procs"]
    assert group.not_enforced == []

    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    group = control_group("bps1-app", limits, root=v2)
    assert (v2 / "bps1-app/memory.max").read_text() == str(256 * 1024**2)
    assert (v2 / "bps1-app/cpu.max").read_text() == "150000 100000"
    assert group.procs == [v2 / "bps1-app/cgroup.procs"]

    # no hierarchy to write: each limit is said not to be enforced, never dropped
    group = control_group("bps1-app", limits, root=tmp_path / "none")
    assert group.procs == []
    assert [line.split(" not enforced")[0] for line in group.not_enforced] == [
        "memory 268435456 bytes",
        "cpus 1.5",
    ]
