"""`savepoint`: run one epoch as a savepoint on local Spark and export it to a folder
(with --stop, a stop-with-savepoint);
or, with --checkpoint-id, export a completed checkpoint; `savepoint dispose ID` removes
a retained savepoint from the pipeline; `savepoint bootstrap --state OP.STATE=FILE ...
TARGET` writes a savepoint folder from Parquet files of state (ops/bootstrap.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from batchpoint.cli import render
from batchpoint.cli.context import Command, checkpoint_id
from batchpoint.cli.exit_codes import ExitCode
from batchpoint.cli.usage import add_command
from batchpoint.errors import BatchpointError
from batchpoint.ops.local_epoch import take_savepoint
from batchpoint.ops.savepoints import dispose


def cmd_savepoint(cmd: Command) -> ExitCode:
    """Take a savepoint: a copy of the state you can restore or move.

    Runs one epoch on local Spark and exports it to a folder, or exports an existing checkpoint
    (--checkpoint-id). `savepoint dispose ID` removes one; `savepoint bootstrap TARGET` writes one
    from Parquet files.

    $ batchpoint savepoint --target s3://bucket/savepoints/before-upgrade
    $ batchpoint savepoint --checkpoint-id 6
    $ batchpoint savepoint --stop
    $ batchpoint savepoint dispose 7
    """
    args = cmd.args
    if args.action == "dispose":
        return cmd_dispose(cmd)
    if args.action == "bootstrap":
        return cmd_bootstrap(cmd)
    pipeline = cmd.pipeline()
    if args.checkpoint_id is not None:
        if args.stop:
            raise BatchpointError(
                "--stop needs a savepoint epoch: it cannot stop the pipeline with an "
                "existing checkpoint (--checkpoint-id)"
            )
        cmd.coordinator_of(pipeline.name)
    result = take_savepoint(
        pipeline,
        cmd.settings,
        target=args.target,
        description=args.description,
        checkpoint_id=args.checkpoint_id,
        stop=args.stop,
        progress=cmd.out.progress,
        allow_non_restored_state=args.allow_non_restored_state,
    )
    cmd.out.emit(
        result.to_json,
        f"savepoint of checkpoint {result.checkpoint_id}: {result.location} "
        f"({result.files} file(s), {render.size(result.bytes)})"
        + ("; the pipeline is stopped (`batchpoint resume` starts it)" if args.stop else ""),
    )
    return ExitCode.OK


def cmd_dispose(cmd: Command) -> ExitCode:
    if cmd.args.operand is None:
        raise BatchpointError("savepoint dispose needs the savepoint's checkpoint id")
    try:
        savepoint_id = checkpoint_id(cmd.args.operand)
    except argparse.ArgumentTypeError as exc:
        raise BatchpointError(f"savepoint dispose {cmd.args.operand!r}: {exc}") from None
    coordinator = cmd.coordinator()
    dispose(coordinator, savepoint_id)
    cmd.out.emit(
        {"pipeline": coordinator.pipeline, "disposed": savepoint_id},
        f"savepoint {savepoint_id} of pipeline {coordinator.pipeline} disposed: "
        "its files go with the next gc",
    )
    return ExitCode.OK


def state_files(values: list[str] | None) -> dict[str, dict[str, str]]:
    """--state OP.STATE=FILE.parquet, repeated: operator -> state -> file."""
    if not values:
        raise BatchpointError(
            "savepoint bootstrap needs at least one --state OPERATOR.STATE=FILE.parquet"
        )
    out: dict[str, dict[str, str]] = {}
    for value in values:
        name, sep, path = value.partition("=")
        operator, dot, state = name.strip().partition(".")
        if not (sep and dot and operator and state and path.strip()):
            raise BatchpointError(
                f"--state {value!r}: give OPERATOR.STATE=FILE.parquet (e.g. "
                "aggregate.totals=totals.parquet)"
            )
        if state in out.get(operator, {}):
            raise BatchpointError(f"--state {operator}.{state} is given twice")
        out.setdefault(operator, {})[state] = path.strip()
    return out


def parquet_problem(path: str) -> str | None:
    """Why the file is not a Parquet file Spark can read, or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError) as exc:
        return f"is not a readable Parquet file ({str(exc).splitlines()[0]})"
    return None


def cmd_bootstrap(cmd: Command) -> ExitCode:
    target = cmd.args.operand or cmd.args.target
    if not target:
        raise BatchpointError("savepoint bootstrap needs the TARGET folder of the savepoint")
    files = state_files(cmd.args.state)
    missing = [p for states in files.values() for p in states.values() if not Path(p).is_file()]
    if missing:
        raise BatchpointError(f"no such Parquet file: {', '.join(missing)}")
    for operator, states in files.items():  # before Spark, whose error is a Java trace
        for state, path in states.items():
            if (problem := parquet_problem(path)) is not None:
                raise BatchpointError(f"--state {operator}.{state}: {path} {problem}")
    pipeline = cmd.pipeline()
    # Here, not at the top: batchpoint.spark imports pyspark, which no other verb needs.
    from batchpoint.ops.bootstrap import bootstrap_location, write_savepoint
    from batchpoint.spark.session import spark_session

    location = bootstrap_location(target, cmd.settings, cmd.settings.store_options, None)

    cmd.out.progress(f"starting Spark ({cmd.settings.spark_master})")
    spark = spark_session(f"batchpoint-bootstrap-{pipeline.name}", cmd.settings.spark_master)
    frames = {
        op: {state: spark.read.parquet(str(Path(p).resolve())) for state, p in states.items()}
        for op, states in files.items()
    }
    metadata = write_savepoint(
        spark,
        pipeline,
        frames,
        location,
        parallelism=cmd.args.parallelism,
        description=cmd.args.description or "bootstrapped from Parquet files",
        settings=cmd.settings,
        progress=cmd.out.progress,
    )
    cmd.out.emit(
        {"pipeline": pipeline.name, "target": target, "files": metadata.file_count},
        f"savepoint bootstrapped at {target} ({metadata.file_count} file(s)); import and "
        f"restore it with `batchpoint restore {target}`",
    )
    return ExitCode.OK


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "savepoint", common, run=cmd_savepoint)
    p.add_argument(
        "action",
        nargs="?",
        choices=["dispose", "bootstrap"],
        help="dispose ID: remove a retained savepoint; bootstrap TARGET: write one from "
        "Parquet files of state (--state)",
    )
    p.add_argument("operand", nargs="?", help=argparse.SUPPRESS)
    p.add_argument("--target", help="s3://..., file:///... or a path under the root")
    p.add_argument("--description", default="", help="stored in the savepoint's _metadata")
    p.add_argument(
        "--state",
        action="append",
        metavar="OPERATOR.STATE=FILE.parquet",
        help="bootstrap: a state's rows (repeat for each state)",
    )
    p.add_argument("--parallelism", type=int, default=None, help="bootstrap: default, the code's")
    p.add_argument(
        "--checkpoint-id",
        type=checkpoint_id,
        default=None,
        help="export this completed checkpoint instead of running an epoch",
    )
    p.add_argument(
        "--stop",
        action="store_true",
        help="stop-with-savepoint: no checkpoint starts after it (the pending ones are "
        "abandoned) until `batchpoint resume` or a restore",
    )
    p.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="the savepoint's epoch may leave state of its base that the code no longer "
        "declares unrestored (see `batchpoint plan`)",
    )
