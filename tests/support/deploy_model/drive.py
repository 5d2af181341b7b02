"""The driver of one deploy sequence from a seed: random deploys (changes.py), each
answered as a user would when refused (the advised fix, a rollback, or a restore
allowing non-restored state), between epochs, restores, savepoints, exports and
imports, stop-with-savepoint and resume, `repair`, and records as an older or a newer
release wrote them."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

from batchpoint.errors import BatchpointError, DeployRefused
from support.deploy_model import changes_schema  # noqa: F401  (registers its kinds)
from support.deploy_model.changes import KINDS, Change, draw
from support.deploy_model.checks import Violation
from support.deploy_model.records import as_future_version, as_version_1, uids_are_names
from support.deploy_model.sequence import Sequence, Tally, Violated, first_line
from support.deploy_model.version import initial
from support.deploy_model.world import World

#: What happens between deploys, with its weight (a deploy weighs DEPLOY).
ACTIONS = {
    "epoch": 10,
    "restore": 8,
    "savepoint": 5,
    "import": 4,
    "stop": 4,
    "repair": 3,
    "gc": 4,
    "dispose": 3,
    "records-v1": 3,
    "records-newer": 2,
    "import-race": 2,
}
DEPLOY = 40
#: Switches that are not kinds of change: `migrate` (a change no rule migrates comes with
#: a migrate= function), `allow` (restores that allow non-restored state: random ones,
#: and answers to a refusal of dropped state).
FLAGS = ("migrate", "allow")
DROPS = ("dropped",)


@dataclass(frozen=True)
class Options:
    deploys: int = 8
    exclude: frozenset[str] = frozenset()  # change kinds and actions left out
    verbose: bool = False
    #: steps to take first, in this order: actions, and kinds of change (a deploy of one
    #: of that kind; skipped when none applies); then random ones
    script: tuple[str, ...] = ()

    def kinds(self) -> list[str]:
        """The change kinds drawn, and `migrate` (changes answered by a migrate=)."""
        return sorted(k for k in [*KINDS, *FLAGS] if k not in self.exclude)

    def actions(self) -> dict[str, int]:
        return {a: w for a, w in ACTIONS.items() if a not in self.exclude}

    def unknown(self) -> list[str]:
        """Excluded names that are no kind, action or switch (a typo)."""
        return sorted(self.exclude - {*KINDS, *FLAGS, *ACTIONS})


@dataclass
class SequenceResult:
    seed: int
    tally: Tally
    seconds: float


def run_sequence(world: World, seed: int, options: Options) -> SequenceResult:
    started = time.monotonic()
    driver = Driver(world, seed, options)
    with contextlib.suppress(Violated):
        driver.run()
    return SequenceResult(seed, driver.seq.tally, time.monotonic() - started)


class Driver:
    def __init__(self, world: World, seed: int, options: Options) -> None:
        self.rng = random.Random(seed)
        self.options = options
        self.seq = Sequence(world, self.rng, options.verbose)
        self.world = world
        self.script = list(options.script)

    def run(self) -> None:
        seq = self.seq
        start = initial()
        for _ in range(self.rng.randint(0, 2)):
            start = replace(draw(self.rng, start, self._growing()).version, label="initial")
        seq.note(f"initial: {start.describe()}")
        seq.deploy(start)
        seq.epoch()
        seq.epoch()
        actions = self.options.actions()
        names, weights = [*actions, "deploy"], [*actions.values(), DEPLOY]
        while self.script or seq.tally.deploys < self.options.deploys:
            step = self.script.pop(0) if self.script else self.rng.choices(names, weights)[0]
            if step in KINDS:
                self.do_deploy(step)
                continue
            seq.tally.actions[step] += 1
            getattr(self, "do_" + step.replace("-", "_"))()

    def _growing(self) -> list[str]:
        return [
            k
            for k in ("add-op", "add-sink", "add-state", "add-column")
            if k in self.options.kinds()
        ]

    # -- deploys -----------------------------------------------------------------------

    def do_deploy(self, kind: str | None = None) -> None:
        seq = self.seq
        change = self.draw(kind)
        if change is None:
            return
        seq.note(f"deploy {seq.tally.deploys} [{change.kind}]: {change.label}")
        seq.deploy(change.version)
        attempt = seq.epoch()
        if not attempt.completed:
            self.respond(change, refused=attempt.refused)

    def draw(self, kind: str | None = None) -> Change | None:
        """A change of `kind` (None when it does not apply), else of a random kind."""
        seq = self.seq
        assert seq.version is not None
        kinds = self.options.kinds()
        if kind is None:
            change = draw(self.rng, seq.version, kinds)
        else:
            change = KINDS[kind](self.rng, seq.version, frozenset(kinds))
            if change is None:
                seq.note(f"no change of kind {kind} applies")
                return None
        seq.tally.deploys += 1
        seq.tally.changes[change.kind] += 1
        return change

    def respond(self, change: Change, *, refused: bool) -> None:
        """What the refusal (or the failed epoch) advises, or a rollback."""
        seq = self.seq
        choices = ["rollback"] + (["fix", "fix"] if change.fixed is not None else [])
        plan = seq.world.driver.last_plan
        if (
            refused
            and plan is not None
            and _only_drops(plan)
            and "allow" not in self.options.exclude
        ):
            choices.append("allow")
        choice = self.rng.choice(choices)
        seq.tally.responses[choice] += 1
        seq.note(f"  respond: {choice}")
        if choice == "fix" and change.fixed is not None:
            seq.deploy(replace(change.fixed, label=change.label + " (fixed)"))
            if seq.epoch().completed:
                return
        elif (
            choice == "allow"
            and seq.ref.head is not None
            and seq.restore(seq.ref.head, allow=True) is not None
            and seq.epoch().completed
        ):
            return
        self.rollback()

    def rollback(self) -> None:
        seq = self.seq
        seq.note("  roll back to the code of the head")
        seq.deploy(seq.head_version())
        if not seq.epoch().completed:
            seq.violate(Violation("stuck", "the code that wrote the head does not run on it"))

    # -- the rest ------------------------------------------------------------------------

    def do_epoch(self) -> None:
        if not self.seq.epoch().completed:
            self.rollback()

    def targets(self) -> list[int]:
        seq = self.seq
        retained = set(self.world.retained()) - seq.damaged
        return sorted(c for c in retained if c in seq.ref.snapshots)

    def do_restore(self) -> None:
        targets = self.targets()
        if targets:
            allow = "allow" not in self.options.exclude and self.rng.random() < 0.2
            self.seq.restore(self.rng.choice(targets), allow=allow)

    def do_savepoint(self) -> None:
        folder = self._folder()
        attempt = self.seq.epoch(savepoint=folder)
        if attempt.completed and attempt.checkpoint_id is not None:
            self.seq.folders[folder] = attempt.checkpoint_id
        else:
            self.rollback()

    def _folder(self) -> str:
        return f"savepoints/dm/sp-{len(self.seq.folders) + 1}-{self.rng.randrange(10**6)}"

    def do_import(self) -> None:
        if self.seq.folders:
            folder = self.rng.choice(sorted(self.seq.folders))
            self.seq.restore(self.seq.folders[folder], folder=folder)

    def do_stop(self) -> None:
        """Stop with a savepoint, maybe deploy, then resume or restore from it."""
        seq = self.seq
        folder = self._folder()
        attempt = seq.epoch(savepoint=folder, stop=True)
        if not attempt.completed or attempt.checkpoint_id is None:
            self.rollback()
            return
        seq.folders[folder] = attempt.checkpoint_id
        seq.stopped = True
        seq.epoch()  # refused: stopped
        change = self.draw() if self.rng.random() < 0.7 else None
        if change is not None:
            seq.note(f"deploy {seq.tally.deploys} [{change.kind}] while stopped: {change.label}")
            seq.deploy(change.version)
        if self.rng.random() < 0.5 or seq.restore(attempt.checkpoint_id, folder=folder) is None:
            self.world.resume()
            seq.stopped = False
            seq.note("resumed")
        result = seq.epoch()
        if not result.completed:
            if change is not None:
                self.respond(change, refused=result.refused)
            else:
                self.rollback()

    def do_repair(self) -> None:
        seq = self.seq
        seq.note(f"repair: {self.world.repair()}")
        seq.check()

    def do_gc(self) -> None:
        seq = self.seq
        seq.note(f"gc: {self.world.gc()}")
        seq.check()

    def do_dispose(self) -> None:
        """Dispose of an exported savepoint the pipeline retains, then collect garbage:
        its folder stays restorable."""
        seq = self.seq
        exported = {c: f for f, c in seq.folders.items()}
        retained = [c for c in self.targets() if c in exported and c != seq.ref.head]
        if not retained:
            return
        target = self.rng.choice(retained)
        try:
            self.world.dispose(target)
        except BatchpointError as exc:  # the base of what is retained: refused, rightly
            seq.note(f"dispose {target} refused: {exc}")
            return
        seq.damaged.add(target)
        seq.note(f"savepoint {target} disposed of (its folder {exported[target]} kept)")
        self.do_gc()

    def do_records_v1(self) -> None:
        seq = self.seq
        head = seq.ref.head
        if head is None or not seq.ref.snapshots[head].recorded:
            return
        completed = self.world.coordinator.completed.get(head)
        if completed.pending.properties.is_imported or not uids_are_names(completed.topology):
            return
        as_version_1(self.world.store, head)
        seq.ref.snapshots[head] = seq.ref.snapshots[head].unrecorded()
        seq.deploy(seq.version)  # a fresh engine reads the records again
        seq.note(f"checkpoint {head} rewritten as version-1 records")

    def do_records_newer(self) -> None:
        """The head's outcome as a newer release would write it: refused, never
        misread; a restore of the latest falls back to the previous good checkpoint."""
        seq = self.seq
        head = seq.ref.head
        if head is None or len(self.targets()) < 2 or seq.stopped:
            return
        as_future_version(self.world.store, head)
        seq.damaged.add(head)
        seq.deploy(seq.version)
        seq.note(f"checkpoint {head} rewritten with an unknown record version")
        seq.input()
        attempt = self.world.epoch()
        if attempt.completed:
            seq.violate(Violation("newer-record", f"an epoch completed on {head}: misread"))
        if attempt.jobs:
            seq.violate(Violation("spark-before-refusal", f"{attempt.jobs} job(s) on {head}"))
        seq.tally.refusals["trigger: unknown record version"] += 1
        try:
            restored = self.world.restore("latest")
        except DeployRefused as exc:
            # the newest good checkpoint does not fit this code (rightly refused): the
            # user restores it with the code that wrote it
            seq.note(f"restore latest refused for this code: {first_line(exc)}")
            target = max(self.targets())
            seq.deploy(seq.versions[target])
            seq.restore(target)
            return
        except BatchpointError as exc:
            seq.violate(Violation("newer-record", f"restore latest did not fall back: {exc}"))
            return
        if restored == head or restored not in seq.ref.snapshots:
            seq.violate(Violation("newer-record", f"restore latest chose {restored}"))
        assert seq.version is not None
        seq.ref.restore(restored, False, seq.version)
        seq.tally.restores += 1
        seq.note(f"restore latest: head {restored}")
        seq.check()

    def do_import_race(self) -> None:
        """A scheduled epoch triggered while a savepoint folder is being imported: it
        builds on the head, never on the import."""
        seq = self.seq
        if not seq.folders or seq.stopped:
            return
        folder = self.rng.choice(sorted(seq.folders))
        ran: list[bool] = []

        def progress(line: str) -> None:
            if line.startswith("importing savepoint") and not ran:
                ran.append(True)
                seq.note(f"importing {folder}: an epoch meanwhile")
                seq.epoch()

        imported = self.world.import_folder(folder, progress)
        seq.ref.alias(imported, seq.folders[folder])
        seq.versions[imported] = seq.versions[seq.folders[folder]]
        if self.world.head() != seq.ref.head:
            seq.violate(
                Violation("import", f"the import {imported} moved the head to {self.world.head()}")
            )
        seq.note(f"imported {folder} as {imported}")


def _only_drops(plan: object) -> bool:
    refused: Iterable = [e for e in plan.entries if e.refused]  # type: ignore[attr-defined]
    return bool(refused) and all(e.verdict.value in DROPS for e in refused)
