"""The restore DAG's form: its params (with the quality gate's fields in a section) and
the table of them in the DAG's docs."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import Param

from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.quality.suites import quality_of, skippable_names
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.restore import ungated_phrase

GATE_SECTION = "Quality gate"


@dataclass(frozen=True)
class FormField:
    """One field of the form: its Param and, when the DAG's docs explain it, its row
    there. `description` and `doc` are format strings: `{phrase}` is the typed
    confirmation, `{declared}` what the gate could skip, `{downstream}` the pipelines a
    cascade would consider (a literal brace is doubled)."""

    name: str
    default: Any
    title: str
    description: str
    schema: Mapping[str, Any]
    section: str | None = None
    doc: str | None = None  # the meaning in the docs' table


FIELDS: tuple[FormField, ...] = (
    FormField(
        "source",
        "latest",
        "Restore from",
        "latest (the newest retained checkpoint that passes the checks, else older ones), "
        "a checkpoint id, or a savepoint folder (s3://..., file:///..., or a path under the "
        "storage root).",
        {"type": "string", "minLength": 1},
    ),
    FormField(
        "parallelism",
        None,
        "New parallelism",
        "Empty: keep it. An integer: every operator and sink. An object: per operator, "
        'e.g. {{"balances": 4}}.',
        {"type": ["null", "integer", "object"]},
    ),
    FormField(
        "dry_run",
        False,
        "Dry run",
        "Only check the candidates and report; change nothing: no restore, no quarantine, "
        "no stored quality report.",
        {"type": "boolean"},
        doc="check and report only: nothing restored, quarantined or stored",
    ),
    FormField(
        "claim_mode",
        ClaimMode.NO_CLAIM.value,
        "Claim mode",
        "claim: the pipeline takes ownership of what it restores, so retention drops it "
        "(and GC deletes its files) once newer checkpoints complete, even a savepoint. "
        "no_claim: it stays retained as it was. A savepoint folder is copied in and never "
        "deleted either way.",
        {"type": "string", "enum": [m.value for m in ClaimMode]},
        doc="`claim`: retention may drop it (and GC its files) once newer checkpoints "
        "complete, even a savepoint; `no_claim` (the default): it stays as retained",
    ),
    FormField(
        "allow_non_restored_state",
        False,
        "Allow non-restored state",
        "Restore even though the code leaves state of the checkpoint unrestored (an "
        "operator, a state or a sink it no longer declares, or renamed without its uid). "
        "Off: such a restore is refused, naming each; the check task logs the deploy plan "
        "(as `batchpoint plan` prints it).",
        {"type": "boolean"},
        doc="restore even though the code leaves state of the checkpoint unrestored; off "
        "(the default): refused, the check task logs the deploy plan",
    ),
    FormField(
        "cascade",
        False,
        "Cascade to downstream pipelines",
        "Also restore each pipeline downstream that read what this restore takes back, to "
        "its newest checkpoint that read only what stays, each through its own checks and "
        "gate; refused anywhere, no head moves. {downstream} With dry run: the check "
        "task's log and XCom show which pipelines it would restore, and to what. Not "
        "with a savepoint folder, a new parallelism, claim, or non-restored state.",
        {"type": "boolean"},
        doc="also restore the pipelines downstream that read what it takes back "
        "(`batchpoint restore --cascade`), each through its own gate; refused anywhere, no "
        "head moves; with dry run, `check` shows the plan",
    ),
    FormField(
        "quality_gate",
        True,
        "Quality gate",
        "Check each candidate's integrity and state suites before restoring it. Turning it "
        "off checks only that the files are there, and needs the confirmation below.",
        {"type": "boolean"},
        GATE_SECTION,
        "on by default; a candidate the gate fails is quarantined (never offered again "
        "until released)",
    ),
    # What it guards is turning the gate off, so it is asked for only then: with the
    # gate on (the default) a restore takes only a candidate that passes, and the form
    # submits with this field empty (nullable: Airflow's form requires any other type).
    FormField(
        "confirm_ungated",
        None,
        "Confirm a restore without the gate",
        'Only with the quality gate off: type exactly "{phrase}". Leave it empty with the gate on.',
        {"type": ["null", "string"]},
        GATE_SECTION,
        "with the gate off, type exactly `{phrase}`, else `check` fails at once; empty "
        "with the gate on",
    ),
    FormField(
        "max_candidates",
        None,
        "How far back",
        "For latest: examine at most this many of the newest retained checkpoints "
        "(quarantined ones included). Empty: all of them.",
        {"type": ["null", "integer"], "minimum": 1},
        GATE_SECTION,
        "for *latest*: at most this many of the newest retained checkpoints (empty: all)",
    ),
    FormField(
        "skip_suites",
        [],
        "Suites to skip",
        "Suites, checks or operator/state names the gate does not run for this restore. {declared}",
        {"type": "array", "items": {"type": "string"}},
        GATE_SECTION,
        "suite, check or `operator/state` names the gate does not run; unknown names fail `check`",
    ),
)


def cascade_scope(downstream: Sequence[str]) -> str:
    """Which pipelines a cascade would consider, in words (the form and the UI's page)."""
    if not downstream:
        return "No deployed pipeline reads this one's sinks."
    return f"Downstream here: {', '.join(downstream)}."


def restore_params(pipeline: Pipeline, downstream: Sequence[str] = ()) -> dict[str, Param]:
    """The restore DAG's trigger form. Every value is plain JSON (the Airflow 3 UI builds
    the form from the params' JSON schema); the check task validates them again.
    `downstream`: the deployed pipelines a cascade would consider, in order."""
    skippable = skippable_names(pipeline, quality_of(pipeline))
    words = {
        "downstream": cascade_scope(downstream),
        "phrase": ungated_phrase(pipeline.name),
        "declared": f"Declared: {', '.join(skippable)}."
        if skippable
        else "This pipeline declares none.",
    }
    params = {}
    for field in FIELDS:
        extra: dict[str, Any] = dict(field.schema)
        if field.section is not None:
            extra["section"] = field.section
        if field.name == "skip_suites" and skippable:
            extra["examples"] = skippable
        params[field.name] = Param(
            copy.deepcopy(field.default),
            title=field.title,
            description=field.description.format(**words),
            **extra,
        )
    return params


def restore_form_table(pipeline: Pipeline) -> str:
    phrase = ungated_phrase(pipeline.name)
    rows = [(f.title, f.doc.format(phrase=phrase)) for f in FIELDS if f.doc is not None]
    return "| field | meaning |\n|---|---|\n" + "\n".join(f"| *{k}* | {v} |" for k, v in rows)
