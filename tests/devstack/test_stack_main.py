"""`./dev stack`'s command line where it refuses before starting anything: one error line,
exit 1, and no claim to have kept a folder it never used."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from devstack.stack_main import main

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="./dev stack needs root")


def test_a_refused_stack_does_not_say_it_kept_its_folder(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Not under /tmp, which the stack refuses (every host gets a private one).
    parent = Path(tempfile.mkdtemp(prefix="bp-stack-test-", dir="/var/tmp"))
    keep = parent / "kept"
    try:
        code = main(["--keep", str(keep), "no-such-service"])
        made = keep.exists()
    finally:
        shutil.rmtree(parent)

    out, err = capsys.readouterr()
    assert code == 1
    assert err.strip() == "error: no service no-such-service in docker-compose.yaml"
    assert "kept in" not in out and not made
