"""Deterministic interleavings: a store wrapper that lets another actor take its steps
at a chosen call of the actor under test, instead of sleeping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from batchpoint.storage.base import ObjectStore


class HookStore:
    """The real store, with `hook(op, key)` called before each get/list/head/create/
    replace/download_file (`list_sizes` as "list"): the place where a test lets another
    actor take its steps."""

    def __init__(self, inner: ObjectStore, hook: Callable[[str, str], None]) -> None:
        self._inner = inner
        self._hook = hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _call(self, op: str, key: str, *args: Any, **kwargs: Any) -> Any:
        self._hook(op, key)
        return getattr(self._inner, op)(key, *args, **kwargs)

    def get(self, key: str, *a: Any, **k: Any) -> Any:
        return self._call("get", key, *a, **k)

    def list(self, key: str, *a: Any, **k: Any) -> Any:
        return self._call("list", key, *a, **k)

    def list_sizes(self, key: str, *a: Any, **k: Any) -> Any:
        # A listing for keys and sizes is the same step of the schedule as list().
        self._hook("list", key)
        return self._inner.list_sizes(key, *a, **k)

    def head(self, key: str, *a: Any, **k: Any) -> Any:
        return self._call("head", key, *a, **k)

    def create(self, key: str, *a: Any, **k: Any) -> Any:
        return self._call("create", key, *a, **k)

    def replace(self, key: str, *a: Any, **k: Any) -> Any:
        return self._call("replace", key, *a, **k)

    def download_file(self, key: str, *a: Any, **k: Any) -> Any:
        return self._call("download_file", key, *a, **k)


def once(action: Callable[[], None], when: Callable[[str, str], bool], nth: int = 1) -> Callable:
    """A hook running `action` at the `nth` call matching `when`, and never again."""
    fired: list[bool] = []
    seen = [0]

    def hook(op: str, key: str) -> None:
        if fired or not when(op, key):
            return
        seen[0] += 1
        if seen[0] == nth:
            fired.append(True)
            action()

    hook.fired = fired  # type: ignore[attr-defined]
    return hook
