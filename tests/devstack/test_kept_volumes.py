"""Start, stop, start again over kept volumes (`docker compose down` then `up`, or
`./dev stack --keep DIR` twice): docker-compose.yaml's api-server and what it depends on
(postgres, seaweedfs, seaweedfs-init, airflow-init) come up a second time over the first
start's volumes, the init jobs complete again, and each volume's files belong to the user
that writes them (the Airflow services run as AIRFLOW_UID, not root), and `./dev stack
exec` runs the CLI on a service's host as its user. And the rule that
makes airflow-init chown: a new volume at a path the image lacks is root's, so a service
running as another user cannot write into it until a root init hands it over, as in
Docker; plus a resource limit enforced in a control group the service's processes are in.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devstack import stack_exec
from devstack.compose import ComposeFile, read_dotenv
from devstack.images import AIRFLOW_IMAGE_UID
from devstack.stack import Stack, StackError, remove_workdir

pytestmark = [pytest.mark.stack, pytest.mark.airflow, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parents[2]
COMPOSE = PROJECT / "docker-compose.yaml"
TRIAL = read_dotenv(PROJECT / "trial.env")
API_SERVER = "airflow-apiserver"


def _missing() -> str | None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux (network namespaces)"
    for tool in ("ip", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2, util-linux)"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/postgres")):
        return "needs PostgreSQL (apt-get install postgresql)"
    return None


@pytest.fixture
def workdir() -> Iterator[Path]:
    missing = _missing()
    if missing:
        pytest.skip(missing)
    # Not under /tmp, which every host gets a private one of.
    folder = Path(tempfile.mkdtemp(prefix="bp-kept-test-", dir="/var/tmp"))
    folder.chmod(0o755)  # the services that run as another user must get through
    yield folder
    remove_workdir(folder)


def _owner(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_uid, found.st_gid


def _log(stack: Stack, name: str) -> str:
    return stack.containers[name].log_path.read_text(errors="replace")


def _start(compose: ComposeFile, workdir: Path, lines: list[str]) -> Stack:
    stack = Stack(compose, workdir, [API_SERVER], say=lines.append)
    try:
        stack.up(timeout=900)
    except StackError:
        pytest.fail("\n".join(lines))
    return stack


def _login(stack: Stack) -> int:
    """The api-server's answer to the admin's login (it reads the passwords file)."""
    response = httpx.post(
        f"http://{stack.address(API_SERVER)}:8080/auth/token",
        json={"username": "admin", "password": TRIAL["AIRFLOW_ADMIN_PASSWORD"]},
        timeout=60,
    )
    return response.status_code


@pytest.mark.timeout(1800)
def test_the_deployment_starts_again_over_its_kept_volumes(
    workdir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    compose = ComposeFile.load(COMPOSE, variables=TRIAL)
    airflow_user = (AIRFLOW_IMAGE_UID, 0)
    for start in (1, 2):
        lines: list[str] = []
        stack = _start(compose, workdir, lines)
        try:
            assert "seaweedfs-init completed" in lines and "airflow-init completed" in lines
            # the init jobs ran again, over what the first start left
            bucket = "bucket batchpoint exists" in _log(stack, "seaweedfs-init")
            assert bucket is (start == 2)
            passwords = stack.volume("airflow-auth") / "passwords.json"
            assert stack.admin_password() == TRIAL["AIRFLOW_ADMIN_PASSWORD"]
            # written by airflow-init (root), handed to the user that reads and writes it
            assert _owner(passwords) == airflow_user
            assert passwords.stat().st_mode & 0o777 == 0o600
            assert _owner(stack.volume("airflow-auth")) == airflow_user
            logs = stack.volume("airflow-logs")
            assert _owner(logs) == airflow_user
            assert {_owner(p) for p in logs.rglob("*")} <= {airflow_user}
            # the api-server, as AIRFLOW_UID, reads the passwords airflow-init wrote
            assert _login(stack) == 201
            pid = stack.containers[API_SERVER].pid
            assert pid is not None
            server = [p for p in _processes_below(pid) if _uid(p) == AIRFLOW_IMAGE_UID]
            assert server, "no process of the api-server runs as AIRFLOW_UID"
            postgres_data = stack.volume("postgres-data")
            assert _owner(postgres_data)[0] == _uid_of("postgres")
            if start == 2:
                _cli_on_the_stack(stack, capfd)
        finally:
            left = stack.down()
        assert left == [], left


def _cli_on_the_stack(stack: Stack, capfd: pytest.CaptureFixture[str]) -> None:
    """`./dev stack exec SERVICE batchpoint ...`: the CLI on a service's host, as its user,
    with its settings, reaching S3 by the service's name."""
    pointer = stack_exec.record(stack)
    try:
        capfd.readouterr()
        argv = ["--dir", str(stack.workdir), API_SERVER, "batchpoint", "--pipeline", "payments"]
        code = stack_exec.main([*argv, "checkpoints", "list"])
        out, err = capfd.readouterr()
        # no pipeline has run: the CLI listed the bucket through S3 and found none
        assert code == 2 and "no pipeline 'payments' in s3://batchpoint/prod" in err, out + err
        assert "(pipelines: none)" in err
        where = ["--dir", str(stack.workdir)]
        for user, uid in (([], AIRFLOW_IMAGE_UID), (["--user", "root"], 0)):
            assert stack_exec.main([*where, *user, API_SERVER, "id", "-u"]) == 0
            assert capfd.readouterr().out.strip() == str(uid)
    finally:
        pointer.unlink()


def _processes_below(pid: int) -> list[int]:
    from devstack.processes import descendants

    return descendants(pid)


def _uid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _uid_of(name: str) -> int:
    import pwd

    return pwd.getpwnam(name).pw_uid


HAND_OVER = """\
name: bp-kept-test
volumes:
  auth:
services:
  init:
    image: batchpoint/airflow-spark:0.1.0-3.3.2-4.3
    user: "0:0"
    command: [bash, -euc, "echo secret > /opt/airflow/auth/file; HAND_OVER"]
    volumes: [auth:/opt/airflow/auth]
  writer:
    image: batchpoint/airflow-spark:0.1.0-3.3.2-4.3
    user: "50000:0"
    command:
      - bash
      - -euc
      - >-
        echo more >> /opt/airflow/auth/file; id -u > /opt/airflow/auth/who;
        cat /proc/self/cgroup > /opt/airflow/auth/cgroup
    volumes: [auth:/opt/airflow/auth]
    deploy:
      resources:
        limits: {memory: 256m}
    depends_on:
      init: {condition: service_completed_successfully}
  after:
    image: batchpoint/airflow-spark:0.1.0-3.3.2-4.3
    command: [bash, -c, "exec sleep 600"]
    depends_on:
      writer: {condition: service_completed_successfully}
"""


@pytest.mark.timeout(600)
def test_a_volume_is_the_writers_only_once_a_root_init_hands_it_over(
    workdir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "docker-compose.yaml"
    for hand_over in ("true", "chown -R 50000:0 /opt/airflow/auth"):
        path.write_text(HAND_OVER.replace("HAND_OVER", hand_over))
        compose = ComposeFile.load(path, variables={})
        folder = workdir / hand_over.split()[0]
        lines: list[str] = []
        stack = Stack(compose, folder, say=lines.append)
        if hand_over == "true":
            # as in Docker: /opt/airflow/auth is not in the image, so the new volume is
            # root's and the service running as 50000 cannot write into it (up stops
            # what it started when it fails)
            with pytest.raises(StackError, match="writer exited with code 1"):
                stack.up(timeout=300)
            assert "Permission denied" in _log(stack, "writer")
            assert _owner(folder / "volumes" / "auth") == (0, 0)
            continue
        stack.up(timeout=300)
        try:
            auth = folder / "volumes" / "auth"
            assert (auth / "file").read_text() == "secret\nmore\n"
            assert (auth / "who").read_text().strip() == "50000"
            assert _owner(auth / "who") == (50000, 0)
            limited = [line for line in lines if line.startswith("writer: memory")]
            assert limited, lines  # said, whether enforced or not
            if "not enforced" not in limited[0]:
                assert f"{stack.tag}-writer" in (auth / "cgroup").read_text()
        finally:
            assert stack.down() == []
