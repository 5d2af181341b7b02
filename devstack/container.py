"""One service of the compose file running on its host, as its container would: the local
equivalent of its image, its command and environment from the file, its volumes and
configs, a hostname and a /tmp of its own, and its network namespace.

- Filesystem: a folder per container stands for the image's own filesystem (its home,
  AIRFLOW_HOME, PGDATA's parent, ...); a named volume is a folder shared by the services
  that mount it, a config a file, a bind mount the project's folder. Every container
  path the service's command, entrypoint, environment or healthcheck names under one of
  these is rewritten to its local place (and the mounts are links inside the folder, so
  paths a program derives itself, such as $AIRFLOW_HOME/dags, lead there too). The
  image's own executables (its Python, its spark-submit) are the local ones.
- Processes: started under `unshare --uts --mount` in the host's namespace, with the
  hostname set and the container's folder mounted on /tmp (so programs that put sockets
  or scratch files in /tmp, as SeaweedFS and the JVM do, cannot meet another host's),
  and each config and `:ro` mount bound read-only (a service that writes to one fails as
  it would in its container, root or not).
- Users: a service with `user: UID[:GID]` runs as that user (setpriv, once the mounts are
  made), its healthchecks too; a named volume is made as Docker makes it at its first
  mount: with the owner and mode of the image's folder at that path when the image has
  one (Docker copies it), else root's, 0755. So a service that writes into a volume
  nobody prepared for it fails here as in Docker. Without `user` a service runs as root.
- Secrets: each is a read-only file at /run/secrets/NAME (or the target given).
- Limits: `deploy.resources.limits` through a control group (devstack.limits) that the
  service's processes join first.
  Every process carries the container's marker variable, so stop and kill reach all of
  them, re-parented ones included, as the end of a container does.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import IO

from batchpoint.errors import ConfigError
from devstack.compose import ComposeFile, Service
from devstack.images import LocalImage
from devstack.limits import ControlGroup, control_group
from devstack.netns import Host
from devstack.processes import live_where, start_group

MARKER = "BATCHPOINT_STACK_CONTAINER"
STOP_GRACE = 10.0  # compose's default stop_grace_period

# A container path: it starts a value or follows a space, '=' or a quote.
_PATH = re.compile(r"(?:^|(?<=[\s='\"]))(/[^\s'\",;]*)")
# Runs inside the host: its own hostname and /tmp, each read-only mount (the paths up to
# "--") bound read-only onto itself, then the service's command (as its user: a setpriv
# prefix).
_ENTER = (
    'mnt="$2"; "$1" "$0" && "$mnt" --bind "$3" /tmp || exit 125; shift 3; '
    'while [ "$1" != "--" ]; do '
    '"$mnt" --bind "$1" "$1" && "$mnt" -o remount,bind,ro "$1" || exit 125; shift; '
    'done; shift; exec "$@"'
)
# Joins the control groups (the cgroup.procs files up to "--"), then runs the rest: before
# `ip netns exec`, whose fresh /sys has no cgroup hierarchy in it.
_JOIN = 'while [ "$1" != "--" ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


def marked(value: str) -> list[int]:
    """The live processes whose environment carries MARKER=`value`."""
    needle = f"{MARKER}={value}".encode()
    return live_where(lambda pid: needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))


def namespace_id(namespace: str) -> tuple[int, int] | None:
    """The identity of network namespace `namespace` (an `ip netns` name), None if gone."""
    try:
        found = os.stat(f"/run/netns/{namespace}")
    except OSError:
        return None
    return found.st_dev, found.st_ino


def in_namespaces(ids: Collection[tuple[int, int]]) -> list[int]:
    """The live processes in any of the network namespaces `ids`: every process of those
    hosts, as a container's cgroup holds them. The environment marker alone misses some:
    a process that sets its title (Airflow's executor workers, its log server) writes over
    the environment /proc shows, and one such worker kept the killed scheduler's database
    connection, and its row locks, open."""

    def on_host(pid: int) -> bool:
        net = os.stat(f"/proc/{pid}/ns/net")
        return (net.st_dev, net.st_ino) in ids

    return live_where(on_host)


class Container:
    def __init__(
        self,
        service: Service,
        compose: ComposeFile,
        image: LocalImage,
        host: Host,
        workdir: Path,
        tag: str,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.service = service
        self.compose = compose
        self.image = image
        self.host = host
        self.workdir = workdir
        self.rootfs = workdir / "hosts" / service.name
        self.log_path = workdir / "logs" / f"{service.name}.log"
        self.marker = f"{tag}/{service.name}"
        #: extra environment over the file's (a redeploy's change)
        self.overrides = dict(environment or {})
        self.mounts: dict[str, Path] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.started_at: float | None = None
        self.starts = 0
        self.cgroup: ControlGroup | None = None

    @property
    def name(self) -> str:
        return self.service.name

    @property
    def user(self) -> tuple[int, int] | None:
        """(uid, gid) of `user:` (a UID alone: group 0, as Docker gives a user the image
        does not know), None to run as root."""
        if self.service.user is None:
            return None
        uid, _, gid = self.service.user.partition(":")
        return int(uid), int(gid or 0)

    # -- the filesystem -------------------------------------------------------------------

    def prepare(self) -> None:
        """Make the container's folder, volumes, configs and mount links (idempotent)."""
        self.rootfs.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.rootfs / "tmp"
        tmp.mkdir(exist_ok=True)
        tmp.chmod(0o1777)
        for root in self.image.roots:
            folder = self.rootfs / root.lstrip("/")
            if not folder.exists():
                folder.mkdir(parents=True)
                self._own_as_image(folder, root)
        if self.cgroup is None and self.service.limits:
            self.cgroup = control_group(self.marker.replace("/", "-"), self.service.limits)
        for mount in self.service.mounts:
            if mount.kind == "bind":
                local = Path(mount.source)
                if not local.exists():
                    raise ConfigError(f"service {self.name}: bind mount {local} does not exist")
            elif mount.kind == "volume":
                local = self.workdir / "volumes" / mount.source
                if not local.exists():  # Docker's first mount of a new volume
                    local.mkdir(parents=True)
                    self._own_as_image(local, mount.target)
            elif mount.kind == "secret":
                local = self._secret_file(mount.source)
            else:
                local = self.workdir / "configs" / mount.source
                local.parent.mkdir(parents=True, exist_ok=True)
                if not local.exists():
                    local.write_text(self.compose.configs[mount.source])
                    local.chmod(0o444)
            self.mounts[mount.target] = local
            link = self.rootfs / mount.target.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                if link.is_dir():
                    link.rmdir()  # made above as one of the image's roots
                link.symlink_to(local)

    def _own_as_image(self, local: Path, target: str) -> None:
        """`local` owned as the image's folder at `target` is (root's, 0755, when the
        image has none there: what Docker gives a new volume at such a path)."""
        uid, gid, mode = self.image.owners.get(target, (0, 0, 0o755))
        os.chown(local, uid, gid)
        local.chmod(mode)

    def _secret_file(self, name: str) -> Path:
        secret = self.compose.secrets[name]
        if secret.file is not None:
            if not secret.file.is_file():
                raise ConfigError(f"service {self.name}: secret file {secret.file} is missing")
            return secret.file
        local = self.workdir / "secrets" / name
        local.parent.mkdir(parents=True, exist_ok=True)
        if not local.exists():
            local.write_text(secret.content or "")
            local.chmod(0o444)
        return local

    def limit_notes(self) -> list[str]:
        """Its resource limits, each enforced (and how) or not (and why)."""
        group = self.cgroup
        if group is None:
            return []
        return [f"{self.name}: {line}" for line in (*group.enforced, *group.not_enforced)]

    def translate(self, value: str) -> str:
        """`value` with every container path in it made local."""
        roots = sorted({*self.mounts, *self.image.roots, "/tmp"}, key=len, reverse=True)

        def local(match: re.Match[str]) -> str:
            path = match.group(1)
            if path in self.image.executables:
                return self.image.executables[path]
            for root in roots:
                if path == root or path.startswith(root.rstrip("/") + "/"):
                    if root == "/tmp":
                        return path  # the container's own /tmp is mounted there
                    if root in self.mounts:
                        return str(self.mounts[root]) + path[len(root) :]
                    return str(self.rootfs) + path
            return path

        return _PATH.sub(local, value)

    # -- what runs ------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": self.image.path(),
            "LANG": "C.UTF-8",
            "HOSTNAME": self.service.hostname,
        }
        user = self.user
        login = self.image.login(user[0]) if user and user[0] != 0 else None
        if login is not None:  # getpass and the JVM look the user up by name
            env["USER"] = env["LOGNAME"] = login
        for source in (self.image.env, self.service.environment, self.overrides):
            env.update({k: self.translate(v) for k, v in source.items()})
        # Spark binds where its host is reachable; as in a container, that is the one
        # address of the host (the JVM would otherwise look for one itself).
        env["SPARK_LOCAL_IP"] = self.host.address
        env[MARKER] = self.marker
        return env

    def _resolve(self, argv: list[str], env: Mapping[str, str]) -> list[str]:
        argv = [self.translate(a) for a in argv]
        if argv and "/" not in argv[0]:
            found = shutil.which(argv[0], path=env["PATH"])
            if found is None:
                raise ConfigError(
                    f"service {self.name}: {argv[0]} is not in the local {self.image.image}"
                )
            argv[0] = found
        return argv

    def command(self) -> list[str]:
        return self._resolve(self.image.argv(self.service), self.environment())

    @property
    def cwd(self) -> Path:
        """Where its processes start: the image's working directory, else its folder."""
        workdir = self.image.workdir
        return Path(self.translate(workdir)) if workdir else self.rootfs

    def as_user(self) -> list[str]:
        """The prefix that runs a command as the service's user (none for root)."""
        user = self.user
        if user is None:
            return []
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        return [setpriv, f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "--"]

    def read_only_paths(self) -> list[str]:
        """The local places of its read-only mounts (every config and secret, `:ro`
        volumes)."""
        return sorted({str(self.mounts[m.target]) for m in self.service.mounts if m.read_only})

    def inside(self, argv: list[str], *, as_root: bool = False) -> list[str]:
        """`argv` run on this container's host, with its hostname and /tmp, and its
        read-only mounts read-only there (for root too, as in a container), as the
        service's user (`as_root`: as root, as `docker compose exec --user root`)."""
        tools = [shutil.which(t) or f"/usr/bin/{t}" for t in ("unshare", "hostname", "mount")]
        procs = [str(p) for p in self.cgroup.procs] if self.cgroup else []
        join = ["/bin/sh", "-c", _JOIN, "join", *procs, "--"] if procs else []
        return [
            *join,
            *self.host.exec_prefix(),
            tools[0],
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            _ENTER,
            self.service.hostname,
            tools[1],
            tools[2],
            str(self.rootfs / "tmp"),
            *self.read_only_paths(),
            "--",
            *([] if as_root else self.as_user()),
            *argv,
        ]

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self.running():
            return
        self.prepare()
        env = self.environment()
        argv = self.command()
        if self._log is None:
            self._log = self.log_path.open("ab")
        self.starts += 1
        self._log.write(f"\n=== start {self.starts}: {' '.join(argv)}\n".encode())
        self._log.flush()
        self._process = start_group(self.inside(argv), log=self._log, cwd=self.cwd, env=env)
        self.started_at = time.monotonic()

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self._process is None else self._process.poll()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def terminate(self) -> None:
        """SIGTERM to the service (its supervisor passes it to every process of it)."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)

    def stop(self, grace: float = STOP_GRACE, deadline: float | None = None) -> None:
        """SIGTERM, then SIGKILL to whatever of it is left after `grace` seconds (or at
        `deadline`, a time.monotonic() value)."""
        self.terminate()
        deadline = time.monotonic() + grace if deadline is None else deadline
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(max(0.0, deadline - time.monotonic()))
        while self.members() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.kill()

    def members(self) -> list[int]:
        """Every live process of the container: marked, or on its host."""
        netns = namespace_id(self.host.namespace)
        on_host = in_namespaces({netns}) if netns is not None else []
        return sorted(set(marked(self.marker)) | set(on_host))

    def kill(self) -> None:
        """SIGKILL to every process of the container, as when its machine dies."""
        for _ in range(50):
            pids = self.members()
            if self._process is not None and self._process.poll() is None:
                pids.append(self._process.pid)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        if self._process is not None:
            self._process.wait()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    # -- health ---------------------------------------------------------------------------

    def check_health(self) -> tuple[bool, str]:
        """One run of the service's healthcheck on its host: (passed, its output)."""
        check = self.service.healthcheck
        if check is None:
            return self.running(), ""
        env = self.environment()
        # Its own process group, all of it killed at the timeout as Docker kills a check:
        # a check left running past its timeout (a slow `celery inspect ping` under load)
        # piles up beside the next ones and makes the load that slows them.
        probe = subprocess.Popen(
            self.inside(self._resolve(check.argv(), env)),
            env=env,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = probe.communicate(timeout=check.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(probe.pid, signal.SIGKILL)
            probe.communicate()
            return False, f"timed out after {check.timeout:.0f}s"
        output = out.decode(errors="replace").strip()
        return probe.returncode == 0, output[-500:]

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


__all__ = ["MARKER", "Container", "marked"]
