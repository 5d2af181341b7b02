"""What several benches share: a timer, and a SeaweedFS in a data directory that is
removed afterwards unless `--keep` or `--data-dir` says otherwise.

A sibling of the scripts (run as `bench/<script>.py`, their folder is on sys.path).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from devstack.seaweed import SeaweedServer

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds `fn` took, and what it returned."""
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def add_seaweed_arguments(parser: argparse.ArgumentParser) -> None:
    """`--keep` and `--data-dir`, read by `seaweed`."""
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the SeaweedFS data directory (and everything written) afterwards",
    )
    parser.add_argument("--data-dir", type=Path, help="where SeaweedFS keeps its data")


@contextmanager
def seaweed(args: argparse.Namespace, prefix: str) -> Iterator[SeaweedServer]:
    """A SeaweedFS on `args.data_dir` (else a new temporary directory named `prefix`...),
    said on stderr; the temporary directory goes afterwards unless `args.keep`."""
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with SeaweedServer(data_dir) as server:
            print(f"SeaweedFS at {server.endpoint_url} (data: {data_dir})", file=sys.stderr)
            yield server
    finally:
        if args.keep:
            print(f"kept SeaweedFS data in {data_dir}", file=sys.stderr)
        elif args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
