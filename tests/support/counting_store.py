"""The real store, counting its calls by operation: how a test or bench sees how many
storage requests something costs (and, in `listed`, which prefixes it listed)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from batchpoint.storage.base import ObjectStore


class CountingStore:
    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()
        self.listed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name in ("list", "list_dirs"):
                self.listed.append(args[0] if args else kwargs.get("prefix", ""))
            return attr(*args, **kwargs)

        return counted
