"""spark-submit: which one runs, and its command-line options read back (what a
deployment's own spark-submit arguments, BATCHPOINT_SPARK_SUBMIT_ARGS and the Connect
server's command, set)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path


def spark_submit_program() -> str | None:
    """The spark-submit to run: the one beside this Python (a virtualenv's), else the
    first on PATH (a `pip install --user`'s, as in the compose file's image); None if
    there is neither."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("spark-submit")


def submit_conf(options: Sequence[str]) -> dict[str, str]:
    """The ``--conf KEY=VALUE`` (and ``--conf=KEY=VALUE``) settings among spark-submit
    options, the last one of a key winning as with spark-submit."""
    conf: dict[str, str] = {}
    items = iter(options)
    for option in items:
        if option == "--conf":
            value = next(items, "")
        elif option.startswith("--conf="):
            value = option.removeprefix("--conf=")
        else:
            continue
        key, sep, setting = value.partition("=")
        if sep and key:
            conf[key] = setting
    return conf


__all__ = ["spark_submit_program", "submit_conf"]
