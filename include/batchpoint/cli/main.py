"""`batchpoint` command line. Every command reads the same storage as the Airflow DAGs
(BATCHPOINT_ROOT and BATCHPOINT_S3_* or --root), prints a table, or JSON with --json.

`savepoint`, `restore` and `verify` also need the pipeline's code: --pipeline-ref
module:attr or BATCHPOINT_PIPELINE_REF (`verify` finds it in the quality gate named by
BATCHPOINT_QUALITY_GATE too). `restore` runs that quality gate too, as the restore DAG
does. Long operations print their progress (to stderr with --json, so the JSON on stdout
stays parseable; always to stderr for `restore`, whose report is stdout). Exit codes: 0
done (or passed), 1 a check failed or a restore was refused, 2 a mistake in the command
or the setup."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from batchpoint.cli import tables
from batchpoint.errors import BatchpointError, CheckpointNotFound, ConfigError, RestoreRefused
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.gc import GarbageCollector
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.stats import CheckpointStats, CheckpointStatsTracker
from batchpoint.protocol.verify import check_handles
from batchpoint.runtime.api import Pipeline
from batchpoint.settings import Settings

if TYPE_CHECKING:
    from batchpoint.protocol.savepoints import SavepointLocation
    from batchpoint.quality.gate import QualityGate
    from batchpoint.quality.report import CandidateReport
    from batchpoint.runtime.restore import CandidateCheck, GateOptions, RestoreGate


def _pipelines(settings: Settings) -> list[str]:
    store = settings.store_ref.open()
    return [p.rstrip("/").rsplit("/", 1)[-1] for p in store.list_dirs("pipelines/")]


def _coordinator(args: argparse.Namespace) -> CheckpointCoordinator:
    settings: Settings = args.settings
    name = args.pipeline
    if not name:
        names = _pipelines(settings)
        if len(names) != 1:
            listed = ", ".join(names) or "none"
            raise BatchpointError(
                f"name a pipeline with --pipeline (found: {listed} in {settings.root})"
            )
        name = names[0]
    PipelineLayout(name)
    return CheckpointCoordinator(settings.store_ref.open(), name, settings.checkpoint)


def history_row(s: CheckpointStats) -> list[Any]:
    return [
        s.checkpoint_id,
        s.type.value,
        s.status.value,
        tables.when(s.trigger_time),
        tables.seconds(s.duration_s),
        tables.size(s.state_size),
        s.rows,
        f"{s.acknowledged}/{s.expected}",
        s.failure_reason and f"{s.failure_reason}: {s.failure_message}",
    ]


HISTORY_HEADERS = [
    "id",
    "type",
    "status",
    "triggered",
    "duration",
    "size",
    "rows",
    "acks",
    "reason",
]


def cmd_list(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    history = CheckpointStatsTracker(c).history(args.limit)
    head = c.head.get()
    if args.json:
        return {
            "pipeline": c.pipeline,
            "head": head.checkpoint_id,
            "checkpoints": [s.to_json() for s in history],
        }
    print(
        f"pipeline {c.pipeline}: head = checkpoint {head.checkpoint_id}, "
        f"retained = {c.completed.retained_ids()}"
    )
    print(tables.render(HISTORY_HEADERS, [history_row(s) for s in history]))
    return None


def cmd_show(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    stats, tasks = CheckpointStatsTracker(c).checkpoint(args.checkpoint_id)
    pending = c.get_checkpoint(args.checkpoint_id)
    if args.json:
        out = stats.to_json()
        out["barrier"] = dict(pending.barrier)
        out["tasks"] = [t.__dict__ for t in tasks]
        return out
    print(tables.render(HISTORY_HEADERS, [history_row(stats)]))
    print(
        f"\nbase: {pending.base_checkpoint_id}   restore generation: {pending.restore_generation}"
    )
    print(
        "\n"
        + tables.render(
            ["task", "attempt", "acked", "trigger->ack", "size", "rows"],
            [
                [
                    t.task,
                    t.attempt,
                    tables.when(t.ack_time),
                    tables.seconds(t.end_to_end_s),
                    tables.size(t.state_size),
                    t.rows,
                ]
                for t in tasks
            ],
        )
    )
    return None


def cmd_stats(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    tracker = CheckpointStatsTracker(c)
    summary = tracker.summary(tracker.history())
    failures = c.failures.state()
    if args.json:
        return {
            **summary.__dict__,
            "pipeline_status": failures.status.value,
            "consecutive_failures": failures.consecutive_failures,
        }
    print(
        f"pipeline {c.pipeline}: {failures.status.value}, "
        f"{failures.consecutive_failures} consecutive failure(s)"
    )
    if failures.reason:
        print(f"  {failures.reason}")
    print(
        f"checkpoints: {summary.count} ({summary.completed} completed, {summary.failed} "
        f"failed, {summary.in_progress} in progress)"
    )
    for label, triple, fmt in (
        ("duration", summary.duration_s, tables.seconds),
        ("state size", summary.state_size, tables.size),
    ):
        if triple:
            print(f"{label}: min {fmt(triple[0])}  avg {fmt(triple[1])}  max {fmt(triple[2])}")
    return None


# -- verify -------------------------------------------------------------------------------


def _verify_target(args: argparse.Namespace, c: CheckpointCoordinator) -> int | SavepointLocation:
    """The checkpoint id (settled) or savepoint folder `verify` was given; the head when
    none. Whatever the user typed wrong is a BatchpointError (exit 2), not a report."""
    from batchpoint.runtime.restore import savepoint_location

    text = (args.target or "").strip()
    if text.lower() in ("", "head"):
        head = c.head.get().checkpoint_id
        if head is None:
            raise BatchpointError(f"pipeline '{c.pipeline}' has no completed checkpoint yet")
        return head
    if text.isdigit():
        checkpoint_id = int(text)
        # The outcome record may be unreadable (that is a finding); it must exist.
        if not c.store.exists(c.layout.outcome(checkpoint_id)):
            if c.get_pending(checkpoint_id) is not None:
                raise BatchpointError(
                    f"checkpoint {checkpoint_id} of pipeline '{c.pipeline}' is still pending: "
                    "verify it once it has completed"
                )
            known = c.checkpoint_ids()
            shown = ", ".join(map(str, known[-10:])) if known else "none"
            raise CheckpointNotFound(
                f"pipeline '{c.pipeline}' has no checkpoint {checkpoint_id} (checkpoints: {shown})"
            )
        return checkpoint_id
    return savepoint_location(text, c.store, args.settings.store_options)


def _verify_files(args: argparse.Namespace) -> Any:
    """--integrity-only: every referenced file exists with its size (and checksum)."""
    from batchpoint.protocol.savepoints import check_savepoint

    c = _coordinator(args)
    target = _verify_target(args, c)
    if isinstance(target, int):
        completed = c.completed.get(target)
        what, files = f"checkpoint {target}", len(completed.handles)
        problems = [
            str(p) for p in check_handles(c.store, completed.handles, checksums=not args.quick)
        ]
    else:
        from batchpoint.protocol.savepoints import read_savepoint

        metadata = read_savepoint(target)
        what, files = f"savepoint {target.uri}", len(metadata.handles)
        problems = [str(p) for p in check_savepoint(target, metadata, checksums=not args.quick)]
    if args.json:
        out = {"target": what, "files": files, "problems": problems}
        if isinstance(target, int):
            out["checkpoint_id"] = target
        print(json.dumps(out, indent=2))
        return 1 if problems else 0
    print(f"{what}: {files} file(s), {len(problems)} problem(s)")
    for p in problems:
        print(f"  {p}")
    return 1 if problems else None


def _load_object(reference: str) -> Any:
    import importlib

    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"quality gate {reference!r}: expected 'package.module:attr'")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"quality gate {reference!r}: {exc}") from None


def _named_gate(args: argparse.Namespace) -> Any:
    """What --gate (default $BATCHPOINT_QUALITY_GATE) names, loaded; None when neither is
    set. A QualityRestoreGate, what the restore DAG loads, gives its QualityGate: its
    pipeline and suites are what `verify` and `restore` judge with (see _rooted_gate)."""
    from batchpoint.quality.hook import QualityRestoreGate

    if not args.gate:
        return None
    found = _load_object(args.gate)
    return found.gate if isinstance(found, QualityRestoreGate) else found


def _rooted_gate(args: argparse.Namespace, found: QualityGate, **options: Any) -> QualityGate:
    """`found`'s pipeline and suites on this command's storage root: a gate built from the
    environment judges $BATCHPOINT_ROOT, which --root may not be."""
    from batchpoint.quality.gate import QualityGate

    return QualityGate(found.pipeline, args.settings.store_ref, quality=found.quality, **options)


def _verify_gate(args: argparse.Namespace) -> QualityGate:
    """The quality gate the restore DAG would use (--gate or BATCHPOINT_QUALITY_GATE),
    else one from the pipeline's declared suites; on this command's storage root, with
    every GX result in full (observed values even for passing expectations)."""
    from batchpoint.quality.gate import QualityGate
    from batchpoint.quality.suites import quality_of

    options: dict[str, Any] = {
        "skip_suites": args.skip_suite,
        "checksums": not args.quick,
        "detailed": True,
        "log": _progress(args),
    }
    found = _named_gate(args)
    if found is None:
        try:
            pipeline = _pipeline(args)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (or --integrity-only to check the files only)") from None
        return QualityGate(
            pipeline, args.settings.store_ref, quality=quality_of(pipeline), **options
        )
    if not isinstance(found, QualityGate):
        raise ConfigError(
            f"quality gate {args.gate!r} is a {type(found).__name__}, not a QualityGate or "
            "QualityRestoreGate: verify cannot report with it (give --pipeline-ref and "
            "no --gate to use the pipeline's declared suites, or --integrity-only)"
        )
    if args.pipeline and args.pipeline != found.pipeline.name:
        raise ConfigError(
            f"quality gate {args.gate!r} judges pipeline '{found.pipeline.name}', "
            f"not '{args.pipeline}'"
        )
    return _rooted_gate(args, found, **options)


def cmd_verify(args: argparse.Namespace) -> Any:
    """The quality gate's full report on one checkpoint or savepoint folder: integrity,
    then the suites and checks. Read-only unless --quarantine."""
    from batchpoint.protocol.savepoints import located_checkpoint, read_savepoint

    if args.integrity_only:
        return _verify_files(args)
    say = _progress(args)
    gate = _verify_gate(args)
    target = _verify_target(args, gate.coordinator)
    if isinstance(target, int):
        what = f"checkpoint {target} of pipeline '{gate.pipeline.name}'"
        say(f"verifying {what}")
        gate.prepare()  # a broken suite is a setup error (exit 2), not a failed checkpoint
        report = gate.evaluate(target)
        if args.quarantine:
            gate.record(report)
    else:
        metadata = read_savepoint(target)
        if metadata.pipeline != gate.pipeline.name:
            raise BatchpointError(
                f"{target.uri} is a savepoint of pipeline '{metadata.pipeline}', "
                f"not of '{gate.pipeline.name}'"
            )
        what = f"savepoint {target.uri} (checkpoint {metadata.checkpoint_id})"
        say(f"verifying {what}")
        report = gate.evaluate_savepoint(located_checkpoint(target, metadata), target.store)
        if args.quarantine:
            say("not quarantined: a savepoint folder is quarantined once imported")
    code = 0 if report.passed else 1
    if args.json:
        print(json.dumps({"target": what, **report.to_body()}, indent=2, default=str))
        return code
    print(render_report(what, report))
    return code


def render_report(what: str, report: CandidateReport) -> str:
    """The report as tables: every expectation and check with what it observed, then
    the findings (integrity first: a checkpoint whose files are broken is not read)."""
    verdict = report.verdict()
    lines = [
        f"{what}: {verdict} ({len(report.findings)} finding(s), {tables.seconds(report.seconds)})"
    ]
    rows = report.result_rows()
    if rows:
        lines += [
            "",
            tables.render(
                ["state", "suite / check", "expectation", "result", "observed"],
                [
                    [r.state, r.source, r.item, "passed" if r.passed else "FAILED", r.observed]
                    for r in rows
                ],
            ),
        ]
    elif report.passed:
        lines.append(
            "integrity ok; " + ("every suite skipped" if report.skipped else "no suites declared")
        )
    for title, findings in (
        ("integrity findings", report.integrity_findings),
        ("state findings", report.state_findings),
    ):
        if findings:
            lines += [
                "",
                f"{title}:",
                tables.render(
                    ["object", "check", "problem"],
                    [[f.object, f.check, f.problem] for f in findings],
                ),
            ]
    if report.integrity_findings and not report.suites_run:
        lines.append("\nsuites not run: integrity failed first")
    if report.skipped:
        lines.append(f"\nskipped: {', '.join(sorted(report.skipped))}")
    if report.quarantined:
        lines.append("quarantined: no restore will offer it until it is released")
    return "\n".join(lines)


def cmd_gc(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    report = GarbageCollector(c).collect(
        dry_run=args.dry_run,
        history_limit=args.history_limit,
        progress=None if args.json else print,
    )
    summary = {
        "dry_run": report.dry_run,
        "deleted_files": len(report.deleted_files),
        "deleted_bytes": report.deleted_bytes,
        "pruned_checkpoints": report.pruned_checkpoints,
        "skipped_pending": report.skipped_pending,
    }
    if args.json:
        return summary
    verb = "would delete" if args.dry_run else "deleted"
    print(
        f"{verb} {len(report.deleted_files)} file(s), {tables.size(report.deleted_bytes)}; "
        f"pruned {report.pruned_checkpoints or 'no'} checkpoint record(s)"
    )
    return None


def cmd_reset(args: argparse.Namespace) -> Any:
    c = _coordinator(args)
    c.reset_failures()
    state = c.failures.state()
    return (
        {"status": state.status.value}
        if args.json
        else print(f"pipeline {c.pipeline}: {state.status.value}")
    )


def cmd_quarantine_list(args: argparse.Namespace) -> Any:
    from batchpoint.quality.quarantine import QuarantineStore

    c = _coordinator(args)
    quarantine = QuarantineStore(c.store, c.layout)
    held = [r for r in (quarantine.get(i) for i in quarantine.ids()) if r is not None]
    if args.json:
        return {
            "pipeline": c.pipeline,
            "quarantined": [
                {
                    "checkpoint_id": r.checkpoint_id,
                    "quarantined_at": r.quarantined_at,
                    "report": r.report.to_body(),
                }
                for r in held
            ],
        }
    if not held:
        print(f"pipeline {c.pipeline}: no checkpoint is quarantined")
        return None
    rows = [
        [r.checkpoint_id, tables.when(r.quarantined_at), str(r.report.findings[0])]
        if r.report.findings
        else [r.checkpoint_id, tables.when(r.quarantined_at), ""]
        for r in held
    ]
    print(tables.render(["id", "quarantined", "first finding"], rows))
    return None


def cmd_quarantine_release(args: argparse.Namespace) -> Any:
    from batchpoint.quality.quarantine import QuarantineStore

    c = _coordinator(args)
    released = QuarantineStore(c.store, c.layout).release(args.checkpoint_id)
    if not released:
        raise BatchpointError(
            f"checkpoint {args.checkpoint_id} of pipeline {c.pipeline} is not quarantined"
        )
    if args.json:
        return {"pipeline": c.pipeline, "released": args.checkpoint_id}
    print(
        f"checkpoint {args.checkpoint_id} released: restores may offer it again "
        "(the gate checks it afresh)"
    )
    return None


# -- savepoint and restore ----------------------------------------------------------------


def _progress(args: argparse.Namespace) -> Callable[[str], None]:
    stream = sys.stderr if args.json else sys.stdout
    return lambda line: print(line, file=stream, flush=True)


def _pipeline(args: argparse.Namespace) -> Pipeline:
    """The pipeline's code, from --pipeline-ref or BATCHPOINT_PIPELINE_REF (a
    comma-separated list there; --pipeline picks one when it names several)."""
    from batchpoint.runtime.loader import load_pipeline

    refs = [r.strip() for r in (args.pipeline_ref or "").split(",") if r.strip()]
    if not refs:
        raise ConfigError(
            f"'{args.command}' needs the pipeline's code: give --pipeline-ref module:attr "
            "or set BATCHPOINT_PIPELINE_REF"
        )
    pipelines = [load_pipeline(r) for r in refs]
    if args.pipeline:
        pipelines = [p for p in pipelines if p.name == args.pipeline]
    if len(pipelines) != 1:
        names = ", ".join(load_pipeline(r).name for r in refs)
        raise ConfigError(
            f"{len(pipelines)} of the referenced pipelines ({names}) match: "
            "name one with --pipeline"
        )
    return pipelines[0]


def cmd_savepoint(args: argparse.Namespace) -> Any:
    """Run one epoch as a savepoint (in-process Spark), then export it; or, with
    --checkpoint-id, export an existing completed checkpoint."""
    import time

    from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
    from batchpoint.protocol.savepoints import (
        SavepointLocation,
        default_savepoint_prefix,
        export_savepoint,
    )
    from batchpoint.runtime.driver import PipelineDriver
    from batchpoint.runtime.restore import savepoint_location

    settings: Settings = args.settings
    say = _progress(args)
    pipeline = _pipeline(args)
    driver = PipelineDriver(pipeline, settings.store_ref, settings.checkpoint)
    checkpoint_id = args.checkpoint_id
    if checkpoint_id is None:
        checkpoint_id = _run_savepoint_epoch(args, pipeline, say)
    outcome = driver.coordinator.get_outcome(checkpoint_id)
    if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
        raise BatchpointError(f"checkpoint {checkpoint_id} did not complete: nothing to export")
    store = driver.store
    if args.target:
        target = savepoint_location(args.target, store, settings.store_options)
    else:
        prefix = default_savepoint_prefix(pipeline.name, checkpoint_id, time.time())
        target = SavepointLocation(store, prefix)
    started = time.monotonic()
    report = export_savepoint(
        driver.coordinator, checkpoint_id, target, description=args.description, progress=say
    )
    summary = {
        "pipeline": pipeline.name,
        "checkpoint_id": checkpoint_id,
        "type": outcome.pending.type.value,
        "savepoint": CheckpointType.SAVEPOINT is outcome.pending.type,
        "location": report.location.uri,
        "files": report.files,
        "bytes": report.bytes,
        "seconds": round(time.monotonic() - started, 3),
    }
    if args.json:
        return summary
    print(
        f"savepoint of checkpoint {checkpoint_id}: {report.location.uri} "
        f"({report.files} file(s), {tables.size(report.bytes)})"
    )
    return None


def _run_savepoint_epoch(
    args: argparse.Namespace, pipeline: Pipeline, say: Callable[[str], None]
) -> int:
    import time

    from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
    from batchpoint.runtime.local import LocalEpochRunner
    from batchpoint.runtime.runner import OperatorFailed
    from batchpoint.spark.session import spark_session

    settings: Settings = args.settings
    say(f"starting Spark ({settings.spark_master})")
    spark = spark_session(f"batchpoint-savepoint-{pipeline.name}", settings.spark_master)
    runner = LocalEpochRunner(
        pipeline, settings.store_ref, spark, settings.checkpoint, log=lambda line: say(f"  {line}")
    )
    pending = runner.driver.trigger(
        CheckpointType.SAVEPOINT, properties={"description": args.description, "via": "cli"}
    )
    cid = pending.checkpoint_id
    say(f"savepoint {cid} triggered (base {pending.base_checkpoint_id})")
    operator_runner = runner.operator_runner()
    order = runner.task_order()
    for number, name in enumerate(order, 1):
        started = time.monotonic()
        say(f"[{number}/{len(order)}] {name} ...")
        try:
            report = operator_runner.run(cid, name)
        except OperatorFailed as exc:
            raise BatchpointError(f"savepoint {cid} declined: {exc}") from None
        say(f"[{number}/{len(order)}] {name} done in {time.monotonic() - started:.1f}s")
        if report.skipped:
            say(f"  ({report.skipped})")
    outcome, published = runner.complete(cid)
    if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
        message = outcome.message if outcome else "not every task acknowledged"
        raise BatchpointError(f"savepoint {cid} did not complete: {message}")
    say(f"savepoint {cid} completed; published {', '.join(published) or 'nothing new'}")
    return cid


def _stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _restore_options(args: argparse.Namespace, pipeline: Pipeline) -> GateOptions:
    """The restore form's gate fields, from the flags, checked by the same code as the
    DAG's form (GateOptions.from_form) before anything is read; only the wording of the
    missing confirmation changes, to name the flag to add."""
    from batchpoint.runtime.restore import GateOptions, parse_max_candidates, ungated_phrase

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


def _restore_gate(
    args: argparse.Namespace, pipeline: Pipeline, options: GateOptions
) -> tuple[RestoreGate | None, str]:
    """The gate for this restore and a line saying what it is, set up as the restore
    DAG's check task sets up its own: configure_gate (a dry run records nothing, the
    skipped names are checked against what the pipeline declares)."""
    from batchpoint.quality.gate import QualityGate
    from batchpoint.quality.hook import QualityRestoreGate
    from batchpoint.quality.suites import check_skip_names, quality_of
    from batchpoint.runtime.restore import ConfigurableGate, configure_gate

    if not options.enabled:
        if options.skip_suites:
            _stderr_progress("--skip-suite ignored: no suite runs with the gate off")
        return None, "quality gate OFF (confirmed): only the candidates' files are checked"
    found = _named_gate(args)
    if found is None:
        # Still checked: a name the pipeline does not declare is a mistake either way.
        check_skip_names(pipeline, quality_of(pipeline), options.skip_suites)
        return None, (
            "no quality gate configured (--gate or BATCHPOINT_QUALITY_GATE): only the "
            "candidates' files are checked"
        )
    if isinstance(found, QualityGate):
        if found.pipeline.name != pipeline.name:
            raise ConfigError(
                f"quality gate {args.gate!r} judges pipeline '{found.pipeline.name}', "
                f"not '{pipeline.name}'"
            )
        # The gate checks them too, once built; checked here as well so a misspelt name
        # fails before the gate is announced and Great Expectations is imported.
        check_skip_names(found.pipeline, found.quality, options.skip_suites)
        checksums = found.checksums
        hook: RestoreGate = QualityRestoreGate(
            lambda: _rooted_gate(args, found, checksums=checksums, log=_stderr_progress)
        )
    elif callable(found):
        hook = found  # any RestoreGate, called as it is, on whatever store it was built for
        if args.dry_run and not isinstance(found, ConfigurableGate):
            _stderr_progress(
                f"dry run: the quality gate {args.gate} cannot be told to record nothing"
            )
    else:
        raise ConfigError(
            f"quality gate {args.gate!r} is a {type(found).__name__}, not a QualityRestoreGate, "
            "a QualityGate or a callable restore gate"
        )
    what = f"quality gate {args.gate}"
    if options.skip_suites:
        what += f", skipping {', '.join(options.skip_suites)}"
    if args.dry_run:
        what += "; dry run: nothing is quarantined or stored"
    return configure_gate(hook, record=not args.dry_run, skip_suites=options.skip_suites), what


def _check_lines(check: CandidateCheck) -> list[str]:
    """One candidate's verdict: the gate report's own lines when the gate judged it."""
    from batchpoint.quality.report import CandidateReport

    candidate = check.candidate
    files = (
        f"{len(candidate.completed.handles)} file(s), {tables.size(candidate.completed.state_size)}"
    )
    if check.problems:
        lines = [f"  {candidate.description}: FAILED, {len(check.problems)} file problem(s)"]
        lines += [f"      - {p}" for p in check.problems[:5]]
        if len(check.problems) > 5:
            lines.append(f"      (and {len(check.problems) - 5} more)")
        return lines
    gate = check.gate
    if gate is None:
        return [f"  {candidate.description}: ok ({files}; files checked, no quality gate)"]
    if isinstance(gate.report, Mapping):
        try:
            key = f"{gate.name} report on {candidate.description}"
            return CandidateReport.from_body(key, gate.report).render()
        except (BatchpointError, KeyError, TypeError, ValueError):
            pass  # a gate of the user's own with a report of its own shape: shown as JSON
    verdict = "passed" if gate.passed else "FAILED"
    text = gate.report if isinstance(gate.report, str) else json.dumps(gate.report, default=str)
    return [f"  {candidate.description}: {gate.name} {verdict}" + (f": {text}" if text else "")]


def cmd_restore(args: argparse.Namespace) -> Any:
    """The restore DAG's check and restore tasks in one command: candidates newest first
    (or the one named), the files then the quality gate, the first that passes restored;
    the gate quarantines each one it fails, unless this is a dry run. Progress goes to
    stderr (the gate can take minutes), the report to stdout."""
    from batchpoint.runtime.driver import PipelineDriver
    from batchpoint.runtime.restore import RestorePlanner

    settings: Settings = args.settings
    pipeline = _pipeline(args)
    options = _restore_options(args, pipeline)
    gate, gate_text = _restore_gate(args, pipeline, options)
    _stderr_progress(gate_text)
    driver = PipelineDriver(pipeline, settings.store_ref, settings.checkpoint)
    planner = RestorePlanner(
        driver,
        gate=gate,
        checksums=args.checksums,
        store_options=settings.store_options,
        progress=_stderr_progress,
        max_candidates=options.max_candidates,
    )
    plan = planner.plan(args.source, args.parallelism)
    result = None
    if plan.chosen is not None and not args.dry_run:
        result = planner.apply(plan)
    code = 0 if plan.chosen is not None else 1
    if args.json:
        out = plan.to_json()
        out["quality_gate"] = {
            "enabled": options.enabled,
            "gate": args.gate if gate is not None else None,
            "skip_suites": list(options.skip_suites),
            "dry_run": args.dry_run,
        }
        out["dry_run"] = args.dry_run
        out["refused"] = plan.refusal_headline() if plan.chosen is None else None
        out["result"] = result.to_json() if result else None
        print(json.dumps(out, indent=2, default=str))
        return code
    print(f"restore of pipeline '{pipeline.name}' from {plan.source}: {gate_text}")
    for check in plan.checks:
        print("\n".join(_check_lines(check)))
    if plan.chosen is None:
        print(f"refused: {plan.refusal_headline()}")
        if plan.not_examined:
            further = len(plan.checks) + len(plan.not_examined)
            print(
                f"to look further back: --max-candidates {further} "
                "(or leave it out for every retained checkpoint)"
            )
        return code
    if result is None:
        print(
            f"dry run: would restore {plan.chosen.description}; nothing changed "
            "(head not moved, nothing quarantined, no report stored)"
        )
        return code
    print(
        f"restored pipeline {result.pipeline} to checkpoint {result.checkpoint_id} "
        f"(restore generation {result.restore_generation})"
        + (f", imported from {result.imported_from}" if result.imported_from else "")
        + (f", parallelism {result.parallelism}" if result.parallelism else "")
    )
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchpoint", description=__doc__)
    parser.add_argument("--root", help="storage root URI (default: $BATCHPOINT_ROOT)")
    parser.add_argument("--pipeline", help="pipeline name (default: the only one)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--pipeline-ref",
        default=os.environ.get("BATCHPOINT_PIPELINE_REF"),
        help="module:attr of the pipeline code, for savepoint and restore "
        "(default: $BATCHPOINT_PIPELINE_REF)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    checkpoints = sub.add_parser("checkpoints", help="list or show checkpoints")
    csub = checkpoints.add_subparsers(dest="action", required=True)
    p = csub.add_parser("list", help="the checkpoint history")
    p.add_argument("--limit", type=int, default=None)
    p.set_defaults(fn=cmd_list)
    p = csub.add_parser("show", help="one checkpoint with its tasks")
    p.add_argument("checkpoint_id", type=int)
    p.set_defaults(fn=cmd_show)

    p = sub.add_parser("stats", help="summary statistics and the failure counter")
    p.set_defaults(fn=cmd_stats)
    p = sub.add_parser(
        "verify",
        help="the quality gate's report on a checkpoint or savepoint (integrity, suites)",
    )
    p.add_argument(
        "target",
        nargs="?",
        default=None,
        help="a checkpoint id, or a savepoint folder (s3://..., file:///..., or a path "
        "under the root); default: the head",
    )
    p.add_argument(
        "--integrity-only",
        action="store_true",
        help="only check that every file exists with its size and checksum (fast; "
        "needs no pipeline code)",
    )
    p.add_argument("--quick", action="store_true", help="sizes only, no checksums")
    p.add_argument(
        "--skip-suite",
        action="append",
        default=[],
        metavar="NAME",
        help="a suite, check or operator/state not to run (repeatable)",
    )
    p.add_argument(
        "--gate",
        default=os.environ.get("BATCHPOINT_QUALITY_GATE"),
        help="module:attr of the quality gate (default: $BATCHPOINT_QUALITY_GATE, else "
        "the pipeline's declared suites)",
    )
    p.add_argument(
        "--quarantine",
        action="store_true",
        help="store the report beside the checkpoint and quarantine it if it fails "
        "(verify writes nothing otherwise)",
    )
    p.set_defaults(fn=cmd_verify)
    quarantine = sub.add_parser("quarantine", help="checkpoints the quality gate refused")
    qsub = quarantine.add_subparsers(dest="action", required=True)
    p = qsub.add_parser("list", help="quarantined checkpoints and why")
    p.set_defaults(fn=cmd_quarantine_list)
    p = qsub.add_parser("release", help="make a quarantined checkpoint a candidate again")
    p.add_argument("checkpoint_id", type=int)
    p.set_defaults(fn=cmd_quarantine_release)
    p = sub.add_parser("gc", help="delete files no retained checkpoint references")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--history-limit", type=int, default=None)
    p.set_defaults(fn=cmd_gc)
    p = sub.add_parser("reset", help="clear a FAILED pipeline's failure counter")
    p.set_defaults(fn=cmd_reset)
    p = sub.add_parser(
        "savepoint",
        help="run one epoch as a savepoint (local Spark) and export it to a folder",
    )
    p.add_argument("--target", help="s3://..., file:///... or a path under the root")
    p.add_argument("--description", default="", help="stored in the savepoint's _metadata")
    p.add_argument(
        "--checkpoint-id",
        type=int,
        default=None,
        help="export this completed checkpoint instead of running an epoch",
    )
    p.set_defaults(fn=cmd_savepoint)
    p = sub.add_parser("restore", help="restore from a checkpoint or a savepoint")
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
        "--checksums", action="store_true", help="also verify every checksum (before the gate)"
    )
    p.add_argument(
        "--gate",
        default=os.environ.get("BATCHPOINT_QUALITY_GATE"),
        help="module:attr of the quality gate, on by default when set "
        "(default: $BATCHPOINT_QUALITY_GATE; without one, only the files are checked)",
    )
    p.add_argument(
        "--no-gate",
        action="store_true",
        help="restore without the quality gate; needs --confirm",
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
    p.set_defaults(fn=cmd_restore)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.settings = Settings.from_env(root=args.root or "")
        result = args.fn(args)
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json and result is not None and not isinstance(result, int):
        print(json.dumps(result, indent=2, default=str))
        return 0
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
