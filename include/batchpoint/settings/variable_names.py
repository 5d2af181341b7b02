"""The BATCHPOINT_* namespace: its prefixes, the names in it that are not settings, and
the warning for a name that nothing reads. A misspelled variable (a letter dropped
from BATCHPOINT_CHANGELOG_MIN_BYTES) would otherwise leave its setting at the default in
silence, in a deployment that looks configured. It is warned about, once per process and
name, with the nearest setting's name, and never refused: an older batchpoint started
with a newer one's deployment file (a rolling upgrade) must still run."""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Collection, Mapping

PREFIX = "BATCHPOINT_"
S3_PREFIX = "BATCHPOINT_S3_"

#: Names that are read but are not settings: fault injection (the tests and the soak),
#: the dev stack's own and the test suite's knobs. A test holds every BATCHPOINT_* name
#: the project reads to the settings or this set.
NOT_SETTINGS = frozenset(
    PREFIX + name
    for name in (
        "FAULT",
        "FAULT_MODE",
        "FAULT_ONCE",
        "FAULT_PAUSE",
        "RUN_MARKER",
        "STACK_CONTAINER",
        "INITDB_DIR",
        "WEED",
        "STATE_STORES",
        "TEST_WORKERS",
        "TEST_CLIENT_VERSION",
    )
)

_log = logging.getLogger(__name__)
_warned: set[str] = set()


def unknown_variables(environ: Mapping[str, str], known: Collection[str]) -> list[str]:
    """The BATCHPOINT_* names of `environ` that are neither `known` settings nor
    NOT_SETTINGS, sorted. BATCHPOINT_S3_<OPTION> names are store options, checked as such
    where the root is an s3:// one."""
    # The settings are read in any case (BATCHPOINT_num_retained too): so are the names.
    return sorted(
        name
        for name in environ
        if (upper := name.upper()).startswith(PREFIX)
        and not upper.startswith(S3_PREFIX)
        and upper not in known
        and upper not in NOT_SETTINGS
    )


def unknown_variable_message(name: str, known: Collection[str]) -> str:
    """That `name` is ignored and, if a setting's name is close, that one. Never the
    value: it may be a credential."""
    # Compared without the prefix every name shares, which would make any two look close.
    given = name.upper().removeprefix(PREFIX)
    names = sorted(k.removeprefix(PREFIX) for k in known)
    close = difflib.get_close_matches(given, names, n=1, cutoff=0.75) or [
        k for k in names if k.endswith("_" + given)
    ]
    meant = f"; did you mean {PREFIX}{close[0]}?" if len(close) == 1 else ""
    return f"{name} is not a batchpoint setting and is ignored{meant} (README: Configuration)"


def warn_unknown_variables(env: Mapping[str, str] | None, known: Collection[str]) -> list[str]:
    """Warn of each unknown name of `env` (default os.environ) not warned of before in this
    process; the names warned of now."""
    environ = os.environ if env is None else env
    fresh = [n for n in unknown_variables(environ, known) if n not in _warned]
    for name in fresh:
        _warned.add(name)
        _log.warning("%s", unknown_variable_message(name, known))
    return fresh
