"""`savepoint`: run one epoch as a savepoint on local Spark and export it to a folder;
or, with --checkpoint-id, export a completed checkpoint; `savepoint dispose ID` removes
a retained savepoint from the pipeline."""

from __future__ import annotations

import argparse
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id
from batchpoint.errors import BatchpointError
from batchpoint.ops.savepoints import dispose, take_savepoint


def cmd_savepoint(cmd: Command) -> int:
    args = cmd.args
    if args.action == "dispose":
        return cmd_dispose(cmd)
    pipeline = cmd.pipeline()
    if args.checkpoint_id is not None:
        cmd.coordinator_of(pipeline.name)
    result = take_savepoint(
        pipeline,
        cmd.settings,
        target=args.target,
        description=args.description,
        checkpoint_id=args.checkpoint_id,
        progress=cmd.out.progress,
        allow_non_restored_state=args.allow_non_restored_state,
    )
    cmd.out.emit(
        result.to_json,
        f"savepoint of checkpoint {result.checkpoint_id}: {result.location} "
        f"({result.files} file(s), {render.size(result.bytes)})",
    )
    return 0


def cmd_dispose(cmd: Command) -> int:
    if cmd.args.savepoint_id is None:
        raise BatchpointError("savepoint dispose needs the savepoint's checkpoint id")
    coordinator = cmd.coordinator()
    dispose(coordinator, cmd.args.savepoint_id)
    cmd.out.emit(
        {"pipeline": coordinator.pipeline, "disposed": cmd.args.savepoint_id},
        f"savepoint {cmd.args.savepoint_id} of pipeline {coordinator.pipeline} disposed: "
        "its files go with the next gc",
    )
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "savepoint",
        help="run one epoch as a savepoint (local Spark) and export it to a folder",
        parents=[common],
    )
    p.add_argument(
        "action", nargs="?", choices=["dispose"], help="dispose ID: remove a retained savepoint"
    )
    p.add_argument("savepoint_id", nargs="?", type=checkpoint_id, help=argparse.SUPPRESS)
    p.add_argument("--target", help="s3://..., file:///... or a path under the root")
    p.add_argument("--description", default="", help="stored in the savepoint's _metadata")
    p.add_argument(
        "--checkpoint-id",
        type=checkpoint_id,
        default=None,
        help="export this completed checkpoint instead of running an epoch",
    )
    p.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="the savepoint's epoch may leave state of its base that the code no longer "
        "declares unrestored (see `batchpoint plan`)",
    )
    p.set_defaults(run=cmd_savepoint)
