"""How a pipeline declares what its state must look like: per operator state, a Great
Expectations 1.x ExpectationSuite (built in code, or stored as JSON and loaded by name)
and batchpoint's own state checks.

    quality = PipelineQuality(
        states=(
            StateQuality("balances", "balances", suite="payments_balances",
                         checks=(RecomputeSample(...),)),
            StateQuality("dedup", "seen", suite=lambda: gx.ExpectationSuite(...)),
        ),
        suites_dir=Path(__file__).parent / "suites",
    )
    declare_quality(pipeline, quality)

A declaration names a state by the code's names; the gate binds it to the state's
identity (operator uid, state uid) and finds that state in each candidate by uid, so a
checkpoint written before a rename is judged by what the renamed state declares.

Declaring imports nothing heavy: a suite given by name or by a function is only built
when a gate loads it (importing great_expectations takes seconds, and Airflow and the CLI
import pipelines at start).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from batchpoint.errors import ConfigError
from batchpoint.quality.identity import DeclaredState, StateId, declared_states

if TYPE_CHECKING:
    from great_expectations import ExpectationSuite

    from batchpoint.quality.checks import StateCheck
    from batchpoint.runtime.api import Pipeline

#: Where a pipeline keeps its quality declaration (`Pipeline.properties`).
QUALITY_PROPERTY = "quality"


@dataclass(frozen=True)
class SuiteRef:
    """A suite stored as JSON: `<directory>/<name>.json`, with a `name` and a list of
    `expectations` ({"type": "expect_...", "kwargs": {...}}) as GX 1.x serialises them."""

    name: str
    directory: Path

    @property
    def path(self) -> Path:
        return Path(self.directory) / f"{self.name}.json"

    def load(self) -> ExpectationSuite:
        try:
            body = json.loads(self.path.read_text())
        except FileNotFoundError:
            known = sorted(p.stem for p in Path(self.directory).glob("*.json"))
            raise ConfigError(
                f"quality suite '{self.name}' not found: no {self.path} "
                f"(suites there: {', '.join(known) or 'none'})"
            ) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"quality suite {self.path} is not readable JSON: {exc}") from None
        return suite_from_json(body, str(self.path), default_name=self.name)


def suite_from_json(body: Any, where: str, default_name: str = "") -> ExpectationSuite:
    """An ExpectationSuite from its JSON form, as a GX 1.x context's expectations store
    writes it (ids, meta, notes, rendered content included) or as written by hand.

    Read with GX's own schemas, as its store reads the file: building the suite from
    Expectation objects instead would make GX refuse every one that carries the `id` it
    saved ("must not belong to another ExpectationSuite"). Any expectation GX cannot
    build is refused here: GX itself only logs and drops those, which would silently
    weaken the gate."""
    import great_expectations as gx
    from great_expectations.core.expectation_suite import ExpectationSuiteSchema

    if not isinstance(body, dict) or not isinstance(body.get("expectations"), list):
        raise ConfigError(f"quality suite {where}: expected an object with an 'expectations' list")
    configurations = _expectations_from_json(body["expectations"], where)
    try:
        fields = ExpectationSuiteSchema().load({**body, "expectations": []})
    except Exception as exc:  # marshmallow's ValidationError: a field GX does not accept
        raise ConfigError(f"quality suite {where} is not a GX suite: {exc}") from None
    fields["name"] = fields.get("name") or default_name
    if not fields["name"]:
        raise ConfigError(f"quality suite {where} has no name")
    suite = gx.ExpectationSuite(**{**fields, "expectations": configurations})
    if len(suite.expectations) != len(configurations):  # GX dropped one, only logging why
        raise ConfigError(f"quality suite {where}: GX did not accept all its expectations")
    return suite


def _expectations_from_json(specs: list[Any], where: str) -> list[Any]:
    """Each expectation as an ExpectationConfiguration GX can build, or a ConfigError
    that names every one it cannot (by position and type)."""
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfigurationSchema,
    )

    schema = ExpectationConfigurationSchema()
    built, problems = [], []
    for i, spec in enumerate(specs):
        try:
            if not isinstance(spec, dict):
                raise TypeError(f"expected an object, found {spec!r}")
            configuration = schema.load(spec)
            configuration.to_domain_obj()  # raises on an unknown type or bad kwargs
            built.append(configuration)
        except Exception as exc:  # GX raises many types here; all mean "bad config"
            problems.append(f"expectation {i} ({_type_of(spec)}): {exc}")
    if problems:
        raise ConfigError(f"quality suite {where} has invalid expectations: " + "; ".join(problems))
    return built


def _type_of(spec: Any) -> str:
    return str(spec.get("type", "?")) if isinstance(spec, dict) else "?"


@dataclass(frozen=True)
class StateQuality:
    """What one state of one operator must satisfy."""

    operator: str
    state: str
    # A stored suite's name, a SuiteRef, a function that builds an ExpectationSuite, or
    # the suite itself; None for batchpoint's checks only.
    suite: str | SuiteRef | Callable[[], ExpectationSuite] | ExpectationSuite | None = None
    checks: tuple[StateCheck, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.operator}/{self.state}"


@dataclass(frozen=True)
class LoadedSuite:
    key: str  # operator/state
    name: str
    suite: ExpectationSuite


@dataclass(frozen=True)
class PipelineQuality:
    states: tuple[StateQuality, ...] = ()
    suites_dir: Path | None = None  # where suites given by name are found
    count_rows: bool = True  # count every state's rows against its handles
    audit: bool = False  # audited checkpoints: run the suites before completing

    def for_state(self, operator: str, state: str) -> list[StateQuality]:
        return [s for s in self.states if s.operator == operator and s.state == state]

    def suite_name(self, declared: StateQuality) -> str | None:
        """The suite's name without building it (for skipping and reports)."""
        suite = declared.suite
        if suite is None:
            return None
        if isinstance(suite, str):
            return suite
        if isinstance(suite, SuiteRef):
            return suite.name
        if callable(suite):
            return getattr(suite, "__name__", declared.key)
        return str(getattr(suite, "name", declared.key))

    def load(self, declared: StateQuality) -> LoadedSuite | None:
        """Build the declared suite (this imports Great Expectations)."""
        suite = declared.suite
        if suite is None:
            return None
        if isinstance(suite, str):
            if self.suites_dir is None:
                raise ConfigError(
                    f"quality of {declared.key}: suite '{suite}' is given by name but no "
                    "suites_dir says where to find it"
                )
            suite = SuiteRef(suite, self.suites_dir)
        if isinstance(suite, SuiteRef):
            built = suite.load()
        elif callable(suite):
            built = suite()
        else:
            built = suite
        import great_expectations as gx

        if not isinstance(built, gx.ExpectationSuite):
            raise ConfigError(
                f"quality of {declared.key}: expected an ExpectationSuite, got "
                f"{type(built).__name__}"
            )
        return LoadedSuite(declared.key, built.name, built)


def is_skipped(skip: Collection[str], *names: str | None) -> bool:
    """Skip by suite or check name, or by `operator/state` for everything on a state."""
    return any(n is not None and n in skip for n in names)


def state_skipped(skip: Collection[str], state: DeclaredState) -> bool:
    """Everything on a state is skipped by its names (`operator/state`) or its uid
    (`operator uid/state uid`)."""
    return is_skipped(skip, state.label, state.id.key)


def state_id(pipeline: Pipeline, declared: StateQuality) -> StateId:
    """The identity of the state a (validated) declaration names."""
    op = pipeline.operators[declared.operator]
    return StateId(op.uid, op.state_uid(declared.state))


def bound_quality(
    pipeline: Pipeline, quality: PipelineQuality
) -> dict[StateId, list[StateQuality]]:
    """What is declared on each state, by the state's identity."""
    bound: dict[StateId, list[StateQuality]] = {}
    for declared in quality.states:
        bound.setdefault(state_id(pipeline, declared), []).append(declared)
    return bound


def runs_something(
    pipeline: Pipeline, quality: PipelineQuality, skip: Collection[str], declared: StateQuality
) -> bool:
    """Whether anything declared on a state is left to run when `skip` is skipped."""
    if is_skipped(skip, declared.key, state_id(pipeline, declared).key):
        return False
    if declared.suite is not None and not is_skipped(skip, quality.suite_name(declared)):
        return True
    return any(not is_skipped(skip, c.name) for c in declared.checks)


def reads_state(pipeline: Pipeline, quality: PipelineQuality, skip: Collection[str]) -> bool:
    """Whether a gate that skips `skip` reads any state (with Spark): a suite or check is
    left to run, or rows are counted on a state not skipped. Skipping all of them leaves
    integrity alone, which needs no Spark."""
    counted = quality.count_rows and any(
        not state_skipped(skip, state) for state in declared_states(pipeline).values()
    )
    return counted or any(runs_something(pipeline, quality, skip, d) for d in quality.states)


def skippable_names(pipeline: Pipeline, quality: PipelineQuality) -> list[str]:
    """What a gate may be asked to skip: every declared suite and check by name, and
    every state of the pipeline (everything on it, its row count too) as `operator/state`
    and by its uid, `operator uid/state uid`."""
    states = declared_states(pipeline).values()
    names = {s.label for s in states} | {s.id.key for s in states}
    for declared in quality.states:
        names.add(declared.key)
        suite = quality.suite_name(declared)
        if suite is not None:
            names.add(suite)
        names.update(check.name for check in declared.checks)
    return sorted(names)


def check_skip_names(pipeline: Pipeline, quality: PipelineQuality, skip: Collection[str]) -> None:
    """A misspelt name would otherwise skip nothing, silently: the suite the operator
    meant to skip would still run (and could quarantine the candidate)."""
    valid = skippable_names(pipeline, quality)
    unknown = sorted(set(skip) - set(valid))
    if unknown:
        raise ConfigError(
            f"skip_suites: pipeline '{pipeline.name}' declares no suite, check or state named "
            f"{', '.join(repr(n) for n in unknown)}; valid names: {', '.join(valid) or 'none'}"
        )
    states = declared_states(pipeline).values()
    for name in sorted(set(skip)):
        named = next((s for s in states if s.label == name), None)
        by_uid = next((s for s in states if s.id.key == name), None)
        if named is not None and by_uid is not None and named != by_uid:
            # A rename that kept the uid, and another state took the old name.
            raise ConfigError(
                f"skip_suites: '{name}' names state {named.label} and is the uid of state "
                f"{by_uid.label}; skip {named.label} by its uid '{named.id.key}', or "
                f"{by_uid.label} by its names '{by_uid.label}'"
            )


def declare_quality(pipeline: Pipeline, quality: PipelineQuality) -> Pipeline:
    pipeline.properties[QUALITY_PROPERTY] = quality
    return pipeline


def quality_of(pipeline: Pipeline) -> PipelineQuality:
    found = pipeline.properties.get(QUALITY_PROPERTY)
    if found is None:
        return PipelineQuality()
    if not isinstance(found, PipelineQuality):
        raise ConfigError(
            f"pipeline '{pipeline.name}': property '{QUALITY_PROPERTY}' should be a "
            f"PipelineQuality, found {type(found).__name__}"
        )
    return found


def audit_enabled(pipeline: Pipeline) -> bool:
    """Whether the pipeline asked for audited checkpoints (write-audit-publish)."""
    return quality_of(pipeline).audit


def validate_declaration(pipeline: Pipeline, quality: PipelineQuality) -> None:
    """Every declared state exists in the pipeline: a typo must not pass as 'no suite'."""
    for declared in quality.states:
        op = pipeline.operators.get(declared.operator)
        if op is None:
            renamed = next(
                (o.name for o in pipeline.operators.values() if o.uid == declared.operator), None
            )
            raise ConfigError(
                f"quality of {declared.key}: pipeline '{pipeline.name}' has no operator "
                f"'{declared.operator}' (operators: {sorted(pipeline.operators)})"
                + _uid_hint(declared.operator, renamed)
            )
        if declared.state not in op.states:
            renamed = next((s for s in op.states if op.state_uid(s) == declared.state), None)
            raise ConfigError(
                f"quality of {declared.key}: operator '{declared.operator}' has no state "
                f"'{declared.state}' (states: {sorted(op.states)})"
                + _uid_hint(declared.state, renamed)
            )
        for check in declared.checks:
            # a check of batchpoint's own kind says what keeps it from running (a user's
            # check need not have the method)
            judge = getattr(check, "declaration_problems", None)
            if judge is not None and (problems := judge(pipeline, declared.operator)):
                raise ConfigError(
                    f"quality of {declared.key}: check '{check.name}': " + "; ".join(problems)
                )


def _uid_hint(given: str, named: str | None) -> str:
    """A declaration that gives a uid where the code's name is asked (after a rename
    that kept the uid): which name to write."""
    if named is None:
        return ""
    return f"; '{given}' is the uid of '{named}': declare its quality by that name"
