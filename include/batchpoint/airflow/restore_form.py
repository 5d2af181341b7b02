"""The restore DAG's form: its params (with the quality gate's fields in a section) and
the table of them in the DAG's docs."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from batchpoint.quality.suites import quality_of, skippable_names
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.restore import ungated_phrase

GATE_SECTION = "Quality gate"


def restore_params(pipeline: Pipeline) -> dict[str, Param]:
    """The restore DAG's trigger form. Every value is plain JSON (the Airflow 3 UI builds
    the form from the params' JSON schema); the check task validates them again."""
    skippable = skippable_names(pipeline, quality_of(pipeline))
    skip_extra: dict[str, Any] = {"examples": skippable} if skippable else {}
    return {
        "source": Param(
            "latest",
            type="string",
            minLength=1,
            title="Restore from",
            description=(
                "latest (the newest retained checkpoint that passes the checks, else "
                "older ones), a checkpoint id, or a savepoint folder (s3://..., "
                "file:///..., or a path under the storage root)."
            ),
        ),
        "parallelism": Param(
            None,
            type=["null", "integer", "object"],
            title="New parallelism",
            description=(
                "Empty: keep it. An integer: every operator and sink. An object: "
                'per operator, e.g. {"balances": 4}.'
            ),
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description=(
                "Only check the candidates and report; change nothing: no restore, no "
                "quarantine, no stored quality report."
            ),
        ),
        "claim": Param(
            False,
            type="boolean",
            title="Claim the restored checkpoint",
            description=(
                "CLAIM mode: the pipeline takes ownership of what it restores, so "
                "retention drops it (and GC deletes its files) once newer checkpoints "
                "complete, even a savepoint. Off (NO_CLAIM): it stays retained as it was. "
                "A savepoint folder is copied in and never deleted either way."
            ),
        ),
        "allow_non_restored_state": Param(
            False,
            type="boolean",
            title="Allow non-restored state",
            description=(
                "Restore even though the code leaves state of the checkpoint unrestored "
                "(an operator, a state or a sink it no longer declares, or renamed "
                "without its uid). Off: such a restore is refused, naming each; the "
                "check task logs the deploy plan (as `batchpoint plan` prints it)."
            ),
        ),
        "quality_gate": Param(
            True,
            type="boolean",
            title="Quality gate",
            description=(
                "Check each candidate's integrity and state suites before restoring it. "
                "Turning it off checks only that the files are there, and needs the "
                "confirmation below."
            ),
            section=GATE_SECTION,
        ),
        "confirm_ungated": Param(
            "",
            type="string",
            title="Confirm a restore without the gate",
            description=(
                f'Only with the quality gate off: type exactly "{ungated_phrase(pipeline.name)}".'
            ),
            section=GATE_SECTION,
        ),
        "max_candidates": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="How far back",
            description=(
                "For latest: examine at most this many of the newest retained checkpoints "
                "(quarantined ones included). Empty: all of them."
            ),
            section=GATE_SECTION,
        ),
        "skip_suites": Param(
            [],
            type="array",
            items={"type": "string"},
            title="Suites to skip",
            description=(
                "Suites, checks or operator/state names the gate does not run for this "
                "restore. "
                + (
                    f"Declared: {', '.join(skippable)}."
                    if skippable
                    else "This pipeline declares none."
                )
            ),
            section=GATE_SECTION,
            **skip_extra,
        ),
    }


def restore_form_table(pipeline: Pipeline) -> str:
    rows = [
        ("Dry run", "check and report only: nothing restored, quarantined or stored"),
        (
            "Claim the restored checkpoint",
            "CLAIM mode: retention may drop it (and GC its files) once newer checkpoints "
            "complete, even a savepoint; off (NO_CLAIM, the default): it stays as retained",
        ),
        (
            "Allow non-restored state",
            "restore even though the code leaves state of the checkpoint unrestored; off "
            "(the default): refused, the check task logs the deploy plan",
        ),
        (
            "Quality gate",
            "on by default; a candidate the gate fails is quarantined (never offered "
            "again until released)",
        ),
        (
            "Confirm a restore without the gate",
            f"with the gate off, type exactly `{ungated_phrase(pipeline.name)}`, "
            "else `check` fails at once",
        ),
        (
            "How far back",
            "for *latest*: at most this many of the newest retained checkpoints (empty: all)",
        ),
        (
            "Suites to skip",
            "suite, check or `operator/state` names the gate does not run; unknown names "
            "fail `check`",
        ),
    ]
    return "| field | meaning |\n|---|---|\n" + "\n".join(f"| *{k}* | {v} |" for k, v in rows)
