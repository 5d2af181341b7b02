"""`restore PIPELINE --cascade`: the restore and every pipeline downstream of it that read
what it takes back (ops/cascade.py), planned and gated first, then applied as one
operation. The pipelines are every one BATCHPOINT_PIPELINE_REF (or --pipeline-ref)
names. Exit 0 applied (or, dry, would apply; or an earlier cascade cut short was
finished), 1 refused or failed, 2 a mistake in the command."""

from __future__ import annotations

from batchpoint.cli.context import Command
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.errors import ConfigError
from batchpoint.ops.cascade import CascadeContext, cascade_restore
from batchpoint.ops.gates import choose_member_gate
from batchpoint.ops.pipelines import split_refs
from batchpoint.protocol.cascade import CascadeStatus
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.loader import load_pipeline
from batchpoint.runtime.restore import GateOptions, RestoreSource, SourceKind
from batchpoint.runtime.restore_gate import RestoreGate


def cascade_code(refs: str | None) -> dict[str, Pipeline]:
    """Every pipeline the references name, by name."""
    code: dict[str, Pipeline] = {}
    for pipeline in map(load_pipeline, split_refs(refs)):
        if pipeline.name in code:
            raise ConfigError(f"two pipeline references name pipeline '{pipeline.name}'")
        code[pipeline.name] = pipeline
    return code


def check_cascade_arguments(cmd: Command, source: RestoreSource) -> None:
    args = cmd.args
    if source.kind is SourceKind.SAVEPOINT:
        raise ConfigError("--cascade restores retained checkpoints, not a savepoint folder")
    for flag, given in (
        ("--allow-non-restored-state", args.allow_non_restored_state),
        ("--claim", args.claim_mode != "no_claim"),
    ):
        if given:
            raise ConfigError(f"{flag} cannot be combined with --cascade")


def cmd_cascade(cmd: Command, pipeline: Pipeline, options: GateOptions) -> ExitCode:
    args, settings = cmd.args, cmd.settings
    source = RestoreSource.parse(args.source)
    check_cascade_arguments(cmd, source)
    code = cascade_code(args.pipeline_ref)
    code[pipeline.name] = pipeline
    for name in code:
        cmd.coordinator_of(name)  # an unknown pipeline is a mistake, no refusal
    reference = cmd.gate_ref() if options.enabled else None

    def gate_for(member: Pipeline) -> RestoreGate | None:
        # as the restore DAG's cascade: a gate built for another pipeline judges none
        choice = choose_member_gate(
            member, options, reference=reference, dry_run=args.dry_run,
            store_ref=settings.store_ref, log=cmd.out.note,
        )  # fmt: skip
        cmd.out.note(f"{member.name}: {choice.description}")
        for warning in choice.warnings:
            cmd.out.note(warning)
        return choice.gate

    context = CascadeContext(
        code,
        settings.store_ref,
        settings.checkpoint,
        gate_for,
        args.checksums,
        cmd.out.progress,
    )
    run = cascade_restore(
        context, pipeline.name, source, dry_run=args.dry_run, parallelism=args.parallelism
    )
    cmd.out.emit(run.to_json, run.render)
    failed = run.record is not None and run.record.status is CascadeStatus.FAILED
    return ExitCode.failed_if(run.refused or failed)
