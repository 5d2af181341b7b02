"""Compose's `deploy.replicas` on `./dev stack`: a service of N replicas is N hosts,
`NAME-1` to `NAME-N`, as compose makes N containers (`--scale NAME=N` sets the same)."""

from __future__ import annotations

from dataclasses import replace

from devstack.compose import ComposeFile, Service


def scaled(compose: ComposeFile) -> ComposeFile:
    """The file with each service of `deploy.replicas: N` (N > 1) made N services,
    `NAME-1` to `NAME-N`, as compose makes N containers: each is a host of its own,
    what depended on the service depends on every replica, and `NAME` itself answers
    at the first (compose's DNS answers at any)."""
    if all(s.replicas == 1 for s in compose.services.values()):
        return compose

    def names(name: str) -> list[str]:
        count = compose.services[name].replicas
        return [name] if count == 1 else [f"{name}-{i}" for i in range(1, count + 1)]

    services: dict[str, Service] = {}
    for name, service in compose.services.items():
        depends_on = tuple(
            replace(d, service=each) for d in service.depends_on for each in names(d.service)
        )
        for each in names(name):
            services[each] = replace(
                service,
                name=each,
                hostname=service.hostname if each == name else each,
                depends_on=depends_on,
                replicas=1,
                replica_of=None if each == name else name,
            )
    return replace(compose, services=services)


def aliases(compose: ComposeFile) -> dict[str, tuple[str, ...]]:
    """Service -> the other names its host answers to: its hostname, and a scaled
    service's own name at its first replica."""
    out: dict[str, list[str]] = {}
    for name, service in compose.services.items():
        out.setdefault(name, [])
        if service.hostname != name:
            out[name].append(service.hostname)
        if service.replica_of and name == f"{service.replica_of}-1":
            out[name].append(service.replica_of)
    return {name: tuple(names) for name, names in out.items()}


__all__ = ["aliases", "scaled"]
