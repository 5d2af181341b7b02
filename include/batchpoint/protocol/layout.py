"""Where each record lives under the storage root. One place, so nothing else builds keys.

pipelines/<p>/spec.json                 the registered pipeline spec
pipelines/<p>/ids.json                  the checkpoint id counter (CAS)
pipelines/<p>/head.json                 the head pointer (CAS)
pipelines/<p>/failures.json             the failure manager's counters (CAS)
pipelines/<p>/active/chk-N.json         a pending checkpoint, until its outcome is settled
pipelines/<p>/retained/chk-N.json       membership in the completed-checkpoint store
pipelines/<p>/restores/gen-G.json       one record per explicit restore
pipelines/<p>/restore-intents/gen-G-<token>.json  a restore about to move the head
pipelines/<p>/checkpoints/chk-N/outcome.json                 write-once outcome
pipelines/<p>/checkpoints/chk-N/acks/<operator>/<subtask>.json  write-once ack
pipelines/<p>/checkpoints/chk-N/declines/<operator>/<subtask>/<attempt>.json
pipelines/<p>/checkpoints/chk-N/data/<operator>/<hh>/<stream>/subtask-<i>/<attempt>/part-*.parquet
                                        state, channel and staged sink files (GC-able)
pipelines/<p>/checkpoints/chk-N/quality.json               the quality gate's last report
pipelines/<p>/quarantine/chk-N.json     write-once: never restored (damaged, or failed the gate)
cascades/active.json                    the cascade restore under way (CAS; protocol/cascade.py)
cascades/<id>.json                      a finished cascade restore

A checkpoint's data files: `<hh>`, the spread folder, is two hex digits of the sha256
of `<stream>/<i>`, so one operator's writes spread over up to 256 key prefixes (S3
throttles per prefix) and a retried task finds its folder again; it stays inside
`chk-N/data/`, so GC still deletes a checkpoint's folder as a whole. Files written before
issue 42 have no spread folder (`data/<operator>/<stream>/subtask-<i>/<attempt>/...`):
a handle carries its full path, so they restore, verify, export and are collected as
they are. The keys below `data/<operator>/` are `batchpoint.state.keys`'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from batchpoint import codec
from batchpoint.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_ID_DIGITS = 10


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{what} name {name!r} is invalid: use a letter followed by up to 63 letters, "
            "digits, '_' or '-'"
        )
    return name


def checkpoint_dir_name(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id:0{_ID_DIGITS}d}"


def parse_checkpoint_dir_name(name: str) -> int | None:
    match = re.fullmatch(r"chk-(\d+)(?:\.json)?/?", name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, order=True)
class TaskId:
    """One subtask of an operator, Flink's ExecutionVertex id. Records store it as its
    `str()`, ``operator#subtask`` (TASK_ID, below): that text is the stored form, so
    it must never change. Text becomes a TaskId once, where it enters (a record read, a
    test's or a tool's argument): the protocol takes and returns TaskIds."""

    operator: str
    subtask: int

    def __str__(self) -> str:
        return f"{self.operator}#{self.subtask}"

    @classmethod
    def parse(cls, task: str) -> TaskId:
        """The id of a stored task name; ValueError when it is not ``operator#subtask``."""
        operator, _, subtask = task.rpartition("#")
        if not operator or not subtask.isdigit():
            raise ValueError(f"task name {task!r} is not of the form operator#subtask")
        return cls(operator, int(subtask))


def _task_id(text: str) -> TaskId:
    try:
        return TaskId.parse(text)
    except ValueError as exc:
        raise codec.Invalid(str(exc)) from None


#: A record's task (`codec.field(adapter=TASK_ID)`): stored as its text, `operator#subtask`,
#: exactly as before TaskId; text that is no task id makes the record corrupt.
TASK_ID = codec.Adapter(stored=str, dump=str, load=lambda text, _: _task_id(text))
#: A record's tasks, stored as the list of their texts.
TASK_IDS = codec.Adapter(
    stored=tuple[str, ...],
    dump=lambda tasks: tuple(str(t) for t in tasks),
    load=lambda texts, _: tuple(_task_id(t) for t in texts),
)


@dataclass(frozen=True)
class PipelineLayout:
    pipeline: str

    def __post_init__(self) -> None:
        check_name(self.pipeline, "pipeline")

    @property
    def root(self) -> str:
        return f"pipelines/{self.pipeline}/"

    @property
    def spec(self) -> str:
        return self.root + "spec.json"

    @property
    def id_counter(self) -> str:
        return self.root + "ids.json"

    @property
    def head(self) -> str:
        return self.root + "head.json"

    @property
    def failures(self) -> str:
        return self.root + "failures.json"

    @property
    def active_prefix(self) -> str:
        return self.root + "active/"

    def active(self, checkpoint_id: int) -> str:
        return f"{self.active_prefix}{checkpoint_dir_name(checkpoint_id)}.json"

    @property
    def retained_prefix(self) -> str:
        return self.root + "retained/"

    def retained(self, checkpoint_id: int) -> str:
        return f"{self.retained_prefix}{checkpoint_dir_name(checkpoint_id)}.json"

    @property
    def restores_prefix(self) -> str:
        return self.root + "restores/"

    def restore(self, generation: int) -> str:
        return f"{self.restores_prefix}gen-{generation:0{_ID_DIGITS}d}.json"

    @property
    def restore_intents_prefix(self) -> str:
        return self.root + "restore-intents/"

    def restore_intent(self, generation: int, token: str) -> str:
        return f"{self.restore_intents_prefix}gen-{generation:0{_ID_DIGITS}d}-{token}.json"

    @property
    def checkpoints_prefix(self) -> str:
        return self.root + "checkpoints/"

    def checkpoint(self, checkpoint_id: int) -> str:
        return f"{self.checkpoints_prefix}{checkpoint_dir_name(checkpoint_id)}/"

    def outcome(self, checkpoint_id: int) -> str:
        return self.checkpoint(checkpoint_id) + "outcome.json"

    def acks_prefix(self, checkpoint_id: int) -> str:
        return self.checkpoint(checkpoint_id) + "acks/"

    def ack(self, checkpoint_id: int, task: TaskId) -> str:
        return f"{self.acks_prefix(checkpoint_id)}{task.operator}/{task.subtask}.json"

    def declines_prefix(self, checkpoint_id: int) -> str:
        return self.checkpoint(checkpoint_id) + "declines/"

    def decline(self, checkpoint_id: int, task: TaskId, attempt: str) -> str:
        return f"{self.declines_prefix(checkpoint_id)}{task.operator}/{task.subtask}/{attempt}.json"

    def quality_report(self, checkpoint_id: int) -> str:
        return self.checkpoint(checkpoint_id) + "quality.json"

    def data_docs_prefix(self, checkpoint_id: int) -> str:
        """The Data Docs sites a gate stored beside the checkpoint (a folder a run)."""
        return self.checkpoint(checkpoint_id) + "data-docs/"

    @property
    def quarantine_prefix(self) -> str:
        return self.root + "quarantine/"

    def quarantine(self, checkpoint_id: int) -> str:
        return f"{self.quarantine_prefix}{checkpoint_dir_name(checkpoint_id)}.json"

    def sink_manifest(self, sink: str) -> str:
        return f"{self.root}sinks/{sink}/manifest.json"

    def data_prefix(self, checkpoint_id: int) -> str:
        return self.checkpoint(checkpoint_id) + "data/"

    def operator_data_prefix(self, checkpoint_id: int, operator: str) -> str:
        return f"{self.data_prefix(checkpoint_id)}{operator}/"

    def task_data_prefix(self, checkpoint_id: int, task: TaskId, attempt: str) -> str:
        """A folder for one attempt of one task: attempt-scoped, so retries and
        speculative attempts never overwrite each other."""
        operator_folder = self.operator_data_prefix(checkpoint_id, task.operator)
        return f"{operator_folder}{task.subtask}/{attempt}/"
