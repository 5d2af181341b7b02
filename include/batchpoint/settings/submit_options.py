"""spark-submit's command-line options, read back: what a deployment's own spark-submit
arguments (BATCHPOINT_SPARK_SUBMIT_ARGS, the Connect server's command) set."""

from __future__ import annotations

from collections.abc import Sequence


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


__all__ = ["submit_conf"]
