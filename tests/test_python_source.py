"""The tests that read the project's code parse it in a way a collection cannot break:
see `support.python_source`."""

from __future__ import annotations

import gc
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.python_source import parse

TESTS = Path(__file__).resolve().parent
SOURCE = (TESTS.parent / "include" / "batchpoint" / "runtime" / "incremental.py").read_text()


class _LogsItsRelease:
    """What a py4j proxy of a stopped JVM does when collected: logs a traceback."""

    def __init__(self, released: list[bool]) -> None:
        self.cycle = self  # only the cyclic collector frees it
        self.released = released

    def __del__(self) -> None:
        try:
            raise ConnectionResetError("the JVM is gone")
        except ConnectionResetError:
            logging.getLogger("py4j.test").info("release failed", exc_info=True)
        self.released.append(True)


@pytest.fixture
def collected_on_every_allocation(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.INFO, logger="py4j.test")  # the record is formatted
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collected_on_every_allocation")
def test_no_collection_runs_inside_a_parse() -> None:
    released: list[bool] = []
    _LogsItsRelease(released)
    tree = parse(SOURCE)
    assert released == [], "a finalizer ran while the tree was built"
    assert any(getattr(n, "name", None) == "plan_snapshot" for n in tree.body)
    gc.collect()
    assert released == [True]  # the object was collectable: the parse held it off


def _parses_directly(path: Path) -> bool:
    return re.search(r"\bast\.parse\(", path.read_text()) is not None


def test_every_test_parses_through_the_helper() -> None:
    allowed = {TESTS / "support" / "python_source.py"}
    direct = [p for p in sorted(TESTS.rglob("*.py")) if p not in allowed and _parses_directly(p)]
    assert direct == []
