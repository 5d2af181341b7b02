"""The plain-Python reference of the deploy model checker: every state and sink of every
checkpoint by uid, moved by the documented rules (rules.py) at each epoch, rolled back
by restores to the target's snapshot, and the deploy verdict the docs give for a
version on a snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from support.deploy_model.rules import (
    Expect,
    StoredState,
    fold,
    migrate_rows,
    state_verdict,
)
from support.deploy_model.version import SOURCE, OpV, StateV, Version

Row = Mapping[str, Any]


@dataclass(frozen=True)
class OpStored:
    name: str
    key: tuple[str, ...]
    max_parallelism: int
    states: Mapping[str, StoredState]  # by state uid


@dataclass(frozen=True)
class SinkStored:
    name: str
    mode: str
    table: str | None
    chain: tuple[tuple[Row, ...], ...]  # each published epoch's rows, oldest first

    def visible(self) -> list[Row]:
        if not self.chain:
            return []
        return (
            list(self.chain[-1]) if self.mode == "snapshot" else [r for e in self.chain for r in e]
        )


@dataclass(frozen=True)
class Snapshot:
    files: int  # input files read up to (the barrier)
    ops: Mapping[str, OpStored]
    sinks: Mapping[str, SinkStored]
    recorded: bool = True  # False: its records rewritten as an older release wrote them

    def unrecorded(self) -> Snapshot:
        ops = {
            uid: replace(op, states={u: replace(s, recorded=False) for u, s in op.states.items()})
            for uid, op in self.ops.items()
        }
        return replace(self, ops=ops, recorded=False)


@dataclass
class Judgement:
    """What the docs say of deploying a version on a snapshot."""

    expect: Expect = Expect.DEPLOY
    refusals: list[str] = field(default_factory=list)  # why refused (kinds, for the tally)
    either: list[str] = field(default_factory=list)  # why either answer is allowed
    migrations: list[str] = field(default_factory=list)  # states whose migrate= runs
    failing: list[str] = field(default_factory=list)  # why the epoch must fail (a bug)
    maybe_failing: list[str] = field(default_factory=list)  # why it may fail
    #: "op uid/state uid" -> the rule's verdict of a kept state whose schema is recorded
    states: dict[str, str] = field(default_factory=dict)

    def refuse(self, why: str) -> None:
        self.refusals.append(why)
        self.expect = Expect.REFUSE

    def allow_either(self, why: str) -> None:
        self.either.append(why)
        if self.expect is Expect.DEPLOY:
            self.expect = Expect.EITHER


def judge(
    code: Version,
    base: Snapshot | None,
    allow: bool = False,
    tables: Mapping[str, tuple[str, bool]] | None = None,
) -> Judgement:
    """`tables`: table -> (the sink uid that made it, whether it surely exists), the
    catalog's, which a restore does not take back."""
    out = Judgement()
    for op in code.ops:  # an operator new to the base too (seed 20970: a new uid)
        if op.sloppy and any(s.n_type != "int64" for s in op.states):
            out.maybe_failing.append(f"{op.uid} sets n as int64 against a narrower declaration")
    for sink in code.sinks:
        made = (tables or {}).get(sink.table or "")
        in_base = base is not None and any(s.table == sink.table for s in base.sinks.values())
        if made is None or made[0] == sink.uid or in_base:
            continue
        if made[1]:
            out.refuse("sink-table")
        else:
            out.allow_either("a table another sink uid may have made (it published no row)")
            out.maybe_failing.append("a table another sink uid may have made")
    if base is None:
        return out
    for op in code.ops:
        old = base.ops.get(op.uid)
        if old is not None:
            _judge_op(out, code, op, old, allow)
    for uid, old in base.ops.items():
        if code.op(uid) is None and old.states:
            dropped = all((uid, s) in code.dropped_states for s in old.states)
            if not (allow or uid in code.dropped_operators or dropped):
                out.refuse("operator-dropped")
    for uid, stored in base.sinks.items():
        sink = code.sink(uid)
        if sink is None and not (allow or uid in code.dropped_sinks):
            out.refuse("sink-dropped")
        elif sink is not None and sink.mode != stored.mode:
            if base.recorded:
                out.refuse("sink-mode")
            else:
                out.allow_either("sink mode changed on a base that recorded none")
    owners = {s.table: uid for uid, s in base.sinks.items() if s.table}
    for sink in code.sinks:
        if owners.get(sink.table, sink.uid) != sink.uid:  # the table is another sink's
            if base.recorded:
                out.refuse("sink-table")
            else:
                why = "a table another sink uid writes, on a base that recorded no tables"
                out.allow_either(why)
                out.maybe_failing.append(why + ": its sync refuses")
    if out.expect is Expect.REFUSE:
        out.failing.clear()
        out.maybe_failing.clear()
    return out


def _judge_op(out: Judgement, code: Version, op: OpV, old: OpStored, allow: bool) -> None:
    recorded = all(s.recorded for s in old.states.values())
    if old.states and old.max_parallelism != op.max_parallelism:
        out.refuse("max-parallelism")
    if old.states and old.key != op.key:
        if recorded:
            out.refuse("key")
        else:
            out.allow_either("key changed on a base that recorded none")
    declared = allow or op.uid in code.dropped_operators
    for uid in old.states:
        if op.state(uid) is None and not (declared or (op.uid, uid) in code.dropped_states):
            out.refuse("state-dropped")
    for state in op.states:
        stored = old.states.get(state.uid)
        if stored is None:
            continue
        verdict = state_verdict(stored, state, op.key)
        if recorded:
            out.states[f"{op.uid}/{state.uid}"] = verdict.kind
        if verdict.kind == "incompatible":
            if recorded:
                out.refuse("schema")
            else:
                out.allow_either("schema change on a base that recorded none")
        elif verdict.kind == "user-migration":
            out.migrations.append(f"{op.uid}/{state.uid}")
            if state.migrate is not None and state.migrate.raises:
                out.failing.append(f"migrate= of {op.uid}/{state.uid} raises")
            elif gaps := _left_null(stored, state):
                # written for another change (the base is older than it thought): the
                # epoch fails on the declaration, before anything is written
                out.failing.append(f"an incomplete migrate= of {op.uid}/{state.uid} ({gaps})")


def _left_null(stored: StoredState, code: StateV) -> list[str]:
    """The non-null columns a migrate= leaves null in some stored row."""
    fill = code.migrate.fill_of if code.migrate is not None else lambda _: None
    return [
        c.name
        for c in code.columns()
        if not c.nullable
        and fill(c.name) is None
        and any(row.get(c.name) is None for row in stored.rows.values())
    ]


def epoch(code: Version, base: Snapshot | None, events: list[Row], files: int) -> Snapshot:
    """The snapshot an epoch of `code` on `base` over `events` (the input newer than the
    base) leaves."""
    outputs: dict[str, list[Row]] = {}
    ops: dict[str, OpStored] = {}
    for op in code.order():
        rows = list(events) if op.input == SOURCE else outputs[op.input]
        if not op.stateful:
            outputs[op.uid] = [dict(r) for r in rows if r["amount"] % op.modulus != 0]
            ops[op.uid] = OpStored(op.name, op.key, op.max_parallelism, {})
            continue
        old = base.ops.get(op.uid) if base is not None else None
        states: dict[str, StoredState] = {}
        for state in op.states:
            stored = old.states.get(state.uid) if old is not None else None
            start: dict[tuple, dict[str, Any]] = {}
            if stored is not None:
                start = migrate_rows(stored, state, op.key, state_verdict(stored, state, op.key))
            new, touched = fold(start, rows, state, op.key)
            states[state.uid] = StoredState(state.columns(), op.key, new)
            if op.uid not in outputs:
                outputs[op.uid] = [
                    {c: r[c] for c in ("user", "grp", "n", "total")} for r in touched
                ]
        ops[op.uid] = OpStored(op.name, op.key, op.max_parallelism, states)
    sinks = {}
    for sink in code.sinks:
        before = base.sinks.get(sink.uid) if base is not None else None
        chain = before.chain if before is not None else ()
        published = tuple(outputs[sink.input])
        sinks[sink.uid] = SinkStored(sink.name, sink.mode, sink.table, (*chain, published))
    return Snapshot(files, ops, sinks)


@dataclass
class Reference:
    """Every checkpoint's snapshot, the head, the input files and what a restore allowed."""

    files: list[list[Row]] = field(default_factory=list)
    snapshots: dict[int, Snapshot] = field(default_factory=dict)
    head: int | None = None
    allowed_by_restore: int | None = None  # the target of a restore that allowed drops
    #: a sink's manifest reads in the mode of its last publish: after a restore, the
    #: mode the code in force declares (the restore publishes), by sink uid
    modes: dict[str, str] = field(default_factory=dict)
    #: table -> (the sink uid whose sync made it, whether it surely did: a sync makes
    #: it from a published file, and an epoch of no row may publish none)
    tables: dict[str, tuple[str, bool]] = field(default_factory=dict)

    @property
    def base(self) -> Snapshot | None:
        return None if self.head is None else self.snapshots[self.head]

    def judge(self, code: Version, allow: bool = False) -> Judgement:
        allowed = allow or (self.head is not None and self.allowed_by_restore == self.head)
        return judge(code, self.base, allowed, self.tables)

    def complete(self, code: Version, checkpoint_id: int) -> Snapshot:
        base = self.base
        start = base.files if base is not None else 0
        events = [e for f in self.files[start:] for e in f]
        snapshot = epoch(code, base, events, len(self.files))
        for uid, sink in snapshot.sinks.items():
            made = self.tables.get(sink.table or "")
            if sink.table and (made is None or (made[0] == uid and not made[1])):
                self.tables[sink.table] = (uid, any(sink.chain))
        self.snapshots[checkpoint_id] = snapshot
        self.head = checkpoint_id
        self.allowed_by_restore = None
        self.modes = {}
        return snapshot

    def restore(self, target: int, allow: bool, code: Version) -> None:
        self.head = target
        self.allowed_by_restore = target if allow else None
        self.modes = {s.uid: s.mode for s in code.sinks}

    def alias(self, new_id: int, original: int) -> None:
        """An imported savepoint: a new id for the snapshot it was taken as."""
        self.snapshots[new_id] = self.snapshots[original]

    def sinks(self) -> Mapping[str, SinkStored]:
        base = self.base
        if base is None:
            return {}
        return {u: replace(s, mode=self.modes.get(u, s.mode)) for u, s in base.sinks.items()}
