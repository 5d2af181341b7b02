"""Getting an ObjectStore onto Spark executors.

State never passes through the driver, so every task opens the store itself: the store
object travels when it pickles, else a StoreRef from which the executor opens its own.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Mapping
from dataclasses import dataclass

from batchpoint.errors import ConfigError
from batchpoint.storage import ObjectStore, StoreRef

StoreLike = ObjectStore | StoreRef | tuple[str, Mapping[str, str]]


@dataclass(frozen=True)
class ShippedStore:
    """What travels to the executors: the store itself when it pickles, else a ref."""

    store: ObjectStore | None = None
    ref: StoreRef | None = None

    def open(self) -> ObjectStore:
        if self.store is not None:
            return self.store
        assert self.ref is not None
        return self.ref.open()


def ship_store(store: StoreLike) -> ShippedStore:
    """What to put in a task's closure so that the task can open `store`."""
    from batchpoint.spark.remote import for_workers

    if isinstance(store, StoreRef):
        return ShippedStore(ref=for_workers(store))
    if isinstance(store, tuple):
        uri, options = store
        return ShippedStore(ref=for_workers(StoreRef.of(uri, options)))
    with contextlib.suppress(Exception):  # any pickling failure: send a ref instead
        pickle.dumps(store)
        return ShippedStore(store=store)
    if store.uri.startswith("file:"):
        return ShippedStore(ref=StoreRef.of(store.uri))  # a local store needs no options
    raise ConfigError(
        f"store {store.uri} cannot be sent to Spark executors: pass (uri, options) or a "
        "StoreRef so that executors can open it themselves"
    )


def driver_store(store: StoreLike) -> ObjectStore:
    """`store` opened on the driver, for listing and deleting (never for state bytes)."""
    return store if isinstance(store, ObjectStore) else ship_store(store).open()
