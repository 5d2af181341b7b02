"""Hosts of the stack's own on this machine: one Linux network namespace per service, each
with an address of its own on a bridge, reachable from the others under the service's
name (`/etc/netns/<namespace>/hosts`, which `ip netns exec` mounts over /etc/hosts), as
the containers of a compose project are on its network.

The bridge holds the subnet's first address, so this machine reaches every host through
it (and through nothing else: `check_route`). The namespaces have no default route, so
nothing in them reaches beyond the bridge. `cut(a, b)` takes the link between two hosts
away in both directions (an `unreachable` route on each side: new connections are refused
with "no route to host" at once, packets of open ones go nowhere) and `restore(a, b)`
gives it back.

Names carry this process's id (`bps<pid>...`), so `sweep_stale()` can remove what a run
killed with SIGKILL left: namespaces, links and /etc/netns folders of a pid that is gone.
Needs root and iproute2.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from batchpoint.errors import BatchpointError

NETNS_ETC = Path("/etc/netns")
PREFIX = "bps"
#: Candidate subnets, the first that overlaps no route of this machine is taken.
CANDIDATES = ipaddress.ip_network("10.213.0.0/16")


class NetworkError(BatchpointError):
    """The stack's network could not be made or changed."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("ip") or "/usr/sbin/ip"
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result


def _routes() -> list[ipaddress.IPv4Network]:
    out = []
    for line in ip("-4", "route", "show", "table", "all").stdout.splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("default", "broadcast", "local", "unreachable", "blackhole"):
            first = line.split()[1] if len(line.split()) > 1 else ""
        with contextlib.suppress(ValueError):
            out.append(ipaddress.ip_network(first, strict=False))
    return [n for n in out if n.prefixlen > 0]


def free_subnet(salt: int) -> ipaddress.IPv4Network:
    """A /24 of CANDIDATES that no route of this machine overlaps (the default route
    aside, which any would)."""
    taken = _routes()
    subnets = list(CANDIDATES.subnets(new_prefix=24))
    for i in range(len(subnets)):
        subnet = subnets[(salt + i) % len(subnets)]
        if not any(subnet.overlaps(t) for t in taken):
            return subnet  # type: ignore[return-value]
    raise NetworkError(f"no free /24 in {CANDIDATES} for the stack's network")


@dataclass(frozen=True)
class Host:
    name: str  # the service
    namespace: str
    address: str
    #: this machine's end of the host's link, on the bridge
    link: str

    def exec_prefix(self) -> list[str]:
        return [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", self.namespace]


class Network:
    """The bridge and the hosts of one stack."""

    def __init__(
        self, names: Sequence[str], aliases: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        """`names`: a host per name (the services); `aliases`: name -> other names it
        also answers to (a compose `hostname`, a scaled service's own name)."""
        self.tag = f"{PREFIX}{os.getpid()}"
        if len(self.tag) > 10:
            raise NetworkError(f"process id {os.getpid()} too long for interface names")
        self.subnet = free_subnet(os.getpid())
        addresses = list(self.subnet.hosts())
        self.gateway = str(addresses[0])
        self.bridge = f"{self.tag}br"
        self.hosts: dict[str, Host] = {
            name: Host(name, f"{self.tag}-{name}", str(addresses[i + 1]), f"{self.tag}v{i}")
            for i, name in enumerate(names)
        }
        self.aliases = dict(aliases or {})
        self._cuts: set[frozenset[str]] = set()

    # -- lifecycle ------------------------------------------------------------------------

    def create(self) -> Network:
        sweep_stale()
        _remove(self.tag)  # a dead stack's, whose pid this process has now
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for host in self.hosts.values():
                self._add(host)
            for host in self.hosts.values():
                self.check_route(host.address)
        except BaseException:
            self.destroy()
            raise
        return self

    def _add(self, host: Host) -> None:
        ip("netns", "add", host.namespace)
        peer = ("peer", "name", "eth0", "netns", host.namespace)
        ip("link", "add", host.link, "type", "veth", *peer)
        ip("link", "set", host.link, "master", self.bridge, "up")
        inside = ["-n", host.namespace]
        ip(*inside, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", "eth0")
        ip(*inside, "link", "set", "eth0", "up")
        ip(*inside, "link", "set", "lo", "up")
        folder = NETNS_ETC / host.namespace
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text(self.hosts_file(host))
        # No name server: every name of the stack is in the hosts file, and a lookup of
        # any other fails at once instead of waiting on a server nobody can reach.
        (folder / "resolv.conf").write_text("# batchpoint stack: names come from hosts\n")

    def hosts_file(self, host: Host) -> str:
        lines = ["127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"]
        for other in self.hosts.values():
            names = [other.name]
            names += [a for a in self.aliases.get(other.name, ()) if a not in names]
            lines.append(f"{other.address}\t{' '.join(names)}\n")
        return "".join(lines)

    def destroy(self) -> None:
        """Remove every namespace, link and file of this network (what is already gone
        is no error)."""
        _remove(self.tag)

    # -- what users of the network need ----------------------------------------------------

    def address(self, name: str) -> str:
        return self.hosts[name].address

    def check_route(self, address: str) -> None:
        """Refuse to go on unless `address` is reached through this stack's bridge: no
        packet for a host may leave this machine."""
        route = ip("-4", "route", "get", address).stdout
        if f" dev {self.bridge} " not in f" {route} ":
            raise NetworkError(
                f"{address} would not be reached through the stack's bridge {self.bridge} "
                f"({route.strip()}): refusing to send anything there"
            )

    # -- faults ---------------------------------------------------------------------------

    def cut(self, a: str, b: str) -> None:
        """Take the link between hosts `a` and `b` away, both ways."""
        for here, there in ((a, b), (b, a)):
            ip(
                "-n",
                self.hosts[here].namespace,
                "route",
                "add",
                "unreachable",
                f"{self.hosts[there].address}/32",
            )
        self._cuts.add(frozenset((a, b)))

    def restore(self, a: str, b: str) -> None:
        for here, there in ((a, b), (b, a)):
            ip(
                "-n",
                self.hosts[here].namespace,
                "route",
                "del",
                "unreachable",
                f"{self.hosts[there].address}/32",
                check=False,
            )
        self._cuts.discard(frozenset((a, b)))

    @property
    def cuts(self) -> list[tuple[str, ...]]:
        return sorted(tuple(sorted(c)) for c in self._cuts)


def _names_with(tag: str) -> tuple[list[str], list[str]]:
    namespaces = [
        line.split()[0]
        for line in ip("netns", "list", check=False).stdout.splitlines()
        if line.split() and line.split()[0].startswith(f"{tag}-")
    ]
    links = re.findall(rf"^\d+: ({re.escape(tag)}[^:@\s]*)", ip("-o", "link").stdout, re.M)
    return namespaces, links


def _remove(tag: str) -> None:
    namespaces, links = _names_with(tag)
    for namespace in namespaces:
        ip("netns", "del", namespace, check=False)
        shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
    # Deleting a namespace does not always take the host's end of its link with it.
    for link in sorted(links, key=lambda n: n.endswith("br")):
        ip("link", "del", link, check=False)
    for folder in NETNS_ETC.glob(f"{tag}-*") if NETNS_ETC.is_dir() else []:
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_tags() -> list[str]:
    """Tags of stacks whose process is gone but whose network is still here."""
    namespaces, links = _names_with(PREFIX)
    pids = set()
    for name in [*namespaces, *links]:
        found = re.match(rf"{PREFIX}(\d+)", name)
        if found:
            pids.add(int(found.group(1)))
    return [f"{PREFIX}{pid}" for pid in sorted(pids) if not _alive(pid)]


def sweep_stale() -> list[str]:
    """Remove the networks of stacks whose process died without removing them."""
    tags = stale_tags()
    for tag in tags:
        _remove(tag)
    return tags


def leftovers(tags: Iterable[str]) -> list[str]:
    """Namespaces, links and /etc/netns folders of `tags` still here."""
    out = []
    for tag in tags:
        namespaces, links = _names_with(tag)
        out += namespaces + links
        out += [str(p) for p in NETNS_ETC.glob(f"{tag}-*")] if NETNS_ETC.is_dir() else []
    return out


__all__ = ["Host", "Network", "NetworkError", "leftovers", "sweep_stale"]
