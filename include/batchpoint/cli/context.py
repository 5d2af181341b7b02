"""What every command gets: its parsed arguments, the settings, where to print, and the
pipeline it is about (by name on the storage, or its code)."""

from __future__ import annotations

import argparse
import functools
import os
from dataclasses import dataclass

from batchpoint.cli.output import Output
from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.ops.gates import gate_reference
from batchpoint.ops.pipelines import open_pipeline, pipeline_code, pipeline_names
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.runtime.api import Pipeline
from batchpoint.settings import Settings, read_environment
from batchpoint.settings.values import check_conn_id, check_root
from batchpoint.storage import redaction
from batchpoint.storage.base import ObjectStore


class UsageError(BatchpointError):
    """A mistake on the command line (exit code 2), printed by `main` as every other
    error is: one `error:` line, or `{"error": ...}` under --json."""


class Parser(argparse.ArgumentParser):
    """A mistake on the command line is raised, not printed here: argparse decides before
    --json is known, so `main` prints it."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def checkpoint_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:  # -1 too: "0 or more" would then refuse 0 for another reason
        raise argparse.ArgumentTypeError(f"checkpoint ids start at 1, got {value}")
    return value


def root_flag(text: str) -> str | None:
    """--root, checked as BATCHPOINT_ROOT is, so that a bad one is reported as the flag's
    (empty: not given, the variable's)."""
    if not text.strip():
        return None
    try:
        return check_root(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{redaction.redact_uri(repr(text))}: {exc}") from None


def conn_id_flag(text: str) -> str:
    try:
        return check_conn_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


GLOBAL_DEFAULTS = {
    "root": None,
    "pipeline": None,
    "json": False,
    "no_color": False,
    "pipeline_ref": None,
    "spark_conn_id": None,
}


def global_options(shown: bool = True) -> Parser:
    """Options accepted before or after the command: every parser gets them with no
    default (SUPPRESS), so a subcommand's parser never overwrites what an earlier
    position set; `finish` fills the defaults in. `batchpoint --help` lists them once
    (`shown`); a command's own help leaves them out and points there."""
    common = Parser(add_help=False)
    options = common.add_argument_group("global options (before or after the command)")

    def add(*flags: str, help: str, **kwargs: object) -> None:
        options.add_argument(
            *flags, default=argparse.SUPPRESS, help=help if shown else argparse.SUPPRESS, **kwargs
        )

    add(
        "--root",
        type=root_flag,
        metavar="URI",
        help="where the checkpoints are stored: "
        "s3://bucket/prefix or file:///path (default: $BATCHPOINT_ROOT)",
    )
    add("--pipeline", metavar="NAME", help="which pipeline (default: the only one stored)")
    add("--json", action="store_true", help="print JSON instead of tables (see docs/cli.md)")
    add(
        "--no-color",
        action="store_true",
        help="plain text, no colours or drawn tables, even on a terminal (also: NO_COLOR=1)",
    )
    add(
        "--pipeline-ref",
        metavar="MODULE:ATTR",
        help="the pipeline's code, for savepoint, "
        "restore, plan and verify (default: $BATCHPOINT_PIPELINE_REF)",
    )
    add(
        "--spark-conn-id",
        type=conn_id_flag,
        metavar="CONN_ID",
        help="the Airflow "
        "connection of the Spark to use, for commands that read state (default: "
        "$BATCHPOINT_SPARK_CONN_ID, else $BATCHPOINT_SPARK_REMOTE or _MASTER)",
    )
    return common


def finish(args: argparse.Namespace) -> argparse.Namespace:
    for name, default in GLOBAL_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    if args.pipeline_ref is None:
        args.pipeline_ref = os.environ.get("BATCHPOINT_PIPELINE_REF")
    return args


def add_gate_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--gate", default=None, metavar="MODULE:ATTR", help=help_text)


@dataclass
class Command:
    args: argparse.Namespace
    settings: Settings
    out: Output

    @classmethod
    def of(cls, args: argparse.Namespace) -> Command:
        settings = Settings.from_env(root=args.root or "")
        return cls(args, settings, Output(args.json, color=not args.no_color))

    @functools.cached_property
    def _spark_settings(self) -> Settings:
        flag = self.args.spark_conn_id
        conn_id = flag or read_environment().spark_conn_id
        if not conn_id:
            return self.settings
        given_as = "--spark-conn-id" if flag else "BATCHPOINT_SPARK_CONN_ID"
        try:
            from batchpoint.airflow.spark_connection import cli_spark_settings
        except ImportError as exc:
            raise ConfigError(
                f"{given_as}={conn_id}: reading an Airflow connection needs Apache Airflow "
                f"installed here ({exc}); install batchpoint[airflow], or give the endpoint in "
                "BATCHPOINT_SPARK_REMOTE or BATCHPOINT_SPARK_MASTER"
            ) from None
        try:
            return cli_spark_settings(self.settings, conn_id)
        except ConfigError as exc:
            raise ConfigError(f"{given_as}: {exc}") from None

    def spark_settings(self) -> Settings:
        """The settings of this command's Spark work: the endpoint of the Airflow
        connection --spark-conn-id (else BATCHPOINT_SPARK_CONN_ID) names, read when first
        asked for (only commands that run Spark import Airflow); else the variables'."""
        return self._spark_settings

    @functools.cached_property
    def store(self) -> ObjectStore:
        """The storage root, opened once for the command: every pipeline lives in it."""
        return self.settings.store_ref.open()

    def coordinator(self) -> CheckpointCoordinator:
        """The named pipeline (it must exist), or the only one."""
        return open_pipeline(self.settings, self.args.pipeline, self.store)

    def coordinator_of(self, name: str) -> CheckpointCoordinator:
        """The pipeline a PIPELINE operand names (it must exist). An empty one is a
        mistake, not "the only one": that default is --pipeline's, never an operand's."""
        if not name.strip():
            stored = ", ".join(pipeline_names(self.store)) or f"none in {self.settings.root}"
            raise UsageError(f"PIPELINE is empty: name the pipeline (pipelines: {stored})")
        return open_pipeline(self.settings, name, self.store)

    def pipeline(self) -> Pipeline:
        """The pipeline's code, from --pipeline-ref or BATCHPOINT_PIPELINE_REF (a
        comma-separated list there; --pipeline picks one when it names several)."""
        if not (self.args.pipeline_ref or "").strip():
            raise ConfigError(
                f"'{self.args.command}' needs the pipeline's code: give --pipeline-ref "
                "module:attr or set BATCHPOINT_PIPELINE_REF"
            )
        return pipeline_code(self.args.pipeline_ref, self.args.pipeline)

    def gate_ref(self) -> str | None:
        """--gate, else BATCHPOINT_QUALITY_GATE, checked as the DAGs check it."""
        if self.args.gate is not None:
            return gate_reference(self.args.gate, "--gate")
        return self.settings.quality_gate_ref  # checked when the settings were read
