"""The real Iceberg catalog (pyiceberg's SqlCatalog on a SQLite file), with a hook at each
catalog call: where a step scheduler lets another actor run, where a test forces an
interleaving, and where faults are injected.

`SteppedCatalog` is the real catalog class with one addition: `before(op, name)` runs
before every catalog call (load, commit, create, namespace calls) and once more inside a
commit, between the write of the new metadata file and the compare-and-set on the
catalog's row (`swap`), so two commits can interleave exactly where real ones race;
`after(op, name)` runs after a call that took effect. Everything else (the SQL, the
metadata files, the commit's compare-and-set) is pyiceberg's own.

The batchpoint code under test opens its catalogs by name (`tables/catalog.py`), so a
`SteppedCatalog` is put in its way through pyiceberg's own configuration: `use_catalog`
sets `PYICEBERG_CATALOG__<NAME>__PY_CATALOG_IMPL` (pyiceberg's documented extension point)
for the duration, and the catalog finds its hooks by a token among its properties.

`CatalogFaults` are the model's hooks: every call is a scheduler step; during an outage
(a stretch of steps drawn from the seed) every call fails as SQLite's driver fails on a
database it cannot open; crash points kill the calling actor just before or just after a
call (after a commit: the table moved, the caller never learnt it); a stall makes a call
hang for a stretch of steps (a slow or locked database) while the other actors go on.
The same hooks serve the Delta table's calls (support/faulty_delta.py), with the Delta
names, writes and errors given as fields.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy.exc import OperationalError

from support.faulty_store import Crash

#: The catalog property naming the hooks of a SteppedCatalog (see `use_catalog`).
HOOKS_PROPERTY = "batchpoint-test-hooks"
#: Calls after which a crash leaves something behind (the others only read).
WRITES = frozenset({"commit_table", "create_table", "create_namespace", "swap"})


class CatalogHooks(Protocol):
    def before(self, op: str, name: str) -> None: ...

    def after(self, op: str, name: str) -> None: ...


class NoHooks:
    def before(self, op: str, name: str) -> None:
        pass

    def after(self, op: str, name: str) -> None:
        pass


@dataclass
class CallHooks:
    """Plain functions as hooks: a test's `support.hooks.once(action, when)`, say."""

    on_before: Callable[[str, str], None] = lambda op, name: None
    on_after: Callable[[str, str], None] = lambda op, name: None

    def before(self, op: str, name: str) -> None:
        self.on_before(op, name)

    def after(self, op: str, name: str) -> None:
        self.on_after(op, name)


_REGISTRY: dict[str, CatalogHooks] = {}
_OPENED: dict[str, list[SqlCatalog]] = {}
_TOKENS = itertools.count(1)
_LOCK = threading.Lock()


def _name(identifier: Any) -> str:
    return identifier if isinstance(identifier, str) else ".".join(identifier)


class SteppedCatalog(SqlCatalog):
    """pyiceberg's SqlCatalog with `before`/`after` hooks around every catalog call.
    `hooks` given directly, or found by the token in its properties (`use_catalog`)."""

    def __init__(self, name: str, *, hooks: CatalogHooks | None = None, **properties: str) -> None:
        token = properties.get(HOOKS_PROPERTY, "")
        with _LOCK:
            self.hooks: CatalogHooks = hooks or _REGISTRY.get(token, NoHooks())
            if token:
                _OPENED.setdefault(token, []).append(self)
        super().__init__(name, **properties)

    def _call(self, op: str, name: Any, fn: Callable[[], Any]) -> Any:
        self.hooks.before(op, _name(name))
        result = fn()
        self.hooks.after(op, _name(name))
        return result

    def load_table(self, identifier: Any) -> Any:
        base = super()
        return self._call("load_table", identifier, lambda: base.load_table(identifier))

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        base = super()
        return self._call(
            "commit_table", table.name(), lambda: base.commit_table(table, requirements, updates)
        )

    def create_table(self, identifier: Any, *args: Any, **kwargs: Any) -> Any:
        base = super()
        return self._call(
            "create_table", identifier, lambda: base.create_table(identifier, *args, **kwargs)
        )

    def create_namespace(self, namespace: Any, *args: Any, **kwargs: Any) -> None:
        base = super()
        self._call(
            "create_namespace", namespace, lambda: base.create_namespace(namespace, *args, **kwargs)
        )

    def namespace_exists(self, namespace: Any) -> bool:
        base = super()
        return self._call("namespace_exists", namespace, lambda: base.namespace_exists(namespace))

    def drop_table(self, identifier: Any) -> None:
        base = super()
        self._call("drop_table", identifier, lambda: base.drop_table(identifier))

    def _write_metadata(self, metadata: Any, io: Any, metadata_path: str) -> None:  # type: ignore[override]
        # The new metadata file is written; the compare-and-set on the catalog's row
        # comes next: a racing commit may go first here.
        SqlCatalog._write_metadata(metadata, io, metadata_path)
        self.hooks.before("swap", metadata_path.rsplit("/", 1)[-1])


@contextlib.contextmanager
def use_catalog(name: str, uri: str, hooks: CatalogHooks) -> Iterator[str]:
    """While inside, batchpoint's catalog `name` is a SteppedCatalog on the SQLite `uri`
    with `hooks` (BATCHPOINT_TABLE_CATALOG, which would override it, is unset). Yields
    the hooks' token; on exit every catalog opened under it is closed."""
    token = f"t{next(_TOKENS)}"
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    env = {
        prefix + "PY_CATALOG_IMPL": f"{__name__}.SteppedCatalog",
        prefix + "URI": uri,
        prefix + HOOKS_PROPERTY.upper().replace("-", "_"): token,
    }
    saved = {k: os.environ.get(k) for k in [*env, "BATCHPOINT_TABLE_CATALOG"]}
    with _LOCK:
        _REGISTRY[token] = hooks
    os.environ.update(env)
    os.environ.pop("BATCHPOINT_TABLE_CATALOG", None)
    try:
        yield token
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        with _LOCK:
            _REGISTRY.pop(token, None)
            opened = _OPENED.pop(token, [])
        for catalog in opened:  # a cached catalog keeps no SQLite file open afterwards
            catalog.hooks = NoHooks()
            catalog.engine.dispose()


def outage_error(op: str) -> OperationalError:
    """What SQLAlchemy raises when SQLite cannot open the catalog's database."""
    return OperationalError(
        f"-- catalog {op}", None, sqlite3.OperationalError("unable to open database file")
    )


@dataclass
class CatalogFaults:
    """The model's catalog hooks: a scheduler step at every call; outages (half-open
    ranges of scheduler steps) in which every call fails; crash points drawn per call."""

    yield_point: Callable[[str, str], None]
    step: Callable[[], int]
    outages: list[tuple[int, int]] = field(default_factory=list)
    crash: float = 0.0
    #: Probability per call of a stall (a commit, which waits for the database's
    #: write lock, stalls more often), and the scheduler's way to make one.
    stall: float = 0.0
    stall_for: Callable[[str, str], None] | None = None
    uniform: Callable[[str, str], float] | None = None
    crashes_allowed: Callable[[], bool] = lambda: True
    enabled: bool = True
    #: Down whatever the step (the model's warm-up uses it for a lagging table).
    down_now: bool = False
    #: What the hooked calls are: the prefix of the scheduler's ops, of the draws and of
    #: the faults counted; the calls that write; the call that commits (it stalls more
    #: often: it waits for a lock); what an outage raises.
    label: str = "catalog"
    writes: frozenset[str] = WRITES
    commit_op: str = "commit_table"
    outage: Callable[[str], Exception] = outage_error
    injected: Counter[str] = field(default_factory=Counter)
    #: Catalog calls that took effect and changed it (commits, creations).
    changes: int = 0

    def down(self) -> bool:
        if self.down_now:
            return True
        now = self.step()
        return self.enabled and any(start <= now < end for start, end in self.outages)

    def _draw(self, op: str, name: str) -> float:
        return self.uniform(f"{self.label}.{op}", name) if self.uniform is not None else 1.0

    def _armed(self, op: str) -> bool:
        """Whether a crash may hit this call: a write, inside a model actor."""
        return self.enabled and op in self.writes and self.crashes_allowed()

    def before(self, op: str, name: str) -> None:
        self.yield_point(f"{self.label}.{op}", name)
        stalls = self.enabled and self.stall_for is not None and self.crashes_allowed()
        rate = self.stall * (3 if op == self.commit_op else 1)
        if stalls and self._draw(op + ":stall", name) < rate:
            self.injected[f"{self.label}-stall"] += 1
            assert self.stall_for is not None
            self.stall_for(op, name)
        if self.down():
            self.injected[f"{self.label}-outage"] += 1
            raise self.outage(op)
        if self._armed(op) and self._draw(op, name) < self.crash / 2:
            self.injected[f"{self.label}-crash-before"] += 1
            raise Crash(f"{self.label}.{op}", name, "before")

    def after(self, op: str, name: str) -> None:
        if op in self.writes:
            self.changes += 1
        if self._armed(op) and self._draw(op + ":after", name) < self.crash / 2:
            self.injected[f"{self.label}-crash-after"] += 1
            raise Crash(f"{self.label}.{op}", name, "after")
