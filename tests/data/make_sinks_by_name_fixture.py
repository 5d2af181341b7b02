"""Writes tests/data/sinks-by-name.tar.gz: a store of pipeline `sinks`
(tests/support/sink_pipelines.py) whose sinks declare a uid other than their name
(NAMED_SINKS), written by a release that kept sink manifests under the sink's name:
two completed epochs over two input files of 10 events, the manifests at
pipelines/sinks/sinks/events_out/ and .../totals_out/. Run once, by batchpoint 8dcd95d
(manifests keyed by name); kept for provenance."""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from batchpoint.spark.session import spark_session
from batchpoint.storage import StoreRef
from support.sink_pipelines import NAMED_SINKS, SinkEpochs, build


def _no_locks(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if ".bp-locks" in info.name else info  # the local store's lock files


def main(out: Path) -> None:
    spark = spark_session("sinks-by-name-fixture", "local[2,2]")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        run = SinkEpochs(spark, StoreRef.of(root.as_uri()))
        run.deploy(build(NAMED_SINKS))
        for _ in range(2):
            run.epoch()
        for sink in ("events_out", "totals_out"):  # what the fixture is for
            assert (root / f"pipelines/sinks/sinks/{sink}/manifest.json").exists()
        with tarfile.open(out, "w:gz") as archive:
            archive.add(root, arcname=".", filter=_no_locks)
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
