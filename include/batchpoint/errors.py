"""Every error batchpoint raises for a user-facing reason.

Each carries a message that names the object and what is wrong, so the CLI and the
Airflow tasks can print it as-is instead of a traceback.
"""

from __future__ import annotations


class BatchpointError(Exception):
    """Base of every error that is meant to be shown to a user."""


class ConfigError(BatchpointError):
    """Bad configuration: a missing setting, a malformed URI, an impossible value."""


class PipelineSpecError(ConfigError):
    """A pipeline definition that cannot run: a cycle, an unknown input, a bad parallelism."""


# --- storage -------------------------------------------------------------------------


class StorageError(BatchpointError):
    """A storage operation failed for a reason other than the conditions below."""


class StorageUnavailable(StorageError):
    """The storage could not be reached after bounded retries."""


class StorageAccessDenied(StorageError):
    """The credentials were rejected or lack permission."""


class BucketNotFound(StorageError):
    """The configured bucket does not exist."""


class ObjectNotFound(StorageError):
    def __init__(self, key: str, where: str = "") -> None:
        self.key = key
        super().__init__(f"object '{key}' does not exist{' in ' + where if where else ''}")


class ObjectAlreadyExists(StorageError):
    """A create-once write lost: the object exists already."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"object '{key}' already exists (create-once write refused)")


class PathRefused(StorageError):
    """A confined local folder was reached through a symbolic link: refused, not followed."""


class PreconditionFailed(StorageError):
    """A compare-and-swap lost: the object changed (or vanished) since it was read."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"object '{key}' changed since it was read (compare-and-swap refused)")


# --- records -------------------------------------------------------------------------


class RecordError(BatchpointError):
    """A stored record that cannot be understood."""


#: What to do about a damaged record: repair reports every damage it meets and what the
#: intact records still prove (and rebuilds the control record from them).
REPAIR_HINT = "`batchpoint repair --dry-run` shows what the intact records still prove"


#: The failure counter is no evidence repair reads: `reset` (or a restore) replaces it.
RESET_HINT = (
    "`batchpoint reset` replaces it: it holds only the count of consecutive failed checkpoints"
)


#: The registered spec is the code's, as of its last run: that run registers it again.
SPEC_HINT = (
    "the pipeline's next run registers it again from its code; until then, commands that "
    "read it without the code cannot"
)


class CorruptRecord(RecordError):
    def __init__(self, key: str, problem: str, hint: str = REPAIR_HINT) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{self.summary} ({hint})")

    @property
    def summary(self) -> str:
        """The record and its problem, without the hint (for messages that give their own)."""
        return f"record '{self.key}' is corrupt: {self.problem}"


class UnsupportedRecordVersion(RecordError):
    def __init__(self, key: str, kind: str, version: object, supported: tuple[int, ...]) -> None:
        self.key = key
        self.version = version
        super().__init__(
            f"record '{key}' is a {kind} record of version {version!r}, but this batchpoint "
            f"reads versions {', '.join(map(str, supported))}: upgrade batchpoint to read it"
        )


# --- protocol ------------------------------------------------------------------------


class CheckpointError(BatchpointError):
    """A protocol operation that cannot go ahead."""


class CheckpointNotFound(CheckpointError):
    pass


class TriggerRefused(CheckpointError):
    """The request decider said no; `reason` is a CheckpointFailureReason."""

    def __init__(self, reason: object, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(detail)


class RestoreRefused(CheckpointError):
    pass


class DeployRefused(RestoreRefused):
    """The code would leave state of the checkpoint unrestored, or cannot read it
    (issue 26): `plan` is the deploy plan (protocol/deploy_plan.DeployPlan) that says
    what, and how to allow it."""

    def __init__(self, message: str, plan: object) -> None:
        super().__init__(message)
        self.plan = plan
