"""`plan [--checkpoint N | --savepoint PATH]`: what a deploy of the code (--pipeline-ref
or BATCHPOINT_PIPELINE_REF) would keep, migrate, rescale or drop, per source, operator,
state and sink, against the base the next trigger builds on (the newest checkpoint
still pending, else the head), or the checkpoint or savepoint named. Exit 0 when the
deploy may run, 3 when the trigger or the restore would refuse it (a named checkpoint
the restore refuses, quarantined or not restorable, with the restore's reason)."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli.context import Command, checkpoint_id
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command
from batchpoint.errors import RestoreRefused
from batchpoint.ops.deploy import deploy_plan


def cmd_plan(cmd: Command) -> ExitCode:
    """Preview what deploying new code does to the stored state (exit 3: refused).

    Compares the code (--pipeline-ref) with what the next checkpoint builds on (the head, or
    the newest checkpoint still pending), or the checkpoint or savepoint named, and says for
    each source, operator, state and sink whether it is kept, migrated, rescaled or dropped.

    $ batchpoint plan --pipeline-ref payments_v2:pipeline
    $ batchpoint plan --pipeline-ref payments_v2:pipeline --checkpoint 6
    """
    args = cmd.args
    pipeline = cmd.pipeline()
    if args.savepoint is None:
        cmd.coordinator_of(pipeline.name)  # an unknown pipeline is a mistake: exit 2
    try:
        plan = deploy_plan(
            pipeline,
            cmd.settings,
            checkpoint_id=args.checkpoint,
            savepoint=args.savepoint,
            allow_non_restored_state=args.allow_non_restored_state,
        )
    except RestoreRefused as exc:
        if args.checkpoint is None:
            raise  # a savepoint folder that is none (or another pipeline's): a mistake
        why = str(exc)  # the restore of it would be refused: so is the deploy on it
        body = {"pipeline": pipeline.name, "base_checkpoint": args.checkpoint}
        cmd.out.emit({**body, "deployable": False, "refused": why}, f"refused: {why}")
        return ExitCode.DEPLOY_REFUSED
    cmd.out.emit(lambda: {"pipeline": pipeline.name, **plan.to_json()}, plan.render)
    return ExitCode.OK if plan.deployable else ExitCode.DEPLOY_REFUSED


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "plan", common, run=cmd_plan)
    target = p.add_mutually_exclusive_group()
    target.add_argument(
        "--checkpoint", type=checkpoint_id, default=None, help="compare with this checkpoint"
    )
    target.add_argument(
        "--savepoint", default=None, metavar="PATH", help="compare with this savepoint folder"
    )
    p.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="plan as a restore that allows state the code leaves unrestored",
    )
