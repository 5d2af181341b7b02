"""spark-submit arguments for short jobs: the class-data archive is used when present."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from batchpoint.spark.fast_start import archive_inputs, is_current, main, stamp_path, submit_args


def _jvm_options(args: str) -> list[str]:
    argv = shlex.split(args)
    return argv[argv.index("--driver-java-options") + 1].split()


def test_the_archive_is_used_only_when_it_exists(tmp_path: Path) -> None:
    archive = tmp_path / "spark-classes.jsa"
    assert not any("SharedArchiveFile" in o for o in _jvm_options(submit_args(archive)))
    archive.write_bytes(b"x")
    assert f"-XX:SharedArchiveFile={archive}" in _jvm_options(submit_args(archive))


def test_an_archive_path_with_a_space_is_left_out(tmp_path: Path) -> None:
    # spark-submit splits --driver-java-options at spaces: such a path would break the JVM
    archive = tmp_path / "with space" / "a.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"x")
    argv = shlex.split(submit_args(archive))
    assert argv.count("--conf") == 2 and "spark.sql.shuffle.partitions=2" in argv
    assert _jvm_options(submit_args(archive)) == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def test_the_archive_is_current_only_with_the_stamp_of_what_is_installed(tmp_path: Path) -> None:
    archive = tmp_path / "spark-classes.jsa"
    archive.write_bytes(b"x")
    assert not is_current(archive)  # built before stamps: rebuilt once
    stamp_path(archive).write_text(archive_inputs())
    assert is_current(archive)
    # another JVM, other jars or other options: the JVM would ignore the archive
    stamp_path(archive).write_text(archive_inputs().replace("pyspark", "pyspark 0.0", 1))
    assert not is_current(archive)
    stamp_path(archive).write_text(archive_inputs())
    archive.unlink()
    assert not is_current(archive)


def test_archive_names_where_the_set_up_looks_and_builds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the image builds its archive at a path of its own (docker/Dockerfile's --archive)
    archive = tmp_path / "image" / "spark-classes.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"x")
    stamp_path(archive).write_text(archive_inputs())
    assert main(["--archive", str(archive)]) == 0
    assert f"{archive} (up to date)" in capsys.readouterr().out
    assert archive.read_bytes() == b"x"  # not built again
