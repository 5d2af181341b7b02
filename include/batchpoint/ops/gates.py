"""Choosing the quality gate: the one place that turns a `module:attr` reference
(BATCHPOINT_QUALITY_GATE, `--gate`, the restore DAG's `gate_ref`) or a gate object into
what `verify` reports with and what a restore runs on each candidate.

A reference may name a QualityRestoreGate (what the restore DAG loads, e.g. the
repository's demo's `demo.payments_quality:restore_gate`), a QualityGate, or any callable
restore gate (`runtime.restore.RestoreGate`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from batchpoint.errors import ConfigError
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.hook import QualityRestoreGate
from batchpoint.quality.suites import check_skip_names, quality_of
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.loader import load_object
from batchpoint.runtime.restore import (
    ConfigurableGate,
    GateOptions,
    RestoreGate,
    configure_gate,
)
from batchpoint.settings.values import check_ref
from batchpoint.storage import StoreRef

GATE_VARIABLE = "BATCHPOINT_QUALITY_GATE"

Log = Callable[[str], None]


def gate_reference(value: str | None, name: str = GATE_VARIABLE) -> str | None:
    """A gate reference as given (`name` says where from), checked by the same rule as
    every `module:attr` setting: None when empty, a ConfigError naming it when malformed."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        return check_ref(text)
    except ValueError as exc:
        raise ConfigError(f"{name}={text!r}: {exc}") from None


def gate_from_env(env: Mapping[str, str]) -> str | None:
    return gate_reference(env.get(GATE_VARIABLE))


def load_gate(reference: str) -> Any:
    """What the reference names, QualityRestoreGate unwrapped to its QualityGate only by
    `judging_gate`; loaded at run time (a Great Expectations gate must not be imported
    when a DAG file is parsed)."""
    return load_object(reference, "quality gate")


def rooted(found: QualityGate, store_ref: StoreRef, **options: Any) -> QualityGate:
    """`found`'s pipeline and suites on `store_ref`: a gate built from the environment
    judges $BATCHPOINT_ROOT, which the caller's root may not be."""
    return QualityGate(found.pipeline, store_ref, quality=found.quality, **options)


def judging_gate(
    reference: str | None,
    store_ref: StoreRef,
    *,
    pipeline: Pipeline | None = None,
    pipeline_name: str | None = None,
    **options: Any,
) -> QualityGate:
    """The QualityGate that `verify` reports with: the one `reference` names (a
    QualityRestoreGate gives its QualityGate), else one from `pipeline`'s declared
    suites; on `store_ref`. `pipeline_name`, when given, must be the one it judges."""
    if reference is None:
        if pipeline is None:
            raise ConfigError("no quality gate and no pipeline code to build one from")
        return QualityGate(pipeline, store_ref, quality=quality_of(pipeline), **options)
    found = load_gate(reference)
    if isinstance(found, QualityRestoreGate):
        found = found.gate
    if not isinstance(found, QualityGate):
        raise ConfigError(
            f"quality gate {reference!r} is a {type(found).__name__}, not a QualityGate or "
            "QualityRestoreGate: verify cannot report with it (give the pipeline code and "
            "no gate to use the pipeline's declared suites, or check the files only)"
        )
    if pipeline_name and pipeline_name != found.pipeline.name:
        raise ConfigError(
            f"quality gate {reference!r} judges pipeline '{found.pipeline.name}', "
            f"not '{pipeline_name}'"
        )
    return rooted(found, store_ref, **options)


@dataclass
class GateChoice:
    """The gate one restore runs (None: only the candidates' files are checked), a line
    saying what it is, and warnings worth showing."""

    gate: RestoreGate | None
    description: str
    name: str | None = None  # the reference or the object's repr, for reports
    warnings: list[str] = field(default_factory=list)


def choose_restore_gate(
    pipeline: Pipeline,
    options: GateOptions,
    *,
    gate: Any = None,
    reference: str | None = None,
    dry_run: bool = False,
    store_ref: StoreRef | None = None,
    log: Log = print,
) -> GateChoice:
    """The gate for one restore, set up as asked (a dry run records nothing, the skipped
    names are checked against what the pipeline declares). `gate` is an object, else
    `reference` is loaded. With `store_ref`, a QualityGate (or a QualityRestoreGate's)
    judges that store rather than the one it was built for."""
    if not options.enabled:
        choice = GateChoice(
            None,
            "quality gate OFF (confirmed): only the candidates' files are checked",
        )
        if options.skip_suites:
            choice.warnings.append("suites to skip ignored: no suite runs with the gate off")
        return choice
    if gate is None and reference is not None:
        gate = load_gate(reference)
    if gate is None:
        # Still checked: a name the pipeline does not declare is a mistake either way.
        check_skip_names(pipeline, quality_of(pipeline), options.skip_suites)
        return GateChoice(
            None,
            f"no quality gate configured ({GATE_VARIABLE}): only the candidates' files are checked",
        )
    name = reference or repr(gate)
    warnings: list[str] = []
    hook = _restore_hook(pipeline, options, gate, name, store_ref, log)
    if dry_run and hook is gate and not isinstance(gate, ConfigurableGate):
        warnings.append(f"dry run: the quality gate {name} cannot be told to record nothing")
    description = f"quality gate {name}"
    if options.skip_suites:
        description += f", skipping {', '.join(options.skip_suites)}"
    if dry_run:
        description += "; dry run: nothing is quarantined or stored"
    configured = configure_gate(hook, record=not dry_run, skip_suites=options.skip_suites)
    return GateChoice(configured, description, name, warnings)


def _restore_hook(
    pipeline: Pipeline,
    options: GateOptions,
    gate: Any,
    name: str,
    store_ref: StoreRef | None,
    log: Log,
) -> RestoreGate:
    """The restore gate a configured gate object stands for (a QualityGate is wrapped so
    that it is built, or re-rooted on `store_ref`, only when a restore asks for it)."""
    if store_ref is not None and isinstance(gate, QualityRestoreGate):
        gate = gate.gate
    if isinstance(gate, QualityGate):
        if gate.pipeline.name != pipeline.name:
            raise ConfigError(
                f"quality gate {name!r} judges pipeline '{gate.pipeline.name}', "
                f"not '{pipeline.name}'"
            )
        # The gate checks them too, once built; checked here as well so a misspelt name
        # fails before the gate is announced and Great Expectations is imported.
        check_skip_names(gate.pipeline, gate.quality, options.skip_suites)
        found, checksums = gate, gate.checksums
        return QualityRestoreGate(
            (lambda: rooted(found, store_ref, checksums=checksums, log=log))
            if store_ref is not None
            else (lambda: found)
        )
    if callable(gate):
        return gate  # any RestoreGate, called as it is, on whatever store it was built for
    raise ConfigError(
        f"quality gate {name!r} is a {type(gate).__name__}, not a QualityRestoreGate, "
        "a QualityGate or a callable restore gate"
    )


def judged_pipeline(gate: Any) -> str | None:
    """The pipeline a quality gate judges (a QualityRestoreGate's is built to see it);
    None for any other restore gate, which may be asked about any pipeline."""
    if isinstance(gate, QualityRestoreGate):
        gate = gate.gate
    return gate.pipeline.name if isinstance(gate, QualityGate) else None


def choose_member_gate(
    member: Pipeline,
    options: GateOptions,
    *,
    gate: Any = None,
    reference: str | None = None,
    dry_run: bool = False,
    store_ref: StoreRef | None = None,
    log: Log = print,
) -> GateChoice:
    """The gate of one pipeline of a cascade, chosen as its own restore chooses it, from
    the deployment's gate (`gate`, else `reference` loaded): except that a quality gate
    built for another pipeline does not judge this one, whose candidates then get their
    files checked only (said, not refused: a deployment names one gate for all)."""
    if options.enabled and gate is None and reference is not None:
        gate = load_gate(reference)
    judges = judged_pipeline(gate) if options.enabled else None
    if judges is None or judges == member.name:
        return choose_restore_gate(
            member, options, gate=gate, reference=reference, dry_run=dry_run,
            store_ref=store_ref, log=log,
        )  # fmt: skip
    choice = GateChoice(
        None,
        f"the quality gate {reference or repr(gate)} judges pipeline '{judges}', not "
        f"'{member.name}': only the candidates' files of '{member.name}' are checked",
    )
    if options.skip_suites:
        choice.warnings.append(f"suites to skip ignored for '{member.name}': no suite runs")
    return choice
