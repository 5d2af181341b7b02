"""A local store's root folder is made by the first write, never by opening or reading:
read-only commands pointed at a wrong folder leave nothing behind (issue 10, item 10)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from batchpoint.errors import ConfigError, ObjectNotFound
from batchpoint.storage.local import LocalObjectStore


def test_opening_and_reading_a_missing_root_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "not" / "there"
    store = LocalObjectStore(root)
    assert list(store.list("pipelines/")) == []
    assert store.list_dirs("pipelines/") == []
    assert not store.exists("pipelines/p/head.json")
    with pytest.raises(ObjectNotFound):
        store.get("pipelines/p/head.json")
    assert not (tmp_path / "not").exists()

    store.create("pipelines/p/head.json", b"{}")
    assert store.get("pipelines/p/head.json").data == b"{}"


def test_a_root_under_a_regular_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        LocalObjectStore(tmp_path / "file" / "root")


def test_read_only_commands_on_a_missing_root_create_nothing(tmp_path: Path) -> None:
    root = tmp_path / "missing-root"
    elsewhere = tmp_path / "no-savepoint-here"
    for args in (
        ["checkpoints", "list"],
        ["--pipeline", "payments", "stats"],
        ["--pipeline", "payments", "verify", elsewhere.as_uri(), "--integrity-only"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "batchpoint", "--root", root.as_uri(), *args],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("error: "), done.stderr
        assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
