"""Which pipeline a command is about: by name on the storage (read-only commands need
no code), or its code from `module:attr` references (savepoint, restore, verify)."""

from __future__ import annotations

from collections.abc import Sequence

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.loader import load_pipeline
from batchpoint.runtime.upstream_reads import recorded_reads_check
from batchpoint.settings import Settings
from batchpoint.storage.base import ObjectStore


class UnknownPipeline(BatchpointError):
    """A command named a pipeline the storage has never seen."""


def pipeline_names(store: ObjectStore) -> list[str]:
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in store.list_dirs("pipelines/"))


def require_pipeline(store: ObjectStore, name: str, root: str = "") -> None:
    """Refuse a pipeline name the storage has no folder for: a typo must not look like
    an empty history, nor create a pipeline."""
    PipelineLayout(name)  # the name itself is checked first
    names = pipeline_names(store)
    if name not in names:
        where = f" in {root}" if root else ""
        raise UnknownPipeline(
            f"no pipeline '{name}'{where} (pipelines: {', '.join(names) or 'none'})"
        )


def open_pipeline(
    settings: Settings, name: str | None = None, store: ObjectStore | None = None
) -> CheckpointCoordinator:
    """The coordinator of pipeline `name`, which must exist; the only pipeline when no
    name is given. `store`: the storage root already opened (else opened here)."""
    store = store or settings.store_ref.open()
    if not name:
        names = pipeline_names(store)
        if not names:
            raise BatchpointError(
                f"no pipeline is stored in {settings.root}: check --root (or BATCHPOINT_ROOT)"
            )
        if len(names) != 1:
            raise BatchpointError(
                f"name a pipeline with --pipeline (found: {', '.join(names)} in {settings.root})"
            )
        name = names[0]
    require_pipeline(store, name, settings.root)
    return stored_coordinator(store, name, settings)


def stored_coordinator(store: ObjectStore, name: str, settings: Settings) -> CheckpointCoordinator:
    """The coordinator of a pipeline whose code is not at hand. Its settle may complete
    a checkpoint whose driver died after the acks: the checkpoint's recorded reads of
    other pipelines are checked as the driver would (runtime/upstream_reads.py)."""
    return CheckpointCoordinator(
        store, name, settings.checkpoint, check_reads=recorded_reads_check(store, name)
    )


def split_refs(refs: str | Sequence[str] | None) -> list[str]:
    """`module:attr` references: a list, or one comma-separated string."""
    if refs is None:
        return []
    items = refs.split(",") if isinstance(refs, str) else refs
    return [r.strip() for r in items if r.strip()]


def pipeline_code(refs: str | Sequence[str] | None, name: str | None = None) -> Pipeline:
    """The pipeline's code, from its reference(s); `name` picks one when several are
    given. ConfigError when none is given or none (or more than one) matches."""
    found = split_refs(refs)
    if not found:
        raise ConfigError("no pipeline code: give a module:attr reference")
    pipelines = [load_pipeline(r) for r in found]
    matching = [p for p in pipelines if not name or p.name == name]
    if len(matching) != 1:
        names = ", ".join(p.name for p in pipelines)
        if name and not matching:
            raise ConfigError(f"no referenced pipeline is named '{name}' (they are: {names})")
        raise ConfigError(
            f"{len(matching)} of the referenced pipelines ({names}) match: name one with --pipeline"
        )
    return matching[0]
