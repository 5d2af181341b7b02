"""The real delta-rs, with a hook at each of its calls that reach the table's storage:
where a step scheduler lets another actor run, and where the model injects Delta faults.

delta-rs talks to storage itself (Rust's object_store, not batchpoint's ObjectStore), so
the fault wrapper of the store never sees its reads of the log or its commit. The
adapter's own copies of the staged files go through the store and are scheduler steps
already; `SteppedDeltaTable` makes delta-rs's calls steps too: opening a table (at its
latest or a given version), asking whether one exists, creating one, catching up with
the log (`update_incremental`), reading the history, reading the rows, and the commit
(`create_write_transaction`), whose hook runs after the adapter copied the epoch's files
and before delta-rs writes the log's next version, so two syncs interleave between their
copies and their commits as real ones do. Everything else (the log, the conditional put
of the next version, the conflict checks, the snapshot state) is delta-rs's own.

`use_delta(hooks)` puts the class in batchpoint's way for its duration: the adapter
looks `deltalake.DeltaTable` up at each call (tables/delta.py), so the module's attribute
is replaced, not batchpoint's code. One schedule at a time (the hooks are the process's).

`DeltaFaults` are the model's hooks: the catalog's (support/faulty_catalog.py: a step at
every call, outages for stretches of steps in which every call fails as object_store
fails on an unavailable store, stalls, crash points before and after the writes), under
Delta's names, plus two faults only a commit has, drawn per commit:
  commit-failed  the commit fails mid-way: the copies are in the table's folder, the log
                 has no new version (a 5xx on the put of the log's next version)
  lost-reply     the commit landed, the caller hears it failed: on S3, the retried
                 conditional put of the log's next version meets the version its first
                 try wrote, and delta-rs reports a conflict
A crash after a commit is the third: the commit landed and the process died before it
returned (`CatalogFaults`' crash after a write).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
import deltalake.table
from deltalake.exceptions import CommitFailedError

from support.faulty_catalog import CatalogFaults, CatalogHooks, NoHooks

#: The calls that change the table (a crash after one leaves it changed).
WRITES = frozenset({"create", "commit"})

_REAL = deltalake.table.DeltaTable
_LOCK = threading.Lock()
_HOOKS: list[CatalogHooks] = []  # the hooks of the `use_delta` in force (one at most)


def _hooks() -> CatalogHooks:
    return _HOOKS[0] if _HOOKS else NoHooks()


def _name(uri: Any, version: int | None = None) -> str:
    """The table as draws key it: its namespace and name (the store's own path changes
    from run to run, a schedule must not)."""
    where = "/".join(str(uri).rstrip("/").split("/")[-2:])
    return where if version is None else f"{where}@{version}"


class SteppedDeltaTable(_REAL):
    """delta-rs's DeltaTable with the hooks of `use_delta` around every storage call."""

    def __init__(
        self,
        table_uri: str | Path,
        version: int | None = None,
        storage_options: dict[str, str] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        name = _name(table_uri, version)
        _hooks().before("open", name)
        super().__init__(table_uri, version, storage_options, *args, **kwargs)
        _hooks().after("open", name)

    @staticmethod
    def is_deltatable(table_uri: str | Path, storage_options: dict[str, str] | None = None) -> bool:
        _hooks().before("exists", _name(table_uri))
        found = _REAL.is_deltatable(table_uri, storage_options)
        _hooks().after("exists", _name(table_uri))
        return found

    @classmethod
    def create(cls, table_uri: str | Path, *args: Any, **kwargs: Any) -> Any:
        _hooks().before("create", _name(table_uri))
        # The real create opens the new table as `cls`: that open is a step of its own.
        table = super().create(table_uri, *args, **kwargs)
        _hooks().after("create", _name(table_uri))
        return table

    def _call(self, op: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        name = _name(self.table_uri)
        hooks = _hooks()
        hooks.before(op, name)
        try:
            result = fn(*args, **kwargs)
        except CommitFailedError:
            if isinstance(hooks, DeltaFaults):
                hooks.conflicts += 1  # delta-rs's own: a concurrent commit won the version
            raise
        hooks.after(op, name)
        return result

    def update_incremental(self) -> None:
        self._call("refresh", super().update_incremental)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("history", super().history, limit)
        return result

    def to_pyarrow_table(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("read", super().to_pyarrow_table, *args, **kwargs)

    def create_write_transaction(self, *args: Any, **kwargs: Any) -> None:
        # The adapter copied the epoch's files before it called this: a hook here is
        # the moment between the copies and the log's next version.
        self._call("commit", super().create_write_transaction, *args, **kwargs)


@contextlib.contextmanager
def use_delta(hooks: CatalogHooks) -> Iterator[None]:
    """While inside, `deltalake.DeltaTable` is a SteppedDeltaTable with `hooks`."""
    with _LOCK:
        if _HOOKS:
            raise RuntimeError("use_delta is in force already: one schedule at a time")
        _HOOKS.append(hooks)
        deltalake.DeltaTable = SteppedDeltaTable  # type: ignore[misc]
    try:
        yield
    finally:
        with _LOCK:
            deltalake.DeltaTable = _REAL  # type: ignore[misc]
            _HOOKS.clear()


def storage_error(op: str) -> OSError:
    """What delta-rs raises when object_store cannot reach the table's storage."""
    return OSError(f"Generic LocalFileSystem error: delta {op}: 503 Service Unavailable (injected)")


@dataclass
class DeltaFaults(CatalogFaults):
    """The catalog's faults under Delta's names, and a commit's own two (module doc)."""

    label: str = "delta"
    writes: frozenset[str] = WRITES
    commit_op: str = "commit"
    outage: Callable[[str], Exception] = storage_error
    #: Per commit: it fails between the copies and the log's next version.
    commit_failed: float = 0.0
    #: Per commit: it lands, and the caller hears of a conflict.
    lost_reply: float = 0.0
    #: Commits that lost the log's next version to a concurrent one (not injected: the
    #: interleaving of two writers, counted to show it happens).
    conflicts: int = 0

    def _drawn(self, op: str, name: str, what: str, rate: float) -> bool:
        return op == self.commit_op and self._armed(op) and self._draw(f"{op}:{what}", name) < rate

    def before(self, op: str, name: str) -> None:
        super().before(op, name)
        if self._drawn(op, name, "failed", self.commit_failed):
            self.injected["delta-commit-failed"] += 1
            raise storage_error(op)

    def after(self, op: str, name: str) -> None:
        super().after(op, name)  # counts the change; a crash after the commit is drawn here
        if self._drawn(op, name, "lost", self.lost_reply):
            self.injected["delta-lost-reply"] += 1
            raise CommitFailedError(
                "Failed to commit transaction: Version already exists (the reply to this "
                "commit's own write was lost, injected)"
            )


__all__ = ["DeltaFaults", "SteppedDeltaTable", "storage_error", "use_delta"]
