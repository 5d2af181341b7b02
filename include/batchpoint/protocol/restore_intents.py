"""A restore's intent: `restore-intents/gen-G-<token>.json`, written before the restore's
compare-and-swap tries to move the head to its target as generation G
(protocol/restorer.py).

Between that compare-and-swap and the roll-forward's restore record, the control record
is the only witness of the move. When it is damaged in that window, the intent is what
tells `repair` a restore may have happened; the records cannot say whether its
compare-and-swap won, so an intent above every generation the other records prove is a
restore in doubt. Repair then refuses and names both heads, and the operator, who knows
whether the restore returned, chooses with `batchpoint repair --head ID`: guessing would
lose the restore (the head back on the old timeline) or invent one that never happened.

A restore record, a trigger or a sink manifest of generation G or later settles an
intent (the generation happened, and its own records say where it went). The restore
deletes its intent when its compare-and-swap surely lost; one left by a crash is
settled by the next restore or repair, which takes its generation. The token keeps two
restores racing for one generation (to one target, too) from deleting each other's.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchpoint import codec


@dataclass(frozen=True)
class RestoreIntent(codec.Record):
    KIND = "restore-intent"
    VERSION = 1

    restore_generation: int  # the generation the compare-and-swap would create
    checkpoint_id: int  # the restore's target
    previous_head: int | None  # the head the restore read before it
    started_at: float = codec.time()


@dataclass(frozen=True)
class RestoreInDoubt:
    """An intent no other record settles; `checkpoint_id` None: its record is unreadable."""

    restore_generation: int
    checkpoint_id: int | None


def in_doubt(intents: list[RestoreInDoubt], proven_generation: int) -> list[RestoreInDoubt]:
    """The intents above every generation the other records prove, oldest first."""
    doubt = {i for i in intents if i.restore_generation > proven_generation}
    return sorted(doubt, key=lambda i: (i.restore_generation, i.checkpoint_id or -1))


def doubt_refusal(doubt: list[RestoreInDoubt], proven_head: int | None) -> str:
    """Why repair writes nothing over a restore in doubt, and the two ways on."""
    named = [
        f"checkpoint {i.checkpoint_id}" if i.checkpoint_id is not None else "an unknown target"
        for i in doubt
    ]
    targets = [i.checkpoint_id for i in doubt if i.checkpoint_id is not None]
    finish = " or ".join(f"`batchpoint repair --head {t}`" for t in targets)
    keep = (
        f"`batchpoint repair --head {proven_head}` keeps checkpoint {proven_head}, the head "
        "the other records prove"
        if proven_head is not None
        else "with no head proven, release or restore a checkpoint first"
    )
    return (
        f"a restore to {' / '.join(named)} (restore generation "
        f"{doubt[-1].restore_generation}) was started, and no record but the lost control "
        "record says whether it moved the head; if it did (the restore returned, or crashed "
        f"after moving the head), {finish or 'repair with --head its target'} finishes it; if "
        f"it did not (it failed before moving the head), {keep}"
    )
