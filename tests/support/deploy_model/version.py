"""A pipeline version as pure data: what the deploy model checker changes, builds and
follows in its reference (tests/support/deploy_model).

One source `events` (user, grp, amount): `grp` is a function of `user`, so a re-key
between (user), (user, grp) and (grp, user) keeps each stored row one row. Stateful
operators fold the epoch's input into every state they declare: per key a running
count `n` and sum `total`, `grp` kept, and extra columns carried over (a new key gets
the column's fill: null when nullable, else 0 or ""). They output the rows of the keys
the epoch touched (of their first state). A stateless operator passes the rows whose
amount is not a multiple of its `modulus`. Sinks stage their input's rows."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

PIPELINE = "dm"
SOURCE = "events"
SOURCE_ROOT = "in/events"
KEYS = (("user",), ("user", "grp"), ("grp", "user"))
#: The columns every state has, before its extras (n's type varies: int32 or int64).
FIXED = ("user", "grp", "n", "total")
TYPES = ("int32", "int64", "string")
WIDER = {"int32": "int64"}  # the one widening the generator makes (and its reverse)


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # int32, int64 or string
    nullable: bool = True

    def fill(self) -> Any:
        """What the operator writes in this column for a key it has not seen before."""
        if self.nullable:
            return None
        return "" if self.type == "string" else 0


@dataclass(frozen=True)
class Migration:
    """A `migrate=` function as data: every declared column read from the stored row
    (cast), or null when the stored rows lack it; `fills` replace nulls."""

    fills: tuple[tuple[str, Any], ...] = ()
    raises: bool = False

    def fill_of(self, column: str) -> Any:
        return dict(self.fills).get(column)


@dataclass(frozen=True)
class StateV:
    name: str
    uid: str
    n_type: str = "int64"
    extras: tuple[Column, ...] = ()
    value: bool = False
    defaults: tuple[tuple[str, Any], ...] = ()
    dropped: tuple[str, ...] = ()
    migrate: Migration | None = None

    def columns(self) -> tuple[Column, ...]:
        fixed = (
            Column("user", "string", False),
            Column("grp", "string", False),
            Column("n", self.n_type),
            Column("total", "int64"),
        )
        return fixed + self.extras


@dataclass(frozen=True)
class OpV:
    name: str
    uid: str
    input: str  # the uid of a stateless operator, or SOURCE
    states: tuple[StateV, ...] = ()  # none: stateless
    key: tuple[str, ...] = ("user",)
    parallelism: int = 1
    max_parallelism: int = 16
    modulus: int = 3  # a stateless operator drops the amounts that are multiples of it
    sloppy: bool = False  # sets `n` uncast (int64) whatever its declared type

    @property
    def stateful(self) -> bool:
        return bool(self.states)

    def state(self, uid: str) -> StateV | None:
        return next((s for s in self.states if s.uid == uid), None)


@dataclass(frozen=True)
class SinkV:
    name: str
    uid: str
    input: str  # an operator's uid
    mode: str = "append"
    table: str | None = None  # "namespace.table" of an Iceberg table


@dataclass(frozen=True)
class Version:
    ops: tuple[OpV, ...]
    sinks: tuple[SinkV, ...]
    dropped_states: frozenset[tuple[str, str]] = frozenset()
    dropped_operators: frozenset[str] = frozenset()
    dropped_sinks: frozenset[str] = frozenset()
    serial: int = 0  # for fresh names and uids
    label: str = "initial"  # the change that made this version
    notes: tuple[str, ...] = field(default=(), compare=False)

    def op(self, uid: str) -> OpV | None:
        return next((o for o in self.ops if o.uid == uid), None)

    def sink(self, uid: str) -> SinkV | None:
        return next((s for s in self.sinks if s.uid == uid), None)

    def with_op(self, op: OpV) -> Version:
        return replace(self, ops=tuple(op if o.uid == op.uid else o for o in self.ops))

    def with_sink(self, sink: SinkV) -> Version:
        return replace(self, sinks=tuple(sink if s.uid == sink.uid else s for s in self.sinks))

    def fresh(self, prefix: str) -> tuple[str, Version]:
        """A name never used before in this sequence, and the version that used it."""
        return f"{prefix}{self.serial + 1}", replace(self, serial=self.serial + 1)

    def order(self) -> list[OpV]:
        """The operators, each after the one it reads."""
        done: list[OpV] = []
        left = list(self.ops)
        while left:
            ready = [o for o in left if o.input == SOURCE or any(d.uid == o.input for d in done)]
            if not ready:
                raise ValueError(f"operators read unknown inputs: {[o.input for o in left]}")
            done.extend(ready)
            left = [o for o in left if o not in ready]
        return done

    def describe(self) -> str:
        ops = []
        for o in self.ops:
            states = ",".join(f"{s.name}[{s.uid}]" for s in o.states) or "-"
            ops.append(
                f"{o.name}[{o.uid}]<-{o.input} key={'/'.join(o.key)} p={o.parallelism}"
                f"/{o.max_parallelism} states={states}"
            )
        sinks = [f"{s.name}[{s.uid}]<-{s.input} {s.mode} {s.table or ''}" for s in self.sinks]
        return "; ".join(ops + sinks)


def initial() -> Version:
    """The first version of every sequence: one stateful operator behind a filter, and an
    append sink of the aggregate (the generator grows it from there)."""
    totals = StateV("totals", "totals")
    return Version(
        ops=(
            OpV("clean", "clean", SOURCE),
            OpV("agg", "agg", "clean", (totals,), parallelism=2),
        ),
        sinks=(SinkV("out", "out", "agg"),),
    )
