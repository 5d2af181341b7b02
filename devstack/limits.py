"""A service's `deploy.resources.limits` enforced as Docker enforces them: a control group
per container that its processes (and its healthchecks, as `docker exec` ones) join
before they run the service's command, with a memory limit (the kernel's OOM killer
ends the container's processes past it) and a CPU quota (`cpus: 1.5` is 150 ms of CPU
each 100 ms period).

cgroup v2 (`/sys/fs/cgroup/cgroup.controllers`) with `memory.max` and `cpu.max`, else
the v1 `memory` and `cpu` hierarchies with `memory.limit_in_bytes` and
`cpu.cfs_quota_us`. A limit that cannot be set here (no writable hierarchy, the
controller not enabled) is not dropped silently: `ControlGroup.not_enforced` says which,
and why, and the stack says it when it starts.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from devstack.compose_keys import Limits

CGROUP = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # Docker's CPU period


@dataclass
class ControlGroup:
    name: str
    limits: Limits
    #: the cgroup.procs files a process of the container writes its pid into
    procs: list[Path] = field(default_factory=list)
    #: what the container asked for and this machine does not enforce, with why
    not_enforced: list[str] = field(default_factory=list)
    #: what is enforced, and how (for the stack's start-up lines)
    enforced: list[str] = field(default_factory=list)

    def remove(self) -> None:
        """The groups, once their processes are gone (a busy one stays: the kernel says
        so, and the next start over it reuses it)."""
        for procs in self.procs:
            with contextlib.suppress(OSError):
                procs.parent.rmdir()


def _settings(limits: Limits) -> dict[str, tuple[str, str, str]]:
    """controller -> (what was asked, its cgroup v2 file, the value written there)."""
    out = {}
    if limits.memory is not None:
        out["memory"] = (f"memory {limits.memory} bytes", "memory.max", str(limits.memory))
    if limits.cpus is not None:
        quota = max(1000, int(limits.cpus * PERIOD_US))
        out["cpu"] = (f"cpus {limits.cpus:g}", "cpu.max", f"{quota} {PERIOD_US}")
    return out


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def control_group(name: str, limits: Limits, root: Path = CGROUP) -> ControlGroup:
    """The container's group named `name`, made with `limits` (none: no group)."""
    group = ControlGroup(name, limits)
    v2 = (root / "cgroup.controllers").is_file()
    for controller, (asked, v2_file, v2_value) in _settings(limits).items():
        folder = root / name if v2 else root / controller / name
        try:
            if v2:
                with contextlib.suppress(OSError):  # enabled already, or refused below
                    _write(root / "cgroup.subtree_control", f"+{controller}")
                folder.mkdir(exist_ok=True)
                _write(folder / v2_file, v2_value)
            else:
                folder.mkdir(exist_ok=True)
                _write_v1(folder, controller, v2_value)
        except OSError as exc:
            where = "cgroup v2" if v2 else f"cgroup v1 {controller}"
            group.not_enforced.append(f"{asked} not enforced ({where} at {folder}: {exc})")
            continue
        group.enforced.append(f"{asked} ({'cgroup v2' if v2 else 'cgroup v1'})")
        if folder / "cgroup.procs" not in group.procs:
            group.procs.append(folder / "cgroup.procs")
    return group


def _write_v1(folder: Path, controller: str, v2_value: str) -> None:
    if controller == "memory":
        _write(folder / "memory.limit_in_bytes", v2_value)
    else:
        quota, period = v2_value.split()
        _write(folder / "cpu.cfs_period_us", period)
        _write(folder / "cpu.cfs_quota_us", quota)


__all__ = ["CGROUP", "ControlGroup", "control_group"]
