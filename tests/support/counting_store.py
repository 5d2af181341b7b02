"""The real store, counting its calls by operation: how a test or bench sees how many
storage requests something costs (in `listed`, which prefixes it listed; in `by_key`,
each call by operation and the key it named, e.g. how often one file was looked at)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from batchpoint.storage.base import ObjectStore


class CountingStore:
    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()
        self.listed: list[str] = []
        self.by_key: Counter[tuple[str, str]] = Counter()
        # Callers check files from a thread pool (protocol/verify.py).
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            key = args[0] if args and isinstance(args[0], str) else None
            with self._lock:
                self.calls[name] += 1
                if name in ("list", "list_sizes", "list_dirs"):
                    self.listed.append(args[0] if args else kwargs.get("prefix", ""))
                if key is not None:
                    self.by_key[(name, key)] += 1
            return attr(*args, **kwargs)

        return counted
