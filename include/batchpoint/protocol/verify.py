"""Checks that the files a checkpoint references are really there and intact."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from batchpoint.errors import ObjectNotFound
from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.protocol.ports import Count, ProgressFn, count_due
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class FileProblem:
    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def sha256_of(store: ObjectStore, key: str) -> str:
    with tempfile.TemporaryDirectory(prefix="bp-verify-") as tmp:
        local = Path(tmp) / "object"
        store.download_file(key, local)
        digest = hashlib.sha256()
        with local.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()


def check_handle(store: ObjectStore, handle: FileHandle, checksums: bool) -> FileProblem | None:
    info = store.head(handle.path)
    if info is None:
        return FileProblem(handle.path, "missing")
    if info.size != handle.size:
        return FileProblem(handle.path, f"size {info.size} bytes, recorded {handle.size}")
    if checksums:
        try:
            actual = sha256_of(store, handle.path)
        except ObjectNotFound:
            return FileProblem(handle.path, "missing")
        if actual != handle.sha256:
            return FileProblem(
                handle.path, f"sha256 {actual[:12]}…, recorded {handle.sha256[:12]}…"
            )
    return None


def check_handles(
    store: ObjectStore,
    handles: Iterable[FileHandle],
    *,
    checksums: bool,
    workers: int = 8,
    progress: ProgressFn | None = None,
) -> list[FileProblem]:
    handles = list(handles)
    if not handles:
        return []
    problems = []
    with ThreadPoolExecutor(max_workers=min(workers, len(handles))) as pool:
        results = pool.map(lambda h: check_handle(store, h, checksums), handles)
        for done, problem in enumerate(results, 1):
            if problem is not None:
                problems.append(problem)
            if progress is not None and count_due(done, len(handles)):
                line = f"  checked {done}/{len(handles)} file(s)"
                progress(Count("checking files", done, len(handles), line))
    return problems
