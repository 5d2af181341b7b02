"""`restore [latest | ID | SAVEPOINT]`: the restore DAG's check and restore tasks in one
command. Candidates newest first (or the one named), the records and files then the
quality gate, the first that passes restored; each one found damaged (records or files)
or failed by the gate is quarantined, unless this is a dry run. Progress goes to stderr
(the gate can take minutes), the report to stdout. Exit 0 restored (or, dry, would
restore), 1 refused, 2 a mistake in the command."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.cascade import cmd_cascade
from batchpoint.cli.context import Command, add_gate_option
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command
from batchpoint.errors import BatchpointError, ConfigError, DeployRefused, RestoreRefused
from batchpoint.ops.gates import choose_restore_gate
from batchpoint.ops.restore import restore
from batchpoint.quality.report import CandidateReport
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import (
    CandidateCheck,
    ClaimMode,
    GateOptions,
    RestoreRun,
    RestoreSource,
    SourceKind,
    parse_max_candidates,
    parse_parallelism,
    ungated_phrase,
)


def gate_options(args: argparse.Namespace, pipeline: Pipeline) -> GateOptions:
    """The restore form's gate fields, from the flags, checked by the same code as the
    DAG's form before anything is read; only the wording of a missing confirmation
    changes, to name the flag to add."""
    try:
        max_candidates = parse_max_candidates(args.max_candidates)
    except ConfigError as exc:
        raise ConfigError(f"--max-candidates: {exc}") from None
    try:
        return GateOptions.from_form(
            pipeline.name,
            quality_gate=not args.no_gate,
            confirm_ungated=args.confirm or "",
            max_candidates=max_candidates,
            skip_suites=args.skip_suite,
        )
    except RestoreRefused:
        phrase = ungated_phrase(pipeline.name)
        typed = (args.confirm or "").strip()
        got = f"got --confirm {args.confirm!r}" if typed else "no --confirm was given"
        raise ConfigError(
            f"--no-gate restores pipeline '{pipeline.name}' without the quality gate, which "
            f'may bring back broken state: add exactly --confirm "{phrase}" ({got}), or '
            "leave out --no-gate"
        ) from None


def cmd_restore(cmd: Command) -> ExitCode:
    """Roll the pipeline back to a checkpoint or a savepoint (exit 1: refused).

    Candidates are checked newest first (files, then the quality gate) and the first that passes
    becomes the head; a damaged or failing one is quarantined. The report goes to stdout,
    the progress to stderr.

    $ batchpoint restore --dry-run
    $ batchpoint restore 6
    $ batchpoint restore s3://bucket/savepoints/before-upgrade --claim
    """
    args, settings = cmd.args, cmd.settings
    pipeline = cmd.pipeline()
    options = gate_options(args, pipeline)
    if not options.enabled and args.gate is not None:
        cmd.out.note(f"--gate {args.gate} ignored: the quality gate is off (--no-gate)")
    if args.cascade:
        return cmd_cascade(cmd, pipeline, options)
    # Every mistake is found before the first line of progress.
    operators = [op.name for op in pipeline.spec().operators if op.has_tasks]
    pipeline.spec(parse_parallelism(args.parallelism, operators))  # checks max_parallelism
    source = RestoreSource.parse(args.source)
    # A savepoint may start a pipeline the storage lacks.
    if source.kind is not SourceKind.SAVEPOINT:
        cmd.coordinator_of(pipeline.name)  # an unknown pipeline is a mistake, no refusal
    gate = choose_restore_gate(
        pipeline,
        options,
        reference=cmd.gate_ref() if options.enabled else None,
        dry_run=args.dry_run,
        store_ref=settings.store_ref,
        log=cmd.out.note,
    )
    for warning in gate.warnings:
        cmd.out.note(warning)
    cmd.out.note(gate.description)
    try:
        run = restore(
            PipelineDriver(pipeline, settings.store_ref, settings.checkpoint),
            source,
            gate,
            options,
            parallelism=args.parallelism,
            checksums=args.checksums,
            dry_run=args.dry_run,
            mode=ClaimMode.of(args.claim_mode),
            store_options=settings.store_options,
            savepoint_roots=settings.savepoint_roots,
            progress=cmd.out.progress,  # stderr, beside the report on stdout
            allow_non_restored_state=args.allow_non_restored_state,
        )
    except DeployRefused as exc:  # the code cannot take the chosen checkpoint's state
        plan: Any = exc.plan
        why = str(exc)
        cmd.out.emit(
            {"refused": why, "deploy_plan": plan.to_json()}, f"refused: {why}\n{plan.render()}"
        )
        return ExitCode.FAILED
    cmd.out.emit(run.to_json, lambda: report_text(run))
    return ExitCode.failed_if(run.refused)


def report_text(run: RestoreRun) -> str:
    plan = run.plan
    lines = [f"restore of pipeline '{plan.pipeline}' from {plan.source}: {run.gate.description}"]
    for check in plan.checks:
        lines += check_lines(check)
    if plan.chosen is None:
        lines.append(f"refused: {plan.refusal_headline()}")
        if plan.not_examined:
            further = len(plan.checks) + len(plan.not_examined)
            lines.append(
                f"to look further back: --max-candidates {further} "
                "(or leave it out for every retained checkpoint)"
            )
    elif not run.restored:
        lines.append(
            f"dry run: would restore {plan.chosen.description}; nothing changed "
            "(head not moved, nothing quarantined, no report stored)"
        )
    else:
        lines.append(
            f"restored pipeline {run.pipeline} to checkpoint {run.checkpoint_id} "
            f"(restore generation {run.restore_generation})"
            + (f", imported from {run.imported_from}" if run.imported_from else "")
            + (f", parallelism {run.parallelism}" if run.parallelism else "")
            + (
                "; claimed: retention may now drop it"
                if run.claimed
                else "; not claimed: it stays retained as it was"
            )
        )
    return "\n".join(lines)


def check_lines(check: CandidateCheck) -> list[str]:
    """One candidate's verdict: the gate report's own lines when the gate judged it."""
    if check.quarantine is not None:
        hint = f"batchpoint quarantine release {check.checkpoint_id}"
        return [f"  {check.description}: {check.quarantine}; `{hint}` to reconsider"]
    if check.problems or check.files is None:
        verdict = "FAILED, quarantined" if check.quarantined else "FAILED"
        lines = [f"  {check.description}: {verdict}, {len(check.problems)} problem(s)"]
        lines += [f"      - {p}" for p in check.problems[:5]]
        if len(check.problems) > 5:
            lines.append(f"      (and {len(check.problems) - 5} more)")
        return lines
    files = f"{check.files} file(s), {render.size(check.state_size or 0)}"
    gate = check.gate
    if gate is None:
        return [f"  {check.description}: ok ({files}; files checked, no quality gate)"]
    if isinstance(gate.report, Mapping):
        try:
            key = f"{gate.name} report on {check.description}"
            return CandidateReport.from_body(key, gate.report).render()
        except (BatchpointError, KeyError, TypeError, ValueError):
            pass  # a gate of the user's own with a report of its own shape: shown as JSON
    verdict = "passed" if gate.passed else "FAILED"
    text = gate.report if isinstance(gate.report, str) else json.dumps(gate.report, default=str)
    return [f"  {check.description}: {gate.name} {verdict}" + (f": {text}" if text else "")]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "restore", common, run=cmd_restore)
    p.add_argument(
        "source", nargs="?", default="latest", help="latest, a checkpoint id, or a savepoint"
    )
    p.add_argument(
        "--parallelism", default=None, help='new parallelism: an integer or {"op": n, ...}'
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check and report only: the head is not moved, nothing quarantined or stored",
    )
    p.add_argument(
        "--claim-mode",
        choices=[m.value for m in ClaimMode],
        default=ClaimMode.NO_CLAIM.value,
        help="claim: the pipeline takes ownership of the restored checkpoint, so "
        "retention drops it (and GC deletes its files) once newer checkpoints complete, "
        "even a savepoint; no_claim (the default): it stays as retained as it was",
    )
    p.add_argument(
        "--claim",
        dest="claim_mode",
        action="store_const",
        const=ClaimMode.CLAIM.value,
        help="the same as --claim-mode claim",
    )
    p.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="restore even though the code leaves state of the checkpoint unrestored "
        "(an operator, a state or a sink it no longer declares; see `batchpoint plan`)",
    )
    p.add_argument(
        "--cascade",
        action="store_true",
        help="also restore every pipeline downstream of it (BATCHPOINT_PIPELINE_REF names "
        "them) that read what the restore takes back, each with its own gate, as one "
        "operation; with --dry-run, show the plan",
    )
    p.add_argument(
        "--checksums",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="verify every file's sha256 before the gate (default: "
        "BATCHPOINT_RESTORE_VERIFY_CHECKSUMS, true); --no-checksums for huge states",
    )
    _add_gate_arguments(p)


def _add_gate_arguments(p: argparse.ArgumentParser) -> None:
    add_gate_option(
        p,
        "the quality gate, on by default when set (default: $BATCHPOINT_QUALITY_GATE; "
        "without one, only the files are checked)",
    )
    p.add_argument(
        "--no-gate", action="store_true", help="restore without the quality gate; needs --confirm"
    )
    p.add_argument(
        "--confirm",
        default="",
        metavar="TEXT",
        help='with --no-gate: exactly "restore <pipeline> without the gate"',
    )
    p.add_argument(
        "--max-candidates",
        default=None,
        metavar="N",
        help="for latest: examine at most the N newest retained checkpoints (default: all)",
    )
    p.add_argument(
        "--skip-suite",
        action="append",
        default=[],
        metavar="NAME",
        help="a suite, check or operator/state the gate does not run (repeatable)",
    )
