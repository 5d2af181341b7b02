"""`./dev setup` on an environment of its own (UV_PROJECT_ENVIRONMENT, as uv reads it):
two set-ups at once both succeed and only one of them builds; once built, set-up does
nothing until what it was built from changes (its stamp), and the Spark class-data
archive is rebuilt only when its own inputs change (the archive's stamp)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]

PROJECT = Path(__file__).resolve().parents[2]
SYNCED = "syncing "
UP_TO_DATE = "is up to date"


@dataclass(frozen=True)
class Built:
    venv: Path
    env: dict[str, str]
    outputs: list[tuple[int, str]]

    @property
    def archive(self) -> Path:
        return self.venv / "share" / "batchpoint" / "spark-classes.jsa"

    @property
    def stamp(self) -> Path:
        return self.venv / ".dev-setup-stamp"

    def setup(self) -> str:
        done = subprocess.run(
            [str(PROJECT / "dev"), "setup"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr


def _identity(path: Path) -> tuple[int, int]:
    """Which file this is and when it was last written: a rebuild or a re-created
    environment changes one or the other."""
    stat = path.lstat()
    return stat.st_ino, stat.st_mtime_ns


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A fresh environment, set up by two `./dev setup` started together."""
    venv = tmp_path_factory.mktemp("dev-setup") / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    both = [
        subprocess.Popen(
            [str(PROJECT / "dev"), "setup"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = []
    for process in both:
        out, _ = process.communicate(timeout=900)
        outputs.append((process.returncode, out))
    return Built(venv, env, outputs)


@pytest.mark.timeout(1800)
def test_two_setups_at_once_both_succeed_and_one_builds(built: Built) -> None:
    assert [code for code, _ in built.outputs] == [0, 0], built.outputs
    texts = [out for _, out in built.outputs]
    assert sum(SYNCED in out for out in texts) == 1, texts
    assert sum(UP_TO_DATE in out for out in texts) == 1, texts  # it waited, then saw it done
    assert sum("Spark class-data archive" in out for out in texts) == 1, texts
    assert built.archive.is_file() and built.stamp.is_file()
    # Importable, and from bytecode written at set-up: where PYTHONDONTWRITEBYTECODE is
    # set no process writes it, and each would compile its imports from source.
    modules = ("batchpoint", "pyspark", "pyarrow", "airflow.sdk")
    check = (
        f"import importlib.util, os, {', '.join(modules)}\n"
        f"for module in ({', '.join(modules)}):\n"
        "    compiled = importlib.util.cache_from_source(module.__file__)\n"
        "    print(module.__name__, os.path.exists(compiled))\n"
    )
    works = subprocess.run(
        [str(built.venv / "bin" / "python"), "-c", check],
        capture_output=True,
        text=True,
        env={**built.env, "PYTHONDONTWRITEBYTECODE": "1"},  # the check writes none itself
    )
    assert works.returncode == 0, works.stderr
    assert works.stdout.split() == [w for name in modules for w in (name, "True")], works.stdout


@pytest.mark.timeout(1800)
def test_a_second_setup_neither_syncs_nor_rebuilds(built: Built) -> None:
    files = [built.archive, built.stamp, built.venv / "pyvenv.cfg", built.venv / "bin" / "python"]
    before = [_identity(f) for f in files]
    stamp = built.stamp.read_text()
    out = built.setup()
    assert UP_TO_DATE in out and SYNCED not in out, out
    assert "class-data" not in out, out
    assert [_identity(f) for f in files] == before  # the same files, not rewritten
    assert built.stamp.read_text() == stamp


@pytest.mark.timeout(1800)
def test_a_changed_input_syncs_again_and_keeps_an_archive_still_valid(built: Built) -> None:
    # As after an edit of uv.lock: the stamp no longer matches what set-up reads.
    built.stamp.write_text(built.stamp.read_text().replace(" uv.lock", " uv.lock.old", 1))
    archive = _identity(built.archive)
    config = _identity(built.venv / "pyvenv.cfg")
    out = built.setup()
    assert SYNCED in out, out
    # Java, Spark's jars and Python did not change: the archive stays
    assert "(up to date)" in out and _identity(built.archive) == archive, out
    # nor is the environment re-created (uv is given the interpreter, not a shim)
    assert _identity(built.venv / "pyvenv.cfg") == config
    assert UP_TO_DATE in built.setup()
