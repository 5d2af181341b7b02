"""The services of docker-compose.yaml started without Docker, each on a host of its own
(devstack.netns), as `docker compose up` would start them: in the order their
`depends_on` conditions allow (started, healthy, completed successfully), one-shot
services run to their end, long-running ones restarted by their `restart` policy when
they die. Faults are operations on it, each recorded with its time: stop, start, kill -9
and restart a service, recreate it with a changed environment (a deploy), and cut and
restore the link between two hosts.

Every process is started by one long-lived thread of the stack's own: the servers die
with the thread that started them (devstack.processes), so no short-lived
caller may start one. Health checks run while the stack comes up, spaced as Docker
spaces them (start_interval in the start period, interval after), until a service first
passes, which gates what depends on it; afterwards only `wait_healthy` runs them.
"""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from devstack.compose import COMPLETED, HEALTHY, ComposeFile
from devstack.container import STOP_GRACE, Container, in_namespaces, marked, namespace_id
from devstack.images import LocalImage, local_image
from devstack.netns import Network, leftovers
from devstack.processes import live_where
from devstack.replicas import aliases
from devstack.stack_state import ServiceState, StackError, StackEvent

T = TypeVar("T")

RESTART_BACKOFF_MAX = 30.0


class Stack:
    def __init__(
        self,
        compose: ComposeFile,
        workdir: Path,
        services: Iterable[str] | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        if str(Path(workdir).resolve()).startswith("/tmp/"):
            raise StackError(
                f"{workdir}: the stack's folder cannot be under /tmp, which every host "
                "gets a private one of (use /var/tmp or the project's folder)"
            )
        # a scaled service's replicas are services of their own here, each on its host
        compose = compose.scaled()
        self.compose = compose
        self.workdir = Path(workdir).resolve()
        self.say = say
        self.order = compose.start_order(services)
        images: dict[str, LocalImage] = {}
        for name in self.order:
            image = compose.services[name].image
            if image not in images:
                images[image] = local_image(image)
        self.images = images
        self.network = Network(self.order, aliases(compose))
        self.tag = self.network.tag
        self.containers = {
            name: Container(
                compose.services[name],
                compose,
                images[compose.services[name].image],
                self.network.hosts[name],
                self.workdir,
                self.tag,
            )
            for name in self.order
        }
        self.state = {name: ServiceState() for name in self.order}
        self.events: list[StackEvent] = []
        self.up_at: float | None = None
        self.down_at: float | None = None
        self._calls: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- the thread that owns every process ------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                item = self._calls.get(timeout=0.5)
            except queue.Empty:
                item = ...  # type: ignore[assignment]
            if item is None:
                return
            if item is not ...:
                fn, future = item  # type: ignore[misc]
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the caller
                    future.set_exception(exc)
            self._apply_restart_policy()

    def _call(self, fn: Callable[[], T]) -> T:
        if self._thread is None or not self._thread.is_alive():
            raise StackError("the stack is not running")
        future: Future[T] = Future()
        self._calls.put((fn, future))
        return future.result()

    def _apply_restart_policy(self) -> None:
        now = time.monotonic()
        for name, container in self.containers.items():
            state = self.state[name]
            policy = container.service.restart
            if (
                self.compose.one_shot(name)
                or state.stopped
                or container.starts == 0
                or container.running()
                or policy == "no"
                or (policy == "on-failure" and container.exit_code == 0)
            ):
                continue
            if state.restart_due is None:
                ran = now - (container.started_at or now)
                state.crashes = 1 if ran > 10 else state.crashes + 1
                delay = min(RESTART_BACKOFF_MAX, 0.5 * 2 ** (state.crashes - 1))
                state.restart_due = now + delay
                self._event("exited", name, f"code {container.exit_code}; restart: {policy}")
            elif now >= state.restart_due:
                state.restart_due = None
                self._start(name)
                self._event("restarted", name, f"by its restart policy ({policy})")

    def _start(self, name: str) -> None:
        container = self.containers[name]
        container.start()
        state = self.state[name]
        state.started_at, state.healthy_at, state.completed = time.monotonic(), None, False
        state.restart_due = None

    def _event(self, kind: str, target: str, detail: str = "") -> StackEvent:
        event = StackEvent(time.time(), kind, target, detail)
        with self._lock:
            self.events.append(event)
        return event

    # -- up and down ---------------------------------------------------------------------

    def up(self, timeout: float = 1200.0) -> Stack:
        """Start every service in dependency order and wait until each long-running one
        is healthy (or started, without a healthcheck) and each one-shot has succeeded."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)  # postgres runs as its own user and must get through
        for name in self.order:
            self.containers[name].prepare()
            for line in self.containers[name].limit_notes():
                self.say(line)
        self.network.create()
        self._thread = threading.Thread(target=self._run, name="batchpoint-stack", daemon=True)
        self._thread.start()
        started = time.monotonic()
        try:
            self._bring_up(started + timeout)
        except BaseException:
            self.down()
            raise
        self.up_at = time.time()
        self.say(f"up in {time.monotonic() - started:.0f}s")
        return self

    def _ready(self, name: str, condition: str) -> bool:
        state = self.state[name]
        if condition == COMPLETED:
            return state.completed
        if condition == HEALTHY:
            return state.healthy_at is not None
        return state.started_at is not None

    def _bring_up(self, deadline: float) -> None:
        checks: dict[str, Future[tuple[bool, str]]] = {}
        last_check: dict[str, float] = {}
        with ThreadPoolExecutor(4, thread_name_prefix="healthcheck") as pool:
            while not self._all_up():
                if time.monotonic() > deadline:
                    waiting = [n for n in self.order if not self._is_up(n)]
                    raise StackError(
                        f"not up in time: {', '.join(waiting)}\n"
                        + "\n".join(f"--- {n}:\n{self.containers[n].log_tail()}" for n in waiting)
                    )
                for name in self.order:
                    state, container = self.state[name], self.containers[name]
                    service = container.service
                    if state.started_at is None and all(
                        self._ready(d.service, d.condition) for d in service.depends_on
                    ):
                        self._call(lambda n=name: self._start(n))  # type: ignore[misc]
                        self.say(f"started {name} on {container.host.address}")
                    elif self.compose.one_shot(name) and state.started_at and not state.completed:
                        code = container.exit_code
                        if code == 0:
                            state.completed = True
                            self.say(f"{name} completed")
                        elif code is not None:
                            raise StackError(
                                f"{name} exited with code {code}:\n{container.log_tail()}"
                            )
                    elif state.started_at and state.healthy_at is None:
                        self._poll_health(pool, name, checks, last_check)
                time.sleep(0.3)

    def _poll_health(
        self,
        pool: ThreadPoolExecutor,
        name: str,
        checks: dict[str, Future[tuple[bool, str]]],
        last_check: dict[str, float],
    ) -> None:
        container, state = self.containers[name], self.state[name]
        if container.service.healthcheck is None:
            if container.running():
                state.healthy_at = time.monotonic()
            return
        running = checks.get(name)
        if running is not None and running.done():
            del checks[name]
            passed, output = running.result()
            if passed:
                state.healthy_at = time.monotonic()
                took = state.healthy_at - (state.started_at or state.healthy_at)
                self.say(f"{name} healthy ({took:.0f}s after its start)")
                return
            state.checks = [*state.checks[-4:], output]
        elif running is None:
            now, started = time.monotonic(), state.started_at or 0.0
            gap = container.service.healthcheck.gap(now - started)
            if now - last_check.get(name, started) >= gap:
                last_check[name] = now
                checks[name] = pool.submit(container.check_health)

    def _is_up(self, name: str) -> bool:
        state = self.state[name]
        return state.completed if self.compose.one_shot(name) else state.healthy_at is not None

    def _all_up(self) -> bool:
        return all(self._is_up(n) for n in self.order)

    def replicas(self, name: str) -> list[str]:
        """The containers of service `name`: itself, or each replica of a scaled one."""
        if name in self.containers:
            return [name]
        found = [n for n, c in self.containers.items() if c.service.replica_of == name]
        if not found:
            raise StackError(f"no service {name} in this stack")
        return found

    def wait_healthy(self, name: str, timeout: float = 300.0) -> float:
        """Wait until `name` (each replica of it) is running and passes its healthcheck;
        returns the wait."""
        started = time.monotonic()
        for each in self.replicas(name):
            self._wait_healthy(each, started + timeout)
        return time.monotonic() - started

    def _wait_healthy(self, name: str, deadline: float) -> None:
        started = time.monotonic()
        timeout = deadline - started
        container = self.containers[name]
        check = container.service.healthcheck
        while time.monotonic() - started < timeout:
            if container.running():
                passed, _ = container.check_health()
                if passed:
                    self.state[name].healthy_at = time.monotonic()
                    return
            since_start = time.monotonic() - (self.state[name].started_at or started)
            time.sleep(check.gap(since_start) if check is not None else 1.0)
        raise StackError(f"{name} not healthy within {timeout:.0f}s:\n{container.log_tail()}")

    def down(self) -> list[str]:
        """Stop every service (in reverse order), remove the network; returns what is
        left behind (processes, namespaces), which should be nothing."""
        if self._thread is not None and self._thread.is_alive():
            with contextlib.suppress(StackError):
                self._call(self._stop_all)
            self._calls.put(None)
            self._thread.join(60)
        else:
            self._stop_all()
        hosts = {namespace_id(h.namespace) for h in self.network.hosts.values()}
        self.network.destroy()
        self.down_at = time.time()
        on_hosts = in_namespaces({h for h in hosts if h is not None})
        left = [f"process {pid}" for pid in sorted(set(marked_by(self.tag)) | set(on_hosts))]
        return left + leftovers([self.tag])

    def _stop_all(self) -> None:
        """As compose does: what nothing else needs first, each layer at once."""
        depth: dict[str, int] = {}
        for name in self.order:
            needs = self.containers[name].service.depends_on
            depth[name] = 1 + max((depth.get(d.service, 0) for d in needs), default=0)
        for level in sorted(set(depth.values()), reverse=True):
            layer = [self.containers[n] for n in self.order if depth[n] == level]
            for container in layer:
                self.state[container.name].stopped = True
                container.terminate()
            deadline = time.monotonic() + STOP_GRACE
            for container in layer:
                container.stop(deadline=deadline)
        for container in self.containers.values():
            container.close()

    def __enter__(self) -> Stack:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- faults and deploys -----------------------------------------------------------------

    def _fault(
        self, kind: str, target: str, act: Callable[[], None], detail: str = ""
    ) -> StackEvent:
        """`act` on the stack's thread, recorded first (stamped when it began, and
        before whatever the restart policy then records of it)."""

        def recorded() -> StackEvent:
            event = self._event(kind, target, detail)
            act()
            return event

        return self._call(recorded)

    def stop(self, name: str) -> StackEvent:
        """`docker compose stop NAME`: down until started again."""

        def stop() -> None:
            for each in self.replicas(name):
                self.state[each].stopped = True
                self.containers[each].stop()

        return self._fault("stop", name, stop)

    def start(self, name: str) -> StackEvent:
        def start() -> None:
            for each in self.replicas(name):
                self.state[each].stopped = False
                self._start(each)

        return self._fault("start", name, start)

    def kill(self, name: str) -> StackEvent:
        """kill -9 of every process of the service, as when its machine dies; its
        restart policy brings it back as Docker's would."""

        def kill() -> None:
            for each in self.replicas(name):
                self.containers[each].kill()

        return self._fault("kill -9", name, kill)

    def restart(self, name: str) -> StackEvent:
        """`docker compose restart NAME`: SIGTERM, then started again."""

        def restart() -> None:
            for each in self.replicas(name):
                self.containers[each].stop()
                self.state[each].stopped = False
                self._start(each)

        return self._fault("restart", name, restart)

    def recreate(self, name: str, environment: Mapping[str, str]) -> StackEvent:
        """`docker compose up -d NAME` after its environment changed (a deploy): stopped,
        then started with `environment` over the file's."""

        def recreate() -> None:
            for each in self.replicas(name):
                container = self.containers[each]
                container.stop()
                container.overrides = dict(environment)
                self.state[each].stopped = False
                self._start(each)

        detail = json.dumps(dict(environment), sort_keys=True)
        return self._fault("recreate", name, recreate, detail)

    def cut(self, a: str, b: str) -> StackEvent:
        """Take the link between hosts `a` and `b` away, both ways (netns.Network.cut)."""
        return self._fault("cut", f"{a} <-> {b}", lambda: self.network.cut(a, b))

    def restore(self, a: str, b: str) -> StackEvent:
        return self._fault("restore", f"{a} <-> {b}", lambda: self.network.restore(a, b))

    # -- what users need ----------------------------------------------------------------------

    def address(self, name: str) -> str:
        """The address of service `name` (a scaled service's first replica's, as the
        name answers there)."""
        return self.network.address(self.replicas(name)[0])

    def volume(self, name: str) -> Path:
        return self.workdir / "volumes" / name

    def admin_password(self) -> str | None:
        """The admin's password as Airflow's auth manager reads it (airflow-init wrote it)."""
        try:
            text = (self.volume("airflow-auth") / "passwords.json").read_text()
            return str(json.loads(text)["admin"])
        except (OSError, ValueError, KeyError):
            return None

    def describe_images(self) -> list[str]:
        return [f"  {image}" for image in self.images.values()]

    def describe_hosts(self) -> list[str]:
        lines = []
        for name in self.order:
            container = self.containers[name]
            kind = "ran once" if self.compose.one_shot(name) else container.service.restart
            lines.append(f"  {name:<22} {container.host.address:<14} {kind}")
        return lines


def marked_by(tag: str) -> list[int]:
    """The live processes of any container of the stack `tag`."""
    from devstack.container import MARKER

    needle = f"{MARKER}={tag}/".encode()

    def of_stack(pid: int) -> bool:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return any(v.startswith(needle) for v in environ)

    return live_where(of_stack)


def remove_workdir(workdir: Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)


__all__ = ["Stack", "StackError", "StackEvent", "marked", "marked_by", "remove_workdir"]
