"""docker-compose.yaml read as `docker compose` reads it, for `./dev stack`: the file users
run is the file the stack starts, so each service's command, entrypoint, environment,
mounts, healthcheck and dependencies come from it, never from a copy kept here.

What is read (the part of the Compose specification the deployment uses):
- interpolation of `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`,
  `${VAR?error}`, `${VAR:+alt}` and `$VAR` in every value, `$$` for a literal `$`, from
  the given variables (`./dev stack`: the shell's environment over the `.env` file beside
  the compose file, as compose does);
- YAML anchors and `<<` merge keys (PyYAML);
- override files merged over it (`docker compose -f a.yaml -f b.yaml`): mappings merge key
  by key (`environment` included), anything else the override gives replaces;
- `command`/`entrypoint` as a list or a shell-split string; `environment` as a mapping
  or a `KEY=VALUE` list; `depends_on` as a list or with conditions; volumes and configs
  in the short and the long syntax; `healthcheck` with CMD, CMD-SHELL or a string;
- how each container runs (devstack.compose_keys): `user`, `secrets`, `deploy` (replicas:
  a host per replica, devstack.replicas; resource limits), `init`, `pull_policy` and
  `profiles` (a service with profiles starts only when one of them is active, or when it
  is named).
Anything else a service says (networks, cap_add, ...) is not used by the stack and is
refused, so that nothing the file asks for is silently dropped.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from batchpoint.errors import ConfigError
from devstack import compose_keys
from devstack.compose_keys import Limits, Secret
from devstack.compose_vars import interpolate, interpolate_all, read_dotenv

STARTED = "service_started"
HEALTHY = "service_healthy"
COMPLETED = "service_completed_successfully"
CONDITIONS = (STARTED, HEALTHY, COMPLETED)

#: The service keys the stack knows what to do with (image and build name the image
#: whose local equivalent runs; ports and expose are reachable at the service's address).
SERVICE_KEYS = frozenset(
    {
        "image",
        "build",
        "command",
        "entrypoint",
        "environment",
        "volumes",
        "configs",
        "depends_on",
        "healthcheck",
        "hostname",
        "restart",
        "ports",
        "expose",
        "user",
        "secrets",
        "deploy",
        "init",
        "pull_policy",
        "profiles",
    }
)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def merge(base: Any, override: Any) -> Any:
    """`override` over `base`: mappings key by key, anything else replaced."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    return override


def duration(value: Any, where: str) -> float:
    """Compose's duration (`1m30s`, `10s`, `500ms`) in seconds."""
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ConfigError(f"{where}: {value!r} is not a duration such as 10s or 1m30s")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _argv(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, list):
        return tuple(_scalar(v) for v in value)
    raise ConfigError(f"{where}: a list or a string, not {type(value).__name__}")


@dataclass(frozen=True)
class HealthCheck:
    test: tuple[str, ...]
    #: CMD-SHELL (or a string): `test` is one command line for /bin/sh -c
    shell: bool
    interval: float = 30.0
    timeout: float = 30.0
    retries: int = 3
    start_period: float = 0.0
    start_interval: float = 5.0

    def argv(self) -> list[str]:
        return ["/bin/sh", "-c", self.test[0]] if self.shell else list(self.test)

    def gap(self, since_start: float) -> float:
        """Seconds between two probes, as Docker spaces them: `start_interval` in the
        start period, `interval` after it (a probe can cost a whole interpreter's start)."""
        return self.start_interval if since_start < self.start_period else self.interval

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> HealthCheck | None:
        if raw.get("disable"):
            return None
        test = raw.get("test")
        if isinstance(test, str):
            argv, shell = (test,), True
        elif isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL", "NONE"):
            if test[0] == "NONE":
                return None
            shell = test[0] == "CMD-SHELL"
            argv = (" ".join(map(str, test[1:])),) if shell else tuple(map(str, test[1:]))
        else:
            raise ConfigError(f"{where}.test: a string or [CMD|CMD-SHELL, ...], got {test!r}")
        timing = {
            key: duration(raw[key], f"{where}.{key}")
            for key in ("interval", "timeout", "start_period", "start_interval")
            if key in raw
        }
        return cls(argv, shell, retries=int(raw.get("retries", 3)), **timing)


@dataclass(frozen=True)
class Mount:
    """A volume, bind mount or config inside a service's filesystem. `source` is a
    folder or file on this machine for a bind mount (resolved against the compose file's
    folder), else the named volume's or config's name."""

    kind: str  # "bind", "volume", "config" or "secret"
    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class Dependency:
    service: str
    condition: str = STARTED


@dataclass(frozen=True)
class Service:
    name: str
    image: str
    entrypoint: tuple[str, ...] | None
    command: tuple[str, ...] | None
    environment: Mapping[str, str]
    mounts: tuple[Mount, ...]
    depends_on: tuple[Dependency, ...]
    healthcheck: HealthCheck | None
    hostname: str
    restart: str
    ports: tuple[str, ...]
    expose: tuple[str, ...]
    #: UID[:GID] its processes run as (None: as the stack, root)
    user: str | None = None
    #: `init: true`: an init process reaps and forwards signals (the stack's supervisor)
    init: bool = False
    pull_policy: str = "missing"
    profiles: tuple[str, ...] = ()
    #: deploy.replicas: this many containers, each a host of its own
    replicas: int = 1
    #: the service a replica belongs to (ComposeFile.scaled), None for the service itself
    replica_of: str | None = None
    #: deploy.resources.limits
    limits: Limits = field(default_factory=Limits)

    @property
    def port_numbers(self) -> set[int]:
        """Every port the service says it serves (container side)."""
        numbers = {int(str(p).split(":")[-1].split("/")[0]) for p in self.ports}
        return numbers | {int(str(p).split("/")[0]) for p in self.expose}


def _environment(raw: Any, where: str, variables: Mapping[str, str]) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, list):
        pairs = [str(item).partition("=") for item in raw]
        return {k: v if sep else variables.get(k, "") for k, sep, v in pairs}
    if isinstance(raw, Mapping):
        return {
            str(k): variables.get(str(k), "") if v is None else _scalar(v) for k, v in raw.items()
        }
    raise ConfigError(f"{where}: a mapping or a KEY=VALUE list")


def _mounts(raw: Mapping[str, Any], where: str, folder: Path) -> tuple[Mount, ...]:
    mounts = []
    for item in raw.get("volumes") or []:
        if isinstance(item, str):
            source, _, rest = item.partition(":")
            target, _, mode = rest.partition(":")
            read_only = "ro" in mode.split(",")
        else:
            source, target = item.get("source", ""), item["target"]
            read_only = bool(item.get("read_only", False))
        if not target.startswith("/"):
            raise ConfigError(f"{where}.volumes: {item!r} has no absolute target")
        if source.startswith((".", "/", "~")):
            path = (folder / os.path.expanduser(source)).resolve()
            mounts.append(Mount("bind", str(path), target, read_only))
        else:
            mounts.append(Mount("volume", source, target, read_only))
    for item in raw.get("configs") or []:
        name = item if isinstance(item, str) else item["source"]
        target = f"/{name}" if isinstance(item, str) else item.get("target", f"/{name}")
        mounts.append(Mount("config", name, target, True))
    for name, target in compose_keys.secret_mounts(raw.get("secrets"), f"{where}.secrets"):
        mounts.append(Mount("secret", name, target, True))
    return tuple(mounts)


def _dependencies(raw: Any, where: str) -> tuple[Dependency, ...]:
    if raw is None:
        return ()
    if isinstance(raw, list):
        return tuple(Dependency(str(name)) for name in raw)
    out = []
    for name, spec in raw.items():
        condition = (spec or {}).get("condition", STARTED)
        if condition not in CONDITIONS:
            raise ConfigError(f"{where}.{name}: unknown condition {condition!r}")
        out.append(Dependency(str(name), condition))
    return tuple(out)


@dataclass(frozen=True)
class ComposeFile:
    path: Path
    name: str
    services: Mapping[str, Service]
    volumes: tuple[str, ...]
    #: config name -> its content
    configs: Mapping[str, str]
    secrets: Mapping[str, Secret] = field(default_factory=dict)
    #: the active profiles (`--profile`, COMPOSE_PROFILES)
    active_profiles: frozenset[str] = frozenset()

    @classmethod
    def load(
        cls,
        path: Path | str,
        variables: Mapping[str, str] | None = None,
        overrides: Iterable[Path | str] = (),
        profiles: Iterable[str] = (),
    ) -> ComposeFile:
        """The compose file at `path` (with `overrides` merged over it), interpolated
        with `variables` (default: the `.env` file beside it, then this environment),
        with `profiles` and COMPOSE_PROFILES' active."""
        path = Path(path).resolve()
        if variables is None:
            variables = {**read_dotenv(path.parent / ".env"), **os.environ}
        document = _read(path)
        for extra in overrides:
            document = merge(document, _read(Path(extra)))
        document = interpolate_all(document, variables, path.name)
        active = {*profiles, *filter(None, variables.get("COMPOSE_PROFILES", "").split(","))}
        return cls.parse(path, document, variables, frozenset(active))

    @classmethod
    def parse(
        cls,
        path: Path,
        document: Mapping[str, Any],
        variables: Mapping[str, str],
        active_profiles: frozenset[str] = frozenset(),
    ) -> ComposeFile:
        services = {}
        for name, raw in (document.get("services") or {}).items():
            where = f"{path.name}: services.{name}"
            unknown = sorted(k for k in raw if k not in SERVICE_KEYS)
            if unknown:
                raise ConfigError(f"{where}: {', '.join(unknown)} not supported by ./dev stack")
            if "image" not in raw:
                raise ConfigError(f"{where}: no image")
            health = raw.get("healthcheck")
            replicas, limits = compose_keys.deploy(raw.get("deploy"), f"{where}.deploy")
            services[name] = Service(
                name=name,
                image=str(raw["image"]),
                entrypoint=_argv(raw.get("entrypoint"), f"{where}.entrypoint"),
                command=_argv(raw.get("command"), f"{where}.command"),
                environment=_environment(raw.get("environment"), where, variables),
                mounts=_mounts(raw, where, path.parent),
                depends_on=_dependencies(raw.get("depends_on"), f"{where}.depends_on"),
                healthcheck=HealthCheck.parse(health, f"{where}.healthcheck") if health else None,
                hostname=str(raw.get("hostname") or name),
                restart=str(raw.get("restart") or "no"),
                ports=tuple(map(str, raw.get("ports") or ())),
                expose=tuple(map(str, raw.get("expose") or ())),
                user=compose_keys.user(raw.get("user"), f"{where}.user"),
                init=bool(raw.get("init", False)),
                pull_policy=compose_keys.pull_policy(raw, where),
                profiles=compose_keys.profiles(raw.get("profiles"), where),
                replicas=replicas,
                limits=limits,
            )
            if services[name].replicas > 1 and "hostname" in raw:
                raise ConfigError(f"{where}: replicas of one service cannot share a hostname")
        configs = {}
        for name, raw in (document.get("configs") or {}).items():
            if "content" not in raw:
                raise ConfigError(f"{path.name}: configs.{name}: only `content` configs are read")
            configs[str(name)] = str(raw["content"])
        compose = cls(
            path=path,
            name=str(document.get("name") or path.parent.name),
            services=services,
            volumes=tuple(document.get("volumes") or ()),
            configs=configs,
            secrets=compose_keys.top_level_secrets(document.get("secrets"), path.parent, variables),
            active_profiles=active_profiles,
        )
        compose._check()
        return compose

    def _check(self) -> None:
        for service in self.services.values():
            for dependency in service.depends_on:
                if dependency.service not in self.services:
                    raise ConfigError(
                        f"service {service.name} depends on {dependency.service}, "
                        "which the file does not define"
                    )
            for mount in service.mounts:
                if mount.kind == "volume" and mount.source not in self.volumes:
                    raise ConfigError(f"service {service.name}: volume {mount.source} undeclared")
                if mount.kind == "config" and mount.source not in self.configs:
                    raise ConfigError(f"service {service.name}: config {mount.source} undeclared")
                if mount.kind == "secret" and mount.source not in self.secrets:
                    raise ConfigError(f"service {service.name}: secret {mount.source} undeclared")
        self.start_order()  # raises on a cycle

    def scaled(self) -> ComposeFile:
        """The file with each scaled service made one service per replica
        (devstack.replicas.scaled)."""
        from devstack.replicas import scaled

        return scaled(self)

    def one_shot(self, name: str) -> bool:
        """A service others wait on to finish (compose's service_completed_successfully):
        it runs to its end instead of being kept up."""
        return any(
            d.service == name and d.condition == COMPLETED
            for s in self.services.values()
            for d in s.depends_on
        )

    def start_order(self, wanted: Iterable[str] | None = None) -> list[str]:
        """`wanted` (default every service of no profile or an active one) and what they
        depend on, each after its dependencies (in the file's order where free)."""
        order: list[str] = []
        visiting: set[str] = set()

        def visit(name: str) -> None:
            if name in order:
                return
            if name in visiting:
                raise ConfigError(f"a dependency cycle through service {name}")
            visiting.add(name)
            for dependency in self.services[name].depends_on:
                visit(dependency.service)
            visiting.discard(name)
            order.append(name)

        for name in self.enabled() if wanted is None else wanted:
            replicas = [n for n, s in self.services.items() if s.replica_of == name]
            if name not in self.services and not replicas:
                raise ConfigError(f"no service {name} in {self.path.name}")
            for each in replicas or [name]:
                visit(each)
        return order

    def enabled(self) -> list[str]:
        """The services `docker compose up` starts: those without profiles, and those with
        an active one."""
        return [
            name
            for name, service in self.services.items()
            if not service.profiles or self.active_profiles.intersection(service.profiles)
        ]


def _read(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: not a compose file (no mapping at the top)")
    return document


__all__ = [
    "COMPLETED",
    "HEALTHY",
    "STARTED",
    "ComposeFile",
    "Dependency",
    "HealthCheck",
    "Mount",
    "Service",
    "duration",
    "interpolate",
    "merge",
    "read_dotenv",
]
