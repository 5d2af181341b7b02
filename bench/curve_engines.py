"""The engines of bench_cost_curve.py, each run in a child process of its own: the
physical floor (FloorEngine, plain Spark with the state as Parquet and no protocol)
beside bench_peer's batchpoint and Structured Streaming engines; the child's side
(engine_child: every epoch, its figures to result.json and the final state to final/),
started as ``bench_cost_curve.py --engine-child``; and the parent's (run_engine), which
samples the resident memory of the child's process tree meanwhile (TreeSampler) and
returns the engine's figures (EngineRun). A sibling of the scripts, used by
bench_cost_curve."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench_peer import added, timed, tree
from peer_engines import (
    SOURCE_ROOT,
    TOTALS_DDL,
    BatchpointEngine,
    StreamingEngine,
    merge_totals,
    read_batchpoint_state,
    read_streaming_state,
    spark_session,
)

ENGINES = {"bp": "batchpoint", "ss": "structured streaming", "floor": "floor"}
EVENTS_DDL = "key string, amount bigint"
MB = 1_000_000
#: The script whose ``--engine-child`` runs engine_child in the child process.
ENTRY = Path(__file__).with_name("bench_cost_curve.py")


# -- the floor --------------------------------------------------------------------------


class FloorEngine:
    """The physical floor: each epoch a new Parquet state from the last one and the
    epoch's files, with no protocol, no key groups and nothing kept but the state."""

    def __init__(self, spark: Any, inputs: Path, states: Path) -> None:
        self.spark, self.inputs, self.states = spark, inputs, states
        self.epochs = 0

    def state(self, epoch: int) -> Path:
        return self.states / f"s{epoch:05d}"

    def epoch(self) -> None:
        read = self.spark.read
        events = read.schema(EVENTS_DDL).parquet(str(epoch_inputs(self.inputs, self.epochs)))
        previous = None
        if self.epochs:
            previous = read.schema(TOTALS_DDL).parquet(str(self.state(self.epochs - 1)))
        merge_totals(events, previous).write.parquet(str(self.state(self.epochs)))
        self.epochs += 1

    def checkpoint_dir(self) -> Path:
        return self.states


def epoch_inputs(inputs: Path, epoch: int) -> Path:
    return inputs / f"e{epoch:05d}"


# -- one engine in its own process --------------------------------------------------------


def engine_child(engine: str, size_name: str, work: Path, epochs: int, memory: str) -> int:
    """Run `engine`'s epochs on the size's inputs; write its figures to result.json and
    its final state as Parquet (what the parent checks) to final/."""
    home, inputs = work / engine, work / "inputs"
    spark = spark_session(memory)
    spark.sparkContext.setLogLevel("ERROR")
    source: Path | None
    if engine == "bp":
        source = home / "store" / SOURCE_ROOT / "p0"
        runner: Any = BatchpointEngine(spark, home / "store")
    elif engine == "ss":
        source = home / "source"
        runner = StreamingEngine(spark, source, home / "checkpoint")
    else:
        source, runner = None, FloorEngine(spark, inputs, home / "states")
    if source is not None:
        source.mkdir(parents=True)
    rows = []
    for epoch in range(epochs):
        if source is not None:
            # Links, not copies: the same bytes for every engine, and a link appears
            # whole, so Structured Streaming never lists half a file.
            for f in sorted(epoch_inputs(inputs, epoch).glob("*.parquet")):
                os.link(f, source / f.name)
        before = tree(runner.checkpoint_dir())
        seconds = timed(runner.epoch)
        size, files = added(before, tree(runner.checkpoint_dir()))
        rows.append({"s": seconds, "bytes": size, "files": files})
        print(f"[{size_name}] {ENGINES[engine]} epoch {epoch}: {seconds:.2f} s, "
              f"{size:,} bytes in {files} files", flush=True)  # fmt: skip
    epochs_done = time.time()  # the memory peak is the epochs', not the check's below
    if engine == "bp":
        final, restore_from = read_batchpoint_state(spark, home / "store"), home / "store"
    elif engine == "ss":
        final, restore_from = read_streaming_state(spark, home / "checkpoint"), home / "checkpoint"
    else:
        restore_from = runner.state(epochs - 1)
        final = spark.read.schema(TOTALS_DDL).parquet(str(restore_from))
    final.write.parquet(str(home / "final"))
    result = {"epochs": rows, "epochs_done": epochs_done, "restore_from": str(restore_from)}
    (home / "result.json").write_text(json.dumps(result))
    spark.stop()
    return 0


class TreeSampler(threading.Thread):
    """The resident memory of a process and its descendants, every `interval` seconds:
    (time, the JVM's bytes, the whole tree's bytes) per sample.

    A process counts from its second sample on: a child the JVM starts (a shell command)
    shares the JVM's pages until it execs, and its RSS read in that moment counts the
    JVM twice. That is the likeliest reading of a one-sample jump of the tree by about
    the JVM's size, seen once on small with no Python worker in the tree; a process that
    lives past one interval has exec'd, or is a worker of its own."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = psutil.Process(pid), interval
        self.samples: list[tuple[float, int, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        known: set[tuple[int, float]] = set()  # (pid, start): a pid may be reused
        while not self.done.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            jvm = whole = 0
            seen = set()
            for proc in procs:
                try:  # a Python worker may end between the listing and its reading
                    key = (proc.pid, proc.create_time())
                    rss = proc.memory_info().rss
                    is_jvm = proc.name() == "java"
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                seen.add(key)
                if key in known:
                    whole += rss
                    jvm += rss if is_jvm else 0
            known = seen
            if whole:
                self.samples.append((time.time(), jvm, whole))
            self.done.wait(self.interval)

    def peaks(self, until: float) -> tuple[int, int]:
        """The JVM's and the tree's peak among the samples taken before `until`."""
        kept = [s for s in self.samples if s[0] <= until] or self.samples
        return max((s[1] for s in kept), default=0), max((s[2] for s in kept), default=0)


@dataclass
class EngineRun:
    epochs: list[dict[str, Any]]
    jvm_peak: int
    tree_peak: int
    restore_from: Path
    restore_s: float = 0.0

    @property
    def first_s(self) -> float:
        return self.epochs[0]["s"]

    @property
    def warm_s(self) -> float:
        return statistics.median(e["s"] for e in self.epochs[1:])

    @property
    def warm_bytes(self) -> float:
        return statistics.median(e["bytes"] for e in self.epochs[1:])


def run_engine(engine: str, size_name: str, work: Path, epochs: int, memory: str,
               interval: float) -> EngineRun:  # fmt: skip
    log = work / f"{engine}.log"
    command = [sys.executable, str(ENTRY), "--engine-child", engine, size_name, str(work),
               str(epochs), memory]  # fmt: skip
    with log.open("w") as err:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        sampler = TreeSampler(child.pid, interval)
        sampler.start()
        assert child.stdout is not None
        for line in child.stdout:  # the child's progress, as it goes
            print(line.rstrip(), file=sys.stderr, flush=True)
        code = child.wait()
        sampler.done.set()
        sampler.join()
    if code != 0:
        tail = log.read_text().splitlines()[-30:]
        raise RuntimeError(f"{ENGINES[engine]} failed ({code}); its log's end:\n" + "\n".join(tail))
    result = json.loads((work / engine / "result.json").read_text())
    jvm, whole = sampler.peaks(result["epochs_done"])
    print(f"[{size_name}] {ENGINES[engine]}: peak JVM {jvm / MB:,.0f} MB, tree "
          f"{whole / MB:,.0f} MB ({len(sampler.samples)} samples)", file=sys.stderr)  # fmt: skip
    return EngineRun(result["epochs"], jvm, whole, Path(result["restore_from"]))
