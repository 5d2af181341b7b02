"""`verify [ID | SAVEPOINT]`: the quality gate's full report on a checkpoint (default:
the head) or a savepoint folder; `--integrity-only` checks the files alone. Exit 0
passed, 1 failed. Read-only unless --quarantine."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, add_gate_option
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command
from batchpoint.errors import ConfigError
from batchpoint.ops.gates import judging_gate
from batchpoint.ops.pipelines import require_pipeline
from batchpoint.ops.verify import table_lag, verify_files, verify_quality, verify_target
from batchpoint.quality.report import CandidateReport


def cmd_verify(cmd: Command) -> ExitCode:
    """Check a checkpoint's or a savepoint's files and data quality (exit 1: failed).

    Every file is checked against its size and checksum, then the quality gate's suites run
    on the state (which starts Spark). Nothing is written unless --quarantine.

    $ batchpoint verify
    $ batchpoint verify 6 --integrity-only
    $ batchpoint verify s3://bucket/savepoints/before-upgrade
    """
    args = cmd.args
    if args.integrity_only:
        c = cmd.coordinator()
        target = verify_target(
            c, args.target, cmd.settings.store_options, cmd.settings.savepoint_roots
        )
        check = verify_files(c, target, checksums=not args.quick)
        tables = table_lag(c, cmd.store)
        lines = [f"{check.target}: {check.files} file(s), {len(check.problems)} problem(s)"]
        lines += [f"  {p}" for p in check.problems] + _table_lines(tables)
        cmd.out.emit(lambda: {**check.to_json(), "tables": tables}, "\n".join(lines))
        return ExitCode.failed_if(not check.passed)
    reference = cmd.gate_ref()
    pipeline = None
    if reference is None:
        try:
            pipeline = cmd.pipeline()
        except ConfigError as exc:
            raise ConfigError(f"{exc} (or --integrity-only to check the files only)") from None
    gate = judging_gate(
        reference,
        cmd.settings.store_ref,
        pipeline=pipeline,
        pipeline_name=args.pipeline,
        skip_suites=args.skip_suite,
        checksums=not args.quick,
        detailed=True,
        log=cmd.out.progress,
    )
    require_pipeline(gate.store, gate.pipeline.name, cmd.settings.root)
    target = verify_target(
        gate.coordinator, args.target, cmd.settings.store_options, cmd.settings.savepoint_roots
    )
    result = verify_quality(gate, target, quarantine=args.quarantine, progress=cmd.out.progress)
    tables = table_lag(gate.coordinator, gate.store)
    cmd.out.emit(
        lambda: {**result.to_json(), "tables": tables},
        lambda: [*render_report(result.target, result.report), *_table_lines(tables)],
    )
    return ExitCode.failed_if(not result.passed)


def _table_lines(tables: list[str]) -> list[str]:
    """The pipeline's table sinks that lag (they do not fail the verification)."""
    if not tables:
        return []
    return ["", "sink tables (the pipeline's, not this checkpoint's):", *(f"  {t}" for t in tables)]


def render_report(what: str, report: CandidateReport) -> list[str]:
    """The report as tables: every expectation and check with what it observed, then
    the findings (integrity first: a checkpoint whose files are broken is not read)."""
    lines = [
        f"{what}: {report.verdict()} ({len(report.findings)} finding(s), "
        f"{render.seconds(report.seconds)})"
    ]
    rows = report.result_rows()
    if rows:
        lines += [
            "",
            render.table(
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
                render.table(
                    ["object", "check", "problem"],
                    [[f.object, f.check, f.problem] for f in findings],
                ),
            ]
    if report.integrity_findings and not report.suites_run:
        lines.append("\nsuites not run: integrity failed first")
    if report.skipped:
        lines.append(f"\nskipped: {', '.join(sorted(report.skipped))}")
    lines += [f"not judged: {skip}" for skip in report.not_judged]
    if report.quarantined:
        lines.append("quarantined: no restore will offer it until it is released")
    return lines


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "verify", common, run=cmd_verify)
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
    add_gate_option(
        p,
        "the quality gate (default: $BATCHPOINT_QUALITY_GATE, else the pipeline's declared suites)",
    )
    p.add_argument(
        "--quarantine",
        action="store_true",
        help="store the report beside the checkpoint and quarantine it if it fails "
        "(verify writes nothing otherwise)",
    )
