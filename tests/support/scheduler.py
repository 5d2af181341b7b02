"""A step scheduler: actors are threads, but only one runs at a time, and each one stops
at every storage call of its own thread (a yield point) until a seeded choice lets it go
on. So an interleaving is a function of the seed alone, not of the machine's timing, and
a failing schedule replays exactly.

Storage calls made by helper threads of the running actor (the protocol reads acks and
checks files with small thread pools) are part of that actor's current step: they run
without stopping, and faults drawn for them depend on the step, the operation and the
key, never on which pool thread happened to make them. (One thing stays timing-bound:
when one pooled call fails, `Executor.map` cancels the calls not yet started, so how many
of them ran varies; the failure the actor sees, and so the schedule, does not.)
"""

from __future__ import annotations

import random
import re
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

#: How long one step may take before the schedule is declared hung (an actor blocked
#: outside a yield point: a deadlock in the code under test, or a sleep).
STEP_TIMEOUT = 120.0
#: pyiceberg names its metadata and data files with fresh uuids: a draw keyed by such a
#: name would differ from run to run of one seed, so the uuid is left out of the key.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Stopped(BaseException):  # the scheduler ends an actor, like a kill
    """Raised in an actor at its yield point when the schedule is over."""


@dataclass
class Actor:
    name: str
    fn: Callable[[], None]
    thread: threading.Thread | None = None
    go: threading.Event = field(default_factory=threading.Event)
    started: bool = False
    done: bool = False
    steps: int = 0
    at: str = ""  # the call it waits to make
    wake: int = 0  # a stalled actor is not picked before this step
    error: BaseException | None = None
    error_trace: str = ""


class StepScheduler:
    def __init__(
        self,
        seed: int,
        *,
        max_steps: int = 5000,
        stickiness: float = 0.6,
        on_step: Callable[[int, str, str], None] | None = None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(f"schedule:{seed}")
        self.max_steps = max_steps
        self.stickiness = stickiness
        self.on_step = on_step
        self.step = 0
        self.actors: dict[str, Actor] = {}
        self.current: Actor | None = None
        #: (step, actor, the call it was let go at): equal for equal seeds.
        self.trace: list[tuple[int, str, str]] = []
        self.stopping = False
        self.hung: str | None = None
        self._local = threading.local()
        self._parked = threading.Event()
        self._draws: dict[tuple[int, str, str], int] = {}
        self._draw_lock = threading.Lock()

    # -- set-up ---------------------------------------------------------------------------

    def spawn(self, name: str, fn: Callable[[], None]) -> None:
        if name in self.actors:
            raise ValueError(f"actor {name!r} spawned twice")
        self.actors[name] = Actor(name, fn)

    # -- called from actor threads ----------------------------------------------------------

    def actor_of_thread(self) -> Actor | None:
        return getattr(self._local, "actor", None)

    def in_actor(self) -> bool:
        """Whether the calling thread belongs to a running actor (its own or a helper)."""
        return self.current is not None and not self.stopping

    def yield_point(self, op: str, key: str) -> None:
        """Hook for FaultyStore.before_call: park the actor until it is picked again."""
        actor = self.actor_of_thread()
        if actor is None:
            return  # a helper thread of the running actor, or the checker: no stop
        actor.at = f"{op} {key}"
        self._park_and_wait(actor)

    def stall(self, steps: int) -> None:
        """The calling actor hangs (a slow call, a paused process): the others take the
        next `steps` steps without it, then it goes on from where it stopped."""
        actor = self.actor_of_thread()
        if actor is None:
            return
        actor.wake = self.step + steps
        actor.at = f"stalled until step {actor.wake}"
        self._park_and_wait(actor)

    def uniform(self, op: str, key: str) -> float:
        """A draw for a storage call that depends only on (seed, step, op, key, repeat)."""
        key = _UUID.sub("<uuid>", key)
        with self._draw_lock:
            slot = (self.step, op, key)
            n = self._draws.get(slot, 0)
            self._draws[slot] = n + 1
        return random.Random(f"{self.seed}:{self.step}:{op}:{key}:{n}").random()

    def _park_and_wait(self, actor: Actor) -> None:
        if self.stopping:
            raise Stopped(actor.name)  # even from a `finally:` of a stopped actor
        actor.go.clear()
        self._parked.set()
        actor.go.wait()
        if self.stopping:
            raise Stopped(actor.name)

    def _body(self, actor: Actor) -> None:
        self._local.actor = actor
        actor.go.wait()
        try:
            if not self.stopping:
                actor.fn()
        except Stopped:
            pass
        except BaseException as exc:  # the actor's own business, recorded for the report
            actor.error = exc
            actor.error_trace = traceback.format_exc()
        finally:
            actor.done = True
            self._parked.set()

    # -- the loop ---------------------------------------------------------------------------

    def runnable(self) -> list[Actor]:
        alive = [a for a in self.actors.values() if not a.done]
        # When every actor left is stalled, the stall ends early (no one else to run).
        return [a for a in alive if a.wake <= self.step] or alive

    def _pick(self, runnable: list[Actor]) -> Actor:
        if self.current in runnable and self.rng.random() < self.stickiness:
            return self.current
        return self.rng.choice(runnable)

    def _grant(self, actor: Actor) -> bool:
        """Let `actor` run to its next yield point (or its end); False if it hung."""
        self._parked.clear()
        if not actor.started:
            actor.started = True
            actor.thread = threading.Thread(
                target=self._body, args=(actor,), name=f"actor-{actor.name}", daemon=True
            )
            actor.thread.start()
        actor.go.set()
        return self._parked.wait(STEP_TIMEOUT)

    def run(self) -> None:
        """Run every actor to its end, or until `max_steps`, then stop the rest."""
        while True:
            runnable = self.runnable()
            if not runnable or self.step >= self.max_steps:
                break
            actor = self._pick(runnable)
            self.step += 1
            actor.steps += 1
            self.current = actor
            self.trace.append((self.step, actor.name, actor.at))
            if self.on_step is not None:
                self.on_step(self.step, actor.name, actor.at)
            if not self._grant(actor):
                self.hung = (
                    f"actor {actor.name} did not reach a storage call within "
                    f"{STEP_TIMEOUT:g}s (at {actor.at or 'start'})"
                )
                break
        self.stop()

    def stop(self) -> None:
        """End every actor still alive: each sees Stopped at its yield point."""
        self.stopping = True
        for actor in self.actors.values():
            if actor.started and not actor.done:
                self._parked.clear()
                actor.go.set()
                if actor.thread is not None:
                    actor.thread.join(STEP_TIMEOUT if self.hung is None else 1.0)
        self.current = None
