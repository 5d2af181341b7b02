"""What verifying checksums at restore costs, next to checking sizes only, on the same data.

A restore checks every file the target checkpoint references before it moves the head
(`batchpoint.protocol.verify.check_handles`, what both the coordinator's restore and the
restore planner call). Sizes only is one HEAD per file; checksums re-read every byte and
hash it. For each shape of state (a few large files, many small ones) and each store it
writes the files once, then times both checks on the same files, `--repeat` times, and
prints the medians and the ratio checksums / sizes-only.

    .venv/bin/python bench/bench_restore_checksums.py                      # local + s3
    .venv/bin/python bench/bench_restore_checksums.py --store local --shapes 8x8MiB

Starts (and stops) its own SeaweedFS for `s3`; nothing is asserted, the table is the output.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.protocol.verify import check_handles
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore

UNITS = {"KiB": 1024, "MiB": 1024 * 1024, "GiB": 1024**3}


def parse_shape(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)x(\d+)(KiB|MiB|GiB)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"shape {text!r}: use COUNTxSIZE, e.g. 16x4MiB")
    return int(match.group(1)), int(match.group(2)) * UNITS[match.group(3)]


def human(size: int) -> str:
    for unit in ("GiB", "MiB", "KiB"):
        if size >= UNITS[unit]:
            return f"{size / UNITS[unit]:.0f} {unit}"
    return f"{size} B"


@contextmanager
def open_stores(which: list[str]) -> Iterator[dict[str, ObjectStore]]:
    tmp = Path(tempfile.mkdtemp(prefix="bp-bench-checksums-"))
    stores: dict[str, ObjectStore] = {}
    server = None
    try:
        if "local" in which:
            stores["local"] = LocalObjectStore(tmp / "local")
        if "s3" in which:
            from batchpoint.storage.s3 import S3ObjectStore, S3Settings
            from devstack.seaweed import SeaweedServer

            server = SeaweedServer(tmp / "weed").start()
            settings = S3Settings.from_options(server.storage_options())
            stores["s3"] = S3ObjectStore(server.bucket, f"bench-{uuid.uuid4().hex[:8]}", settings)
        yield stores
    finally:
        for store in stores.values():
            store.close()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def write_state(store: ObjectStore, count: int, size: int) -> list[FileHandle]:
    handles = []
    prefix = f"state-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            data = os.urandom(size)
            local = Path(tmp) / "part"
            local.write_bytes(data)
            key = f"{prefix}/part-{i:05d}"
            store.upload_file(key, local)
            handles.append(FileHandle(key, size, hashlib.sha256(data).hexdigest(), 1))
    return handles


def timed(store: ObjectStore, handles: list[FileHandle], checksums: bool) -> float:
    started = time.perf_counter()
    problems = check_handles(store, handles, checksums=checksums)
    elapsed = time.perf_counter() - started
    assert not problems, problems  # the bench measures intact state
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["local", "s3", "both"], default="both")
    parser.add_argument(
        "--shapes",
        default="8x16MiB,500x16KiB",
        help="comma-separated COUNTxSIZE (default: 8x16MiB,500x16KiB)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    which = ["local", "s3"] if args.store == "both" else [args.store]
    rows = []
    with open_stores(which) as stores:
        for name, store in stores.items():
            for count, size in shapes:
                handles = write_state(store, count, size)
                timed(store, handles, True)  # warm caches alike for both modes
                sizes = [timed(store, handles, False) for _ in range(args.repeat)]
                sums = [timed(store, handles, True) for _ in range(args.repeat)]
                s, c = statistics.median(sizes), statistics.median(sums)
                rows.append(
                    {
                        "store": name,
                        "files": count,
                        "file_size": size,
                        "total_bytes": count * size,
                        "sizes_only_s": round(s, 4),
                        "checksums_s": round(c, 4),
                        "ratio": round(c / s, 1) if s > 0 else None,
                        "checksum_mib_per_s": round(count * size / UNITS["MiB"] / c, 1),
                    }
                )
    print(
        f"{'store':<7}{'files':>7}{'each':>9}{'total':>10}{'sizes only':>12}"
        f"{'checksums':>11}{'ratio':>8}{'MiB/s':>8}"
    )
    for r in rows:
        print(
            f"{r['store']:<7}{r['files']:>7}{human(r['file_size']):>9}"
            f"{human(r['total_bytes']):>10}{r['sizes_only_s']:>11.3f}s{r['checksums_s']:>10.3f}s"
            f"{r['ratio']:>7}x{r['checksum_mib_per_s']:>8}"
        )
    print(json.dumps({"bench": "restore_checksums", "repeat": args.repeat, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
