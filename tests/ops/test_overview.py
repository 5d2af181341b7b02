"""The drill-down's file origins: what a checkpoint wrote, shared or staged by reference."""

from __future__ import annotations

from batchpoint.ops.overview import file_origin
from batchpoint.protocol.checkpoint import ADOPTED_FROM_META, SHARED_FROM_META, FileHandle


def _handle(**meta: object) -> FileHandle:
    return FileHandle("pipelines/p/data/7/f.parquet", 10, "0" * 64, meta=meta)


def test_each_file_says_where_it_came_from() -> None:
    assert file_origin(_handle()) == "written"
    assert file_origin(_handle(layer=2)) == "written (changelog layer 2)"
    # A shared file keeps its layer, but what matters to a reader is who owns it.
    assert file_origin(_handle(layer=1, **{SHARED_FROM_META: 5})) == "shared from checkpoint 5"
    assert file_origin(_handle(**{ADOPTED_FROM_META: "channel-sink"})) == (
        "staged from channel-sink"
    )
