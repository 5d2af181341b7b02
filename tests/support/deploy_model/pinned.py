"""The shortest sequences the deploy model checker found breaking an invariant, written
out step by step (each names the seed that found it and what it breaks). They run on a
`Sequence` like any seed and fail with the same violation until the defect is fixed."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

from support.deploy_model.changes import _reuid_op
from support.deploy_model.records import as_future_version, as_version_1
from support.deploy_model.sequence import Sequence, Violated
from support.deploy_model.version import Column, Migration, SinkV, StateV, Version, initial

Case = Callable[[Sequence], None]
PINNED: dict[str, Case] = {}


def pinned(fn: Case) -> Case:
    PINNED[fn.__name__.replace("_", "-")] = fn
    return fn


def run_pinned(seq: Sequence, case: str) -> None:
    """Run a pinned case to its end or its first violation (in `seq.tally`)."""
    with contextlib.suppress(Violated):
        PINNED[case](seq)


def _totals(version: Version, **changes: object) -> Version:
    """`initial()`'s aggregate with its state `totals` changed."""
    agg = version.op("agg")
    assert agg is not None
    state: StateV = replace(agg.states[0], **changes)  # type: ignore[arg-type]
    return version.with_op(replace(agg, states=(state,)))


def _start(seq: Sequence, version: Version, epochs: int = 2) -> None:
    seq.deploy(version)
    for _ in range(epochs):
        seq.epoch()


def _restore_latest_past_a_newer_record(seq: Sequence, target: int) -> None:
    """Write checkpoint `target`'s outcome as a newer release would, then `restore
    latest` (which must pass it by)."""
    assert seq.version is not None
    as_future_version(seq.world.store, target)
    seq.damaged.add(target)
    seq.deploy(seq.version)
    restored = seq.world.restore("latest")
    seq.ref.restore(restored, False, seq.version)
    seq.check()


def _as_version_1(seq: Sequence) -> None:
    assert seq.ref.head is not None and seq.version is not None
    as_version_1(seq.world.store, seq.ref.head)
    seq.ref.snapshots[seq.ref.head] = seq.ref.snapshots[seq.ref.head].unrecorded()
    seq.deploy(seq.version)


@pinned
def migration_over_a_changelog(seq: Sequence) -> None:
    """Seed 204 (issue 36, row 1): a nullable column made non-null with a migrate= that
    fills it; the migration epoch writes a changelog over the unmigrated base, so the
    rows it did not touch keep their nulls."""
    nullable = _totals(initial(), extras=(Column("x", "int32"),))
    _start(seq, nullable, epochs=6)  # a state of many keys: the base is a changelog
    seq.deploy(
        _totals(nullable, extras=(Column("x", "int32", False),), migrate=Migration((("x", 7),)))
    )
    seq.epoch()


@pinned
def rekey_on_a_version_1_base(seq: Sequence) -> None:
    """Issue 36, row 2: a base written by the release before uids records no key; the
    plan keeps a re-keyed operator and the epoch layers a changelog under the new key
    over files placed by the old one (the state cannot be read back)."""
    _start(seq, initial())
    _as_version_1(seq)
    agg = initial().op("agg")
    assert agg is not None
    seq.deploy(initial().with_op(replace(agg, key=("user", "grp"))))
    seq.epoch()


@pinned
def sink_renamed_keeping_its_uid(seq: Sequence) -> None:
    """Seeds 3 and 12 (issue 36, row 3): the sink starts a new manifest under its new
    name; an append sink's readers lose every epoch published before the rename."""
    _start(seq, initial())
    seq.deploy(initial().with_sink(replace(initial().sinks[0], name="out2")))
    seq.epoch()


@pinned
def state_set_wider_than_declared(seq: Sequence) -> None:
    """Seed 10 (issue 36, row 5): the function sets `n` as bigint where the state
    declares int; the checkpoint records int over bigint files."""
    narrow = _totals(initial(), n_type="int32")
    _start(seq, narrow)
    agg = narrow.op("agg")
    assert agg is not None
    seq.deploy(narrow.with_op(replace(agg, sloppy=True)))
    seq.epoch()
    seq.epoch()


@pinned
def new_uid_keeping_the_name(seq: Sequence) -> None:
    """Seeds 102, 103 (issue 36, row 6): the advice for a max_parallelism change
    followed (a new uid, the name kept, the old uid dropped): the plan says deployable,
    the trigger refuses by spec.json's entry of that name."""
    _start(seq, initial())
    agg = initial().op("agg")
    assert agg is not None
    moved = _reuid_op(initial(), agg, replace(agg, uid="agg2", max_parallelism=32))
    seq.deploy(replace(moved, dropped_operators=frozenset({"agg"})))
    seq.epoch()


@pinned
def max_parallelism_refused_twice(seq: Sequence) -> None:
    """Seeds 102, 103: a stateful operator's max_parallelism changed; the trigger is
    refused by the spec check before the plan, with another text than the plan's."""
    _start(seq, initial())
    agg = initial().op("agg")
    assert agg is not None
    seq.deploy(initial().with_op(replace(agg, max_parallelism=32)))
    seq.epoch()


@pinned
def epoch_during_an_import(seq: Sequence) -> None:
    """Seed 206 (issue 36, row 7): an epoch triggered while a savepoint folder is being
    imported takes the import as its base and fails waiting for it."""
    _start(seq, initial())
    folder = "savepoints/dm/sp-pinned"
    attempt = seq.epoch(savepoint=folder)
    assert attempt.checkpoint_id is not None
    seq.epoch()
    ran: list[bool] = []

    def progress(line: str) -> None:
        if line.startswith("importing savepoint") and not ran:
            ran.append(True)
            seq.epoch()

    seq.world.import_folder(folder, progress)


@pinned
def plan_after_an_allowing_restore(seq: Sequence) -> None:
    """Seed 1: a state dropped without a declaration is refused; restoring the head with
    allow-non-restored-state lets the next trigger drop it, but `batchpoint plan` (made
    just before that trigger) still refuses it."""
    agg = initial().op("agg")
    assert agg is not None
    _start(seq, initial().with_op(replace(agg, states=(*agg.states, StateV("extra", "extra")))))
    seq.deploy(initial())
    seq.epoch()  # refused: state dropped
    assert seq.ref.head is not None
    seq.restore(seq.ref.head, allow=True)
    seq.epoch()


@pinned
def narrowing_on_a_version_1_base(seq: Sequence) -> None:
    """Seeds 304, 310: on a base written by the release before uids (no schema
    recorded) the plan keeps a state whose column is narrowed, and the epoch then
    refuses the change from the files' schema: the plan said deployable, nothing runs."""
    _start(seq, initial())
    _as_version_1(seq)
    seq.deploy(_totals(initial(), n_type="int32"))
    seq.epoch()


@pinned
def tightening_on_a_version_1_base(seq: Sequence) -> None:
    """Seeds 20351, 20483: on a base written by the release before uids (no schema
    recorded) whose rows hold nulls in a nullable column, a deploy makes it non-null
    without migrate=: the plan took the declared nullability and said deployable, the
    epoch failed on the declaration (stuck)."""
    nullable = _totals(initial(), extras=(Column("x1", "int32"),))
    _start(seq, nullable)
    _as_version_1(seq)
    seq.deploy(_totals(nullable, extras=(Column("x1", "int32", False),)))
    seq.epoch()  # refused: stored nulls
    seq.deploy(
        _totals(nullable, extras=(Column("x1", "int32", False),), migrate=Migration((("x1", 3),)))
    )
    seq.epoch()


@pinned
def savepoint_folder_after_dispose(seq: Sequence) -> None:
    """Seed 505: a savepoint exported, the pipeline restored to an earlier checkpoint
    and on from there, the savepoint disposed of and collected; restoring its folder
    rewinds the append sink to the savepoint's own epoch only, dropping the history
    it was taken on (still published: the chain it builds on is the head's too)."""
    _start(seq, initial())
    folder = "savepoints/dm/sp-disposed"
    savepoint = seq.epoch(savepoint=folder).checkpoint_id
    assert savepoint is not None and seq.ref.head is not None
    seq.restore(savepoint - 1)
    seq.epoch()
    seq.world.dispose(savepoint)
    seq.world.gc()
    seq.restore(savepoint, folder=folder)


@pinned
def sink_mode_back_to_append_after_gc(seq: Sequence) -> None:
    """Seeds 520, 522, 524, 530: a sink's mode change was planned `kept`, but its
    manifest re-reads the whole chain in the mode of its last publish: append ->
    snapshot, gc (which keeps only each retained checkpoint's own epoch), snapshot ->
    append showed the epochs gc happened to keep, not the sink's history. Now refused
    (a new uid starts a new sink)."""
    _start(seq, initial())
    out = initial().sinks[0]
    snapshot = initial().with_sink(replace(out, mode="snapshot"))
    seq.deploy(snapshot)
    for _ in range(3):  # the append-mode checkpoints leave the retained set
        seq.epoch()
    seq.world.gc()
    seq.deploy(initial())
    seq.epoch()


@pinned
def sink_shown_beside_a_newer_record(seq: Sequence) -> None:
    """Seed 10000: the head's outcome as a newer release writes it; `restore latest`
    falls back to the checkpoint before, then `batchpoint sink show` failed on that
    record (it read every retained checkpoint's topology to name the sinks)."""
    _start(seq, initial(), epochs=3)
    head = seq.ref.head
    assert head is not None and seq.version is not None
    _restore_latest_past_a_newer_record(seq, head)


@pinned
def restore_plan_after_an_allowing_restore(seq: Sequence) -> None:
    """Seed 10010: a sink dropped after a restore that allowed it; a later restore to
    that same checkpoint, not allowing, was planned deployable (the plan honoured the
    earlier restore's allowance on a named checkpoint) and then refused."""
    _start(seq, initial())
    seq.deploy(replace(initial(), sinks=()))
    seq.epoch()  # refused: sink dropped
    target = seq.ref.head
    assert target is not None
    seq.restore(target, allow=True)
    seq.epoch()
    seq.restore(target)


@pinned
def incomplete_migrate_after_a_restore(seq: Sequence) -> None:
    """Seed 10015: a non-null column added with a migrate= that fills it; a restore to
    the checkpoint before; then a narrowing whose migrate= fills nothing. On that base
    the column is new too: the function leaves it null, and the epoch must fail on the
    declaration, nothing written (the reference had expected it to run)."""
    _start(seq, initial())
    before = seq.ref.head
    assert before is not None
    x1 = Column("x1", "int32", False)
    seq.deploy(_totals(initial(), extras=(x1,), migrate=Migration((("x1", 0),))))
    seq.epoch()
    seq.restore(before)
    seq.deploy(_totals(initial(), extras=(x1,), n_type="int32", migrate=Migration(())))
    seq.epoch()


@pinned
def sink_added_after_a_newer_record(seq: Sequence) -> None:
    """Seed 10027: a checkpoint's outcome as a newer release writes it, on the chain of
    the checkpoint `restore latest` falls back to; a sink added later failed every
    epoch: its first publish walked the whole chain back and read that record."""
    _start(seq, initial(), epochs=3)
    head = seq.ref.head
    assert head is not None and seq.version is not None
    seq.restore(head - 1)
    _restore_latest_past_a_newer_record(seq, head - 1)
    seq.epoch()
    seq.deploy(replace(seq.version, sinks=(*seq.version.sinks, SinkV("late", "late", "agg"))))
    seq.epoch()


@pinned
def table_sink_renamed_then_restored_allowing(seq: Sequence) -> None:
    """Seed 10033: an Iceberg table sink renamed without its uid, then a restore
    allowing non-restored state: the restore's table sync failed after its
    compare-and-swap (the table is the old sink uid's). Now the plan refuses a sink
    binding a table another sink uid writes, allowed or not."""
    out = initial().sinks[0]
    tabled = initial().with_sink(replace(out, table="dm.t3"))
    _start(seq, tabled)
    seq.deploy(replace(tabled, sinks=(replace(out, name="sink4", uid="sink4", table="dm.t3"),)))
    seq.epoch()  # refused: sink out dropped, its table bound by sink4
    assert seq.ref.head is not None
    seq.restore(seq.ref.head, allow=True)  # refused: the table is still out's


@pinned
def table_sink_renamed_after_a_restore_took_it_back(seq: Sequence) -> None:
    """Seed 20554: a table sink added, a restore to before the epoch that made its
    table, then the sink renamed without its uid: the base records no sink of the table,
    so the plan said deployable, and every sync failed (the catalog's table names the
    old uid). Now the plan holds the binding against the table's writer too."""
    _start(seq, initial())
    added = replace(
        initial(), sinks=(*initial().sinks, SinkV("sink5", "sink5", "agg", "snapshot", "dm.t5"))
    )
    seq.deploy(added)
    before = seq.ref.head
    seq.epoch()
    assert before is not None
    seq.restore(before)
    renamed = replace(
        added, sinks=(*initial().sinks, SinkV("sink6", "sink6", "agg", "snapshot", "dm.t5"))
    )
    seq.deploy(renamed)
    seq.epoch()  # refused: the table is sink5's


@pinned
def restore_latest_past_a_newer_record_to_a_new_sink(seq: Sequence) -> None:
    """Seed 20850: a sink added, a restore to the epoch before, that checkpoint's
    outcome then written by a newer release; `restore latest` moved the head to the
    sink's epoch and its publish failed reading the newer record (to learn whether the
    new sink had epochs there), so the restore did not finish."""
    _start(seq, initial())
    seq.deploy(replace(initial(), sinks=(*initial().sinks, SinkV("late", "late", "agg"))))
    seq.epoch()
    head = seq.ref.head
    assert head is not None and seq.version is not None
    seq.restore(head - 1)
    _restore_latest_past_a_newer_record(seq, head - 1)
    seq.epoch()


@pinned
def sink_shown_by_its_name_at_the_head_after_a_restore(seq: Sequence) -> None:
    """Seed 21568: a sink given a new uid under its old name (the advice for a mode
    change, the old uid dropped), then renamed keeping that uid; a restore to the
    checkpoint before the rename. `sink show out` read the dropped uid's manifest (the
    name is that uid, which a retained checkpoint still records), not the sink the head
    has under that name: 0 rows."""
    _start(seq, initial())
    out = initial().sinks[0]
    renewed = replace(
        initial(),
        sinks=(replace(out, uid="sink4", mode="snapshot"),),
        dropped_sinks=frozenset({out.uid}),
    )
    seq.deploy(renewed)
    seq.epoch()
    named = seq.ref.head
    assert named is not None
    seq.deploy(replace(renewed, sinks=(replace(renewed.sinks[0], name="sink5"),)))
    seq.epoch()
    seq.restore(named)
