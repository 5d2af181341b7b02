"""What the checkpoint protocol costs on a real S3 (SeaweedFS), next to the raw requests.

For N = 10 / 100 / 1,000 tasks it completes checkpoints (trigger -> N acks from a thread
pool -> try_finalize) and times each phase; then it times what the same amount of
data costs without any protocol: N plain PUTs of the ack records' size from the same
pool, and a LIST of N keys (what the ack sensor needs to see who acknowledged). The
ratio protocol / raw is the protocol's overhead factor. State files are written before
the clock starts: they are the tasks' data, paid with or without checkpoints.

    .venv/bin/python bench/bench_protocol.py                   # 10, 100, 1000
    .venv/bin/python bench/bench_protocol.py --sizes 10,100 --repeat 5 --keep

Starts (and stops) its own SeaweedFS; nothing is asserted, the table is the output.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointStatus,
    FileHandle,
    TaskAcknowledgeResult,
    TaskMetrics,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.storage import open_store
from batchpoint.storage.base import ObjectStore
from harness import add_seaweed_arguments, seaweed, timed


@dataclass
class Sample:
    trigger: float
    acks: float
    finalize: float
    raw_puts: float
    raw_list: float
    ack_bytes: int

    @property
    def protocol(self) -> float:
        return self.trigger + self.acks + self.finalize

    @property
    def raw(self) -> float:
        return self.raw_puts + self.raw_list


def _spec(name: str, tasks: int) -> PipelineSpec:
    return PipelineSpec(
        name,
        (
            OperatorSpec("source", OperatorKind.SOURCE),
            OperatorSpec(
                "op",
                OperatorKind.OPERATOR,
                ("source",),
                parallelism=tasks,
                max_parallelism=max(128, tasks),
            ),
        ),
    )


def _run_all(pool: ThreadPoolExecutor, calls: Iterable[Callable[[], object]]) -> list[object]:
    return [f.result() for f in [pool.submit(call) for call in calls]]


@dataclass
class _Protocol:
    """The checkpoint's side of a sample: its phases' seconds and the acks it stored."""

    trigger: float
    acks: float
    finalize: float
    sample_ack: AckRecord


def one_checkpoint(
    store: ObjectStore, tasks: int, workers: int, state_bytes: int, epoch: int
) -> Sample:
    with ThreadPoolExecutor(workers) as pool:
        protocol = _complete_checkpoint(pool, store, tasks, state_bytes, epoch)
        ack_bytes = len(protocol.sample_ack.encode())
        raw_puts, raw_list = _raw_requests(pool, store, tasks, ack_bytes)
    return Sample(protocol.trigger, protocol.acks, protocol.finalize, raw_puts, raw_list, ack_bytes)


def _complete_checkpoint(
    pool: ThreadPoolExecutor, store: ObjectStore, tasks: int, state_bytes: int, epoch: int
) -> _Protocol:
    """Trigger, N acks from the pool (state files written before the clock) and
    finalize, each timed."""
    spec = _spec(f"bench-{tasks}-{epoch}", tasks)
    c = CheckpointCoordinator(store, spec, CheckpointConfig(timeout=3600))
    c.register(spec)
    body = b"s" * state_bytes
    sha = hashlib.sha256(body).hexdigest()

    t_trigger, pending = timed(lambda: c.trigger({"src": {"p0": epoch}}))
    cid = pending.checkpoint_id

    def write_state(task: TaskId) -> tuple[FileHandle, ...]:
        key = c.layout.task_data_prefix(cid, task, "a1") + "part-0.parquet"
        store.put(key, body)
        return (FileHandle(key, len(body), sha, rows=1),)

    names = list(pending.expected_tasks)
    written = _run_all(pool, [lambda t=t: write_state(t) for t in names])
    handles = dict(zip(names, written, strict=True))

    def ack(task: TaskId) -> None:
        result = c.acknowledge(cid, task, "a1", handles[task])  # type: ignore[arg-type]
        if result is not TaskAcknowledgeResult.SUCCESS:
            raise RuntimeError(f"ack of {task}: {result}")

    t_acks, _ = timed(lambda: _run_all(pool, [lambda t=t: ack(t) for t in names]))
    t_finalize, outcome = timed(lambda: c.try_finalize(cid))
    if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
        raise RuntimeError(f"checkpoint {cid} did not complete: {outcome}")
    sample_ack = AckRecord(cid, names[0], "a1", handles[names[0]], TaskMetrics(), 0.0)  # type: ignore[arg-type]
    return _Protocol(t_trigger, t_acks, t_finalize, sample_ack)


def _raw_requests(
    pool: ThreadPoolExecutor, store: ObjectStore, tasks: int, ack_bytes: int
) -> tuple[float, float]:
    """The raw baseline: the same number of PUTs of an ack record's size, and one LIST
    over them, with nothing conditional and nothing read back."""
    payload = b"r" * ack_bytes
    raw_prefix = f"raw/{uuid.uuid4().hex}/"
    t_puts, _ = timed(
        lambda: _run_all(
            pool,
            [lambda i=i: store.put(f"{raw_prefix}{i:06d}.json", payload) for i in range(tasks)],
        )
    )
    t_list, listed = timed(lambda: list(store.list(raw_prefix)))
    if len(listed) != tasks:
        raise RuntimeError(f"raw LIST found {len(listed)} of {tasks} objects")
    return t_puts, t_list


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:9.1f}"


def report(results: dict[int, list[Sample]], workers: int, state_bytes: int) -> None:
    print()
    print(
        f"checkpoint protocol on SeaweedFS, {workers} ack threads, {state_bytes} B state "
        "file per task (written before timing); medians, milliseconds"
    )
    header = (
        f"{'acks':>6} {'runs':>4} | {'trigger':>9} {'acks':>9} {'finalize':>9} {'protocol':>9}"
        f" | {'raw PUTs':>9} {'raw LIST':>9} {'raw':>9} | {'ratio':>6} {'acks/PUTs':>9}"
    )
    print(header)
    print("-" * len(header))
    for tasks, samples in results.items():

        def med(attr: str, samples: list[Sample] = samples) -> float:
            return statistics.median(getattr(s, attr) for s in samples)

        print(
            f"{tasks:>6} {len(samples):>4} |"
            f"{_ms(med('trigger'))} {_ms(med('acks'))} {_ms(med('finalize'))}"
            f" {_ms(med('protocol'))} |"
            f"{_ms(med('raw_puts'))} {_ms(med('raw_list'))} {_ms(med('raw'))} |"
            f" {med('protocol') / med('raw'):5.1f}x {med('acks') / med('raw_puts'):8.1f}x"
        )
    print()
    print("ratio      = protocol (trigger + acks + finalize) / raw (PUTs + LIST)")
    print("acks/PUTs  = the ack phase alone / the same number of plain PUTs")
    sizes = ", ".join(f"{n}: {s[0].ack_bytes} B" for n, s in results.items())
    print(f"ack record size (raw PUT payload): {sizes}")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[int]]:
    """The options, and --sizes as numbers."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="10,100,1000",
        help="comma-separated numbers of acks per checkpoint (default: 10,100,1000)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="checkpoints per size (default: 5 up to 100 acks, 2 above)",
    )
    parser.add_argument("--workers", type=int, default=16, help="ack threads (default: 16)")
    parser.add_argument(
        "--state-bytes", type=int, default=4096, help="state file size per task (default: 4096)"
    )
    add_seaweed_arguments(parser)
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, not {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        parser.error("--sizes needs at least one positive number")
    return args, sizes


def measure(
    store: ObjectStore, args: argparse.Namespace, sizes: list[int]
) -> dict[int, list[Sample]]:
    """Every size's checkpoints, after one untimed round; a progress line each on stderr."""
    results: dict[int, list[Sample]] = {}
    # one throwaway round, so connection pools and the server are warm
    one_checkpoint(store, min(sizes), args.workers, args.state_bytes, epoch=0)
    for tasks in sizes:
        runs = args.repeat or (5 if tasks <= 100 else 2)
        for epoch in range(1, runs + 1):
            sample = one_checkpoint(store, tasks, args.workers, args.state_bytes, epoch)
            results.setdefault(tasks, []).append(sample)
            print(
                f"  {tasks} acks, run {epoch}/{runs}: protocol "
                f"{sample.protocol * 1000:.0f} ms, raw {sample.raw * 1000:.0f} ms",
                file=sys.stderr,
            )
    return results


def main(argv: list[str] | None = None) -> int:
    args, sizes = parse_args(argv)
    started = time.perf_counter()
    with seaweed(args, "bp-bench-") as server:
        store = open_store(server.uri(f"bench-{uuid.uuid4().hex[:8]}"), server.storage_options())
        results = measure(store, args, sizes)
        store.close()
    report(results, args.workers, args.state_bytes)
    print(f"(total {time.perf_counter() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
