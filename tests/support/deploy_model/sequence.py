"""One sequence of the deploy model checker: the steps a user takes (deploy a version,
run an epoch, restore, take a savepoint, ...) done on the real engine (World) and on
the reference at once, each followed by the invariants (checks.py). The first
violation ends the sequence (`Violated`); drive.py chooses the steps from a seed."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from batchpoint.errors import BatchpointError, DeployRefused
from batchpoint.protocol.deploy_plan import DeployPlan
from support.deploy_model.checks import (
    Violation,
    check_refusal,
    check_sinks,
    check_states,
    plan_problems,
    state_verdicts,
)
from support.deploy_model.reference import Judgement, Reference, judge
from support.deploy_model.rules import Expect
from support.deploy_model.version import Version
from support.deploy_model.world import Attempt, World

USERS = 20
EVENTS_PER_EPOCH = 5


class Violated(Exception):
    """The sequence broke an invariant: it ends here."""


@dataclass
class Tally:
    deploys: int = 0
    epochs: int = 0  # completed epochs (savepoints included)
    restores: int = 0
    refusals: Counter[str] = field(default_factory=Counter)  # by the plan's kinds
    actions: Counter[str] = field(default_factory=Counter)
    changes: Counter[str] = field(default_factory=Counter)  # deploys by kind of change
    responses: Counter[str] = field(default_factory=Counter)  # answers to refusals
    failures: Counter[str] = field(default_factory=Counter)  # expected epoch failures
    violations: list[Violation] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


class Sequence:
    def __init__(self, world: World, rng: random.Random, verbose: bool = False) -> None:
        self.world = world
        self.rng = rng
        self.verbose = verbose
        self.ref = Reference()
        self.tally = Tally()
        self.version: Version | None = None
        self.versions: dict[int, Version] = {}  # the code that wrote each checkpoint
        self.folders: dict[str, int] = {}  # exported savepoint folder -> checkpoint id
        self.damaged: set[int] = set()
        self.stopped = False
        self.started = time.monotonic()

    # -- bookkeeping -------------------------------------------------------------------

    def note(self, line: str) -> None:
        self.tally.log.append(line)
        if self.verbose:
            print(f"    {time.monotonic() - self.started:6.1f}s  {line}", flush=True)

    def violate(self, *violations: Violation) -> None:
        if violations:
            self.tally.violations.extend(violations)
            for v in violations:
                self.note(f"VIOLATION {v}")
            raise Violated(str(violations[0]))

    def deploy(self, version: Version) -> None:
        self.version = version
        self.world.deploy(version)

    def head_version(self) -> Version:
        assert self.ref.head is not None
        return self.versions[self.ref.head]

    # -- epochs ------------------------------------------------------------------------

    def input(self) -> None:
        rows = []
        for _ in range(EVENTS_PER_EPOCH):
            user = self.rng.randrange(USERS)
            rows.append(
                {"user": f"u{user}", "grp": f"g{user % 3}", "amount": self.rng.randint(1, 40)}
            )
        self.world.add_input(rows)
        self.ref.files.append(rows)

    def plan(self, checkpoint_id: int | None = None, allow: bool = False) -> DeployPlan:
        try:
            return self.world.plan(checkpoint_id, allow)
        except BatchpointError as exc:
            self.violate(Violation("plan", f"no plan against {checkpoint_id or 'the head'}: {exc}"))
            raise

    def check_plan(self, plan: DeployPlan, judgement: Judgement, what: str) -> None:
        if judgement.expect is Expect.DEPLOY and not plan.deployable:
            detail = f"{what}: the docs say deployable; the plan refuses: {plan.problems}"
            self.violate(Violation("plan-vs-docs", detail))
        if judgement.expect is Expect.REFUSE and plan.deployable:
            detail = f"{what}: the docs refuse ({', '.join(judgement.refusals)}); the plan: "
            self.violate(Violation("plan-vs-docs", detail + plan.render(compact=True)))
        verdicts = state_verdicts(plan)
        for label, kind in judgement.states.items():
            if verdicts.get(label, kind) != kind:
                detail = (
                    f"{what}: state {label} is {kind} by the docs, {verdicts[label]} by the plan"
                )
                self.violate(Violation("plan-vs-docs", detail))

    def epoch(self, savepoint: str | None = None, stop: bool = False) -> Attempt:
        """One epoch (or savepoint into the folder `savepoint`) of the code in force,
        over one new input file; checked against the plan made just before it."""
        assert self.version is not None
        judgement = self.ref.judge(self.version)
        plan = None if self.stopped else self.plan()
        if plan is not None:
            self.check_plan(plan, judgement, "epoch")
        self.input()
        if savepoint is None:
            attempt = self.world.epoch()
        else:
            attempt = self.world.savepoint(savepoint, stop=stop)
        what = "savepoint" if savepoint else "epoch"
        if attempt.refused:
            self._refused(plan, attempt, what)
            return attempt
        if plan is not None and not plan.deployable:
            self.violate(Violation("plan-vs-trigger", f"plan refused {plan.problems}; {what} ran"))
        if self.stopped:
            self.violate(Violation("stopped", f"{what} {attempt.checkpoint_id} ran while stopped"))
        if attempt.completed:
            self._completed(attempt, judgement, what)
        elif judgement.failing or judgement.maybe_failing:
            why = (judgement.failing or judgement.maybe_failing)[0]
            self.tally.failures[why.split(" of ")[0]] += 1
            self.note(f"{what} failed as expected ({why}): {first_line(attempt.error)}")
        else:
            self.violate(
                Violation("stuck", f"plan deployable, {what} failed: {first_line(attempt.error)}")
            )
        return attempt

    def _refused(self, plan: DeployPlan | None, attempt: Attempt, what: str) -> None:
        assert attempt.error is not None
        if self.stopped:
            if attempt.jobs or "stopped" not in str(attempt.error):
                self.violate(Violation("stopped", f"{what} while stopped: {attempt.error}"))
            self.tally.refusals["trigger: stopped"] += 1
            self.note(f"{what} refused: stopped")
            return
        self.violate(*check_refusal(plan, attempt.error, attempt.jobs))
        kinds = plan_problems(plan) if plan is not None else ["unknown"]
        for k in kinds:
            self.tally.refusals[f"trigger: {k}"] += 1
        self.note(f"{what} refused ({', '.join(kinds)})")

    def _completed(self, attempt: Attempt, judgement: Judgement, what: str) -> None:
        assert self.version is not None and attempt.checkpoint_id is not None
        if judgement.failing:
            self.violate(Violation("migration", f"{what} completed, but {judgement.failing[0]}"))
        cid = attempt.checkpoint_id
        self.ref.complete(self.version, cid)
        self.versions[cid] = self.version
        self.tally.epochs += 1
        self.note(
            f"{what} {cid} completed"
            + (f" (migrate= ran: {judgement.migrations})" if judgement.migrations else "")
        )
        self.check()

    def check(self) -> None:
        assert self.version is not None
        self.violate(*check_states(self.world, self.ref, self.version))
        self.violate(*check_sinks(self.world, self.ref, self.version))

    # -- restores ----------------------------------------------------------------------

    def restore(self, target: int, *, folder: str | None = None, allow: bool = False) -> int | None:
        """Restore to checkpoint `target` (or import `folder`, a savepoint of `target`);
        the checkpoint restored to, None when refused."""
        assert self.version is not None
        judgement = judge(self.version, self.ref.snapshots[target], allow, self.ref.tables)
        plan = self._restore_plan(target, folder, allow)
        what = f"restore to {folder or target}" + (" allowing non-restored state" if allow else "")
        self.check_plan(plan, judgement, what)
        jobs = self.world.spark_jobs()
        try:
            restored = self.world.restore(folder or target, allow)
        except DeployRefused as exc:
            self.violate(*check_refusal(plan, exc, self.world.spark_jobs() - jobs))
            for k in plan_problems(plan):
                self.tally.refusals[f"restore: {k}"] += 1
            self.note(f"{what}: refused ({', '.join(plan_problems(plan))})")
            return None
        if not plan.deployable:
            self.violate(
                Violation("plan-vs-trigger", f"{what}: plan refused {plan.problems}; restored")
            )
        if folder is not None:
            self.ref.alias(restored, target)
            self.versions[restored] = self.versions[target]
        self.ref.restore(restored, allow, self.version)
        self.stopped = False
        self.tally.restores += 1
        self.note(f"{what}: head {restored}")
        self.check()
        return restored

    def _restore_plan(self, target: int, folder: str | None, allow: bool) -> DeployPlan:
        if folder is None:
            return self.plan(target, allow)
        from batchpoint.ops.deploy import deploy_plan

        assert self.world.runner is not None
        pipeline = self.world.runner.pipeline
        try:
            return deploy_plan(
                pipeline, self.world.settings, savepoint=folder, allow_non_restored_state=allow
            )
        except BatchpointError as exc:
            self.violate(Violation("plan", f"no plan against savepoint {folder}: {exc}"))
            raise


def first_line(error: Any) -> str:
    text = f"{type(error).__name__}: {error}" if error is not None else "no error"
    return text.splitlines()[0][:300]
