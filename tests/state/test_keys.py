"""The keys of a keyed write's files (issue 42): each subtask of each stream under a
spread folder of its own, the same for every attempt; keys of the layout before it are
still read. Pure: no store, no Spark."""

from __future__ import annotations

from collections import Counter

import pytest

from batchpoint.state.format import StateError
from batchpoint.state.keys import (
    SubtaskFolder,
    spread_folder,
    state_file_key,
    subtask_prefix,
)


def test_a_file_key_is_under_its_subtasks_spread_folder_inside_the_base() -> None:
    key = state_file_key("chk-1/data/op/", "state-s", 3, "af-1", 2, "t17")
    hh = spread_folder("state-s", 3)
    assert len(hh) == 2 and int(hh, 16) in range(256)
    assert key == f"chk-1/data/op/{hh}/state-s/subtask-3/af-1/part-00002-t17.parquet"
    # Another attempt of the same subtask (a retry) writes beside it.
    assert subtask_prefix("chk-1/data/op", "state-s", 3, "af-2").startswith(f"chk-1/data/op/{hh}/")
    with pytest.raises(StateError):
        subtask_prefix("../x", "state-s", 3, "af-1")


def test_the_subtasks_of_a_pipelines_streams_spread_over_many_prefixes() -> None:
    """256 (stream, subtask) pairs, as a uniform hash puts them in 256 folders: most
    folders used (the expectation is 162), none holding more than a few."""
    streams = ["state-balances", "channel-alerts", "sink", "state-totals"]
    folders = Counter(spread_folder(s, i) for s in streams for i in range(64))
    assert len(folders) >= 150
    assert max(folders.values()) <= 6
    first = [spread_folder("state-balances", i) for i in range(4)]
    assert len(set(first)) == 4  # a small write's subtasks already differ


def test_of_key_reads_both_layouts_and_nothing_else() -> None:
    spread = SubtaskFolder("state-s", 3, "af-1")
    old = SubtaskFolder("state-s", 3, "af-1", spread=False)
    assert spread.relative() == f"{spread_folder('state-s', 3)}/state-s/subtask-3/af-1/"
    assert old.relative() == "state-s/subtask-3/af-1/"
    for folder in (spread, old):
        assert SubtaskFolder.of_key(folder.relative() + "part-00000-t9.parquet") == folder
    wrong = "00" if spread_folder("state-s", 3) != "00" else "01"
    assert SubtaskFolder.of_key(f"{wrong}/state-s/subtask-3/af-1/part-0.parquet") is None
    assert SubtaskFolder.of_key("0/af-1/state-s/part-0.parquet") is None  # a test's shape
    assert SubtaskFolder.of_key("state-s/part-0.parquet") is None
