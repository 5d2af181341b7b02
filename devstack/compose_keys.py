"""The service keys of a compose file that say how a container runs rather than what it
runs, read as `docker compose` reads them: `user`, `secrets` (and the file's top-level
`secrets`), `deploy` (`replicas`, `resources.limits`), `init`, `pull_policy` and
`profiles`. devstack.compose puts them on each Service; devstack.container honours them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchpoint.errors import ConfigError

PULL_POLICIES = frozenset(
    {"always", "never", "missing", "if_not_present", "build", "daily", "weekly"}
)
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*([bkmg]?)b?", re.IGNORECASE)
_MEMORY_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_USER = re.compile(r"\d+(?::\d+)?")


@dataclass(frozen=True)
class Limits:
    """`deploy.resources.limits`: CPUs (a fraction of one allowed) and memory in bytes."""

    cpus: float | None = None
    memory: int | None = None

    def __bool__(self) -> bool:
        return self.cpus is not None or self.memory is not None


@dataclass(frozen=True)
class Secret:
    """A top-level secret: a file on this machine, or the value of a variable (compose's
    `environment:` secret), which a service sees as the file /run/secrets/NAME."""

    name: str
    file: Path | None = None
    content: str | None = None


def memory(value: Any, where: str) -> int:
    """Compose's byte value (`512m`, `4g`, `1.5gb`, `1048576`) in bytes."""
    match = _MEMORY.fullmatch(str(value).strip())
    if match is None:
        raise ConfigError(f"{where}: {value!r} is not a size such as 512m or 4g")
    return int(float(match[1]) * _MEMORY_UNITS[match[2].lower()])


def user(value: Any, where: str) -> str | None:
    """`user` as `UID` or `UID:GID` (numbers: the stack has no image /etc/passwd to look
    a name up in), None when not given."""
    if value is None:
        return None
    text = str(value)
    if not _USER.fullmatch(text):
        raise ConfigError(f"{where}: {text!r}: ./dev stack runs a numeric UID or UID:GID")
    return text


def deploy(raw: Any, where: str) -> tuple[int, Limits]:
    """`deploy`: its `replicas` (default 1) and `resources.limits`. Reservations, restart
    and placement policies are Swarm's and are refused rather than dropped."""
    if raw is None:
        return 1, Limits()
    _only(raw, {"replicas", "resources"}, where)
    try:
        replicas = int(raw.get("replicas", 1))
    except (TypeError, ValueError):
        raise ConfigError(f"{where}.replicas: a whole number, not {raw['replicas']!r}") from None
    if replicas < 1:
        raise ConfigError(f"{where}.replicas: at least 1 (a service of none is left out here)")
    resources = raw.get("resources") or {}
    _only(resources, {"limits"}, f"{where}.resources")
    limits = resources.get("limits") or {}
    _only(limits, {"cpus", "memory"}, f"{where}.resources.limits")
    cpus = float(limits["cpus"]) if "cpus" in limits else None
    if cpus is not None and cpus <= 0:
        raise ConfigError(f"{where}.resources.limits.cpus: {cpus} is not a positive number")
    size = (
        memory(limits["memory"], f"{where}.resources.limits.memory") if "memory" in limits else None
    )
    return replicas, Limits(cpus, size)


def pull_policy(raw: Mapping[str, Any], where: str) -> str:
    policy = str(raw.get("pull_policy") or "missing")
    if policy not in PULL_POLICIES:
        raise ConfigError(f"{where}.pull_policy: {policy!r} is not one of {sorted(PULL_POLICIES)}")
    if policy == "build" and "build" not in raw:
        raise ConfigError(f"{where}: pull_policy build without a `build` section")
    return policy


def profiles(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.profiles: a list of names")
    return tuple(map(str, raw))


def secret_mounts(raw: Any, where: str) -> list[tuple[str, str]]:
    """A service's `secrets` (short or long syntax) as (secret, target) pairs: a target
    is /run/secrets/NAME unless an absolute one is given, as compose places them."""
    out = []
    for item in raw or []:
        if isinstance(item, str):
            name, target = item, item
        else:
            name = str(item["source"])
            target = str(item.get("target") or name)
        out.append((name, target if target.startswith("/") else f"/run/secrets/{target}"))
    return out


def top_level_secrets(
    raw: Mapping[str, Any] | None, folder: Path, variables: Mapping[str, str]
) -> dict[str, Secret]:
    secrets = {}
    for name, spec in (raw or {}).items():
        where = f"secrets.{name}"
        spec = spec or {}
        if "file" in spec:
            path = (folder / str(spec["file"])).resolve()
            secrets[str(name)] = Secret(str(name), file=path)
        elif "environment" in spec:
            variable = str(spec["environment"])
            if variable not in variables:
                raise ConfigError(f"{where}: variable {variable} is not set")
            secrets[str(name)] = Secret(str(name), content=variables[variable])
        else:
            raise ConfigError(f"{where}: only `file` and `environment` secrets are read")
    return secrets


def _only(raw: Any, allowed: set[str], where: str) -> None:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: a mapping")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"{where}: {', '.join(unknown)} not supported by ./dev stack")


__all__ = [
    "Limits",
    "Secret",
    "deploy",
    "memory",
    "profiles",
    "pull_policy",
    "secret_mounts",
    "top_level_secrets",
    "user",
]
