"""`python -m demo.feed`: the payment files a user puts into the deployment's store, the
same bytes the stack test's feed writes for the same epochs."""

from __future__ import annotations

import pytest

from batchpoint.storage.local import LocalObjectStore
from demo.feed import ACCOUNTS, EVENTS_PER_EPOCH, main
from demo.payments import SOURCE_ROOT
from demo.payments_data import write_epoch_files


def test_the_feed_writes_the_epochs_files_where_the_source_reads(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BATCHPOINT_ROOT", (tmp_path / "root").as_uri())
    assert main(["0", "1"]) == 0
    written = sorted(p for p in (tmp_path / "root" / SOURCE_ROOT).rglob("*.jsonl"))
    assert "epoch 1: " in capsys.readouterr().out

    expected = LocalObjectStore(str(tmp_path / "expected"))
    for epoch in (0, 1):
        write_epoch_files(
            expected,
            SOURCE_ROOT,
            epoch,
            accounts=ACCOUNTS,
            events_per_epoch=EVENTS_PER_EPOCH,
            files_per_partition=1,
        )
    same = sorted((tmp_path / "expected" / SOURCE_ROOT).rglob("*.jsonl"))
    assert [p.relative_to(tmp_path / "root") for p in written] == [
        p.relative_to(tmp_path / "expected") for p in same
    ]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(written, same, strict=True))


def test_a_bad_root_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("BATCHPOINT_ROOT", "/no/scheme")
    assert main(["0"]) == 1
    assert capsys.readouterr().err.startswith("error: BATCHPOINT_ROOT=")


@pytest.fixture(autouse=True)
def _no_stray_settings(monkeypatch):
    for name in ("BATCHPOINT_S3_ENDPOINT_URL", "BATCHPOINT_STORAGE_CONN_ID"):
        monkeypatch.delenv(name, raising=False)
