"""A sink that stages its input channel's files by reference: when it may, what its ack
then holds, and that nothing deletes or double-counts the producer's files. No Spark: the
files are small byte strings acknowledged through the real coordinator."""

from __future__ import annotations

import hashlib

from batchpoint.protocol.checkpoint import (
    ADOPTED_FROM_META,
    CheckpointStatus,
    FileHandle,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.savepoints import (
    SavepointLocation,
    check_savepoint,
)
from batchpoint.runtime.adopted_channels import adopt_channel
from batchpoint.state.keygroups import key_group_range_for_subtask

MAX_PAR = 8


def channel(ranges: list[tuple[int, int]], max_par: int = MAX_PAR) -> list[FileHandle]:
    return [
        FileHandle(
            f"data/op/channel-s/subtask-{i}/a/part-0.parquet",
            100 + i,
            "0" * 64,
            rows=10 + i,
            key_group_range=r,
            name="channel-s",
            meta={"max_parallelism": max_par, "consumers": ["s", "t"]},
        )
        for i, r in enumerate(ranges)
    ]


def test_files_inside_one_subtask_range_each_are_adopted_as_the_sinks_own() -> None:
    files = channel([(0, 3), (4, 7)])  # a producer of parallelism 2
    for parallelism, expected in ((1, {0: [0, 1]}), (2, {0: [0], 1: [1]})):
        adopted = adopt_channel(files, "sink", MAX_PAR, parallelism)
        assert adopted is not None
        index = {f.path: i for i, f in enumerate(files)}
        assert {i: [index[h.path] for h in hs] for i, hs in adopted.items()} == expected
        for subtask, handles in adopted.items():
            own = key_group_range_for_subtask(MAX_PAR, parallelism, subtask)
            groups = [
                g for h in handles for g in range(h.key_group_range[0], h.key_group_range[1] + 1)
            ]
            assert groups == list(range(own.start, own.end + 1))  # they tile its range
            for h in handles:
                assert h.name == "sink" and h.meta[ADOPTED_FROM_META] == "channel-s"
                assert "consumers" not in h.meta


def test_a_file_spanning_two_sink_subtasks_or_unknown_keying_is_not_adopted() -> None:
    assert adopt_channel(channel([(0, 3), (4, 7)]), "sink", MAX_PAR, 4) is None  # 0-3 spans two
    assert adopt_channel(channel([(0, 7)], max_par=16), "sink", MAX_PAR, 1) is None
    assert adopt_channel([], "sink", MAX_PAR, 1) is None


def _write(c: CheckpointCoordinator, key: str, data: bytes, **fields) -> FileHandle:
    c.store.put(key, data)
    return FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), **fields)


def test_an_adopting_sinks_duplicate_attempt_deletes_nothing_it_did_not_write(store) -> None:
    c = CheckpointCoordinator(store, "p")
    c.register(simple_pipeline("p", [("op", 1), ("sink", 1)]))
    pending = c.trigger({"source": {"p0": 1}})
    cid = pending.checkpoint_id
    # the producer's attempt id is "a1", and so is the sink's late duplicate attempt
    prefix = c.layout.task_data_prefix(cid, TaskId("op", 0), "a1")
    out = _write(
        c,
        prefix + "channel-sink/part-0.parquet",
        b"rows" * 50,
        rows=5,
        key_group_range=(0, 7),
        name="channel-sink",
        meta={"max_parallelism": 8},
    )
    assert c.acknowledge(cid, TaskId("op", 0), "a1", [out]) is TaskAcknowledgeResult.SUCCESS
    adopted = adopt_channel([out], "sink", 8, 1)
    assert adopted is not None
    assert c.acknowledge(cid, TaskId("sink", 0), "s1", adopted[0]) is TaskAcknowledgeResult.SUCCESS
    assert (
        c.acknowledge(cid, TaskId("sink", 0), "a1", adopted[0]) is TaskAcknowledgeResult.DUPLICATE
    )
    assert store.exists(out.path)  # the producer's file, which the checkpoint references

    completed = c.try_finalize(cid).completed
    assert completed is not None and completed.pending.checkpoint_id == cid
    # one file, referenced twice, counted once
    assert completed.state_size == out.size
    assert {a.task: a.state_size for a in completed.acks} == {
        TaskId("op", 0): out.size,
        TaskId("sink", 0): 0,
    }

    # a savepoint of it copies the file once and imports whole
    target = SavepointLocation(store, "savepoints/adopted")
    report = c.savepoints.export(cid, target)
    assert report.files == 1 and report.bytes == out.size
    assert check_savepoint(target) == []
    imported = c.savepoints.import_folder(target)
    assert c.status(imported.checkpoint_id) is CheckpointStatus.COMPLETED
    paths = {h.path for h in imported.handles}
    assert len(paths) == 1 and all(store.exists(p) for p in paths)
