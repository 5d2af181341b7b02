"""How each kind of BATCHPOINT_* value is read: durations, counts, true/false, `module:attr`
references, storage roots, Spark masters and modes, schedules. Pure functions that raise ValueError
with the reason; `environment` adds the variable's name and value to the message.

Nothing here creates anything: a root is checked by looking at what exists, so read-only
commands stay read-only.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from enum import Enum, StrEnum
from typing import Any
from urllib.parse import urlparse

from batchpoint.errors import ConfigError
from batchpoint.protocol.layout import check_name
from batchpoint.storage import redaction


class SparkMode(StrEnum):
    """How the Airflow tasks reach Spark (BATCHPOINT_SPARK_MODE). A StrEnum: its value is
    the variable's text, so it goes back into a child's environment unchanged."""

    CONNECT = "connect"  # thin Spark Connect clients of BATCHPOINT_SPARK_REMOTE
    SUBMIT = "submit"  # one spark-submit per operator task, on BATCHPOINT_SPARK_MASTER
    LOCAL = "local"  # a local Spark in a child process


class UpstreamSchedule(Enum):
    """A checkpoint schedule that is no timer (BATCHPOINT_CHECKPOINT_INTERVAL=upstream):
    the checkpoint DAG runs when a pipeline its sources read publishes the sink they
    read (Airflow's data-aware scheduling on the sinks' Assets, airflow/assets.py). Not
    a str, so that no code takes it for a cron expression."""

    UPSTREAM = "upstream"

    def __str__(self) -> str:
        return self.value


UPSTREAM = UpstreamSchedule.UPSTREAM
#: What a checkpoint DAG runs on: an interval, a cron expression, its upstreams'
#: publishes, or None (by hand only).
CheckpointSchedule = timedelta | str | UpstreamSchedule | None

#: Longer than any sensible timeout, pause or grace: a larger value is a typo (a unit
#: missing or doubled) and, unchecked, overflows timestamps far from where it was set.
MAX_DURATION = 30 * 86400.0

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)?$", re.IGNORECASE)
_UNITS = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_IDENTIFIER = r"[A-Za-z_]\w*"
_DOTTED = rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*"
_REF = re.compile(rf"^{_DOTTED}:{_DOTTED}$")
_SPARK_MASTER = re.compile(
    r"^(local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn"
    r"|(spark|k8s|mesos)://\S+)$"
)
# local[N] and local[N,F]: N threads (Spark refuses 0).
_LOCAL_THREADS = re.compile(r"^local\[(\d+)(,\d+)?\]$")
# One master of spark://host:port[,host:port...] (a standalone HA list), as Spark's
# Utils.extractHostPortFromSparkUrl reads each: a port is required.
_STANDALONE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[\w.-]+):(\d+)$")
_CONN_ID = re.compile(r"^[\w.-]+$")
# sc://host[:port][/;param=value;...], as pyspark's ChannelBuilder reads it.
_SPARK_REMOTE = re.compile(
    r"^sc://(\[[0-9A-Fa-f:.]+\]|[\w.-]+)(:(\d{1,5}))?/?(;[^;=\s]+=[^;\s]*)*$"
)
#: How the Airflow tasks reach Spark (see batchpoint.settings).
SPARK_MODES = ("connect", "submit", "local")
# Airflow's presets (airflow.sdk resolves them the same way when building the timetable).
CRON_PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}


def parse_duration(value: Any, *, minimum: float = 0.0, positive: bool = False) -> float:
    """Seconds from `300`, `2.5`, `90s`, `5m`, `1.5h` or `1d` (or a number). Finite, at
    least `minimum` (more than 0 with `positive`) and at most MAX_DURATION."""
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip()
        match = _DURATION.match(text)
        if match:
            seconds = float(match.group(1)) * _UNITS[match.group(2) and match.group(2).lower()]
        else:
            try:
                seconds = float(text)  # signed or exponent forms, to say what is wrong
            except ValueError:
                raise ValueError(
                    "not a duration (seconds, or with a unit: 90s, 5m, 1.5h, 1d)"
                ) from None
    if not math.isfinite(seconds):
        raise ValueError("not a finite duration")
    if positive and seconds <= 0:
        raise ValueError("must be more than 0 seconds")
    if seconds < minimum:
        raise ValueError(f"must be at least {minimum:g} seconds")
    if seconds > MAX_DURATION:
        raise ValueError(f"more than 30 days ({MAX_DURATION:.0f} s) is not a sensible duration")
    return seconds


def parse_count(value: Any, *, minimum: int = 0) -> int:
    """A whole number of at least `minimum`; `1.5` or `3.0` are refused rather than
    rounded."""
    if isinstance(value, bool):
        raise ValueError("not a whole number")
    if isinstance(value, int):
        count = value
    elif isinstance(value, float) and value.is_integer():
        count = int(value)
    else:
        text = str(value).strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError("not a whole number")
        count = int(text)
    if count < minimum:
        raise ValueError(f"must be at least {minimum}")
    return count


_SIZE_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_size(value: Any) -> int:
    """A size in bytes: a whole number, or one with a binary unit (`512KiB`, `4 MiB`,
    `1GiB`, in any case). Decimal units are refused: `4MB` could mean either."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, ""
    else:
        match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(value))
        if match is None or match[2].lower() not in _SIZE_UNITS:
            raise ValueError("not a size (a number of bytes, or one with KiB, MiB or GiB)")
        number, unit = int(match[1]), match[2].lower()
    if number < 0:
        raise ValueError("must be at least 0 bytes")
    return number * _SIZE_UNITS[unit]


def parse_bool(value: Any) -> bool:
    """`true` or `false`, in any case. Nothing looser: a typo such as `ture` must fail
    rather than quietly mean false."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("use true or false")
    return text == "true"


def check_ref(value: Any) -> str:
    """`package.module:attribute`, checked for its form only (importing is the loader's
    job, at the time the object is needed)."""
    text = str(value).strip()
    if not _REF.match(text):
        raise ValueError("expected 'package.module:attribute'")
    return text


def split_list(value: Any) -> tuple[str, ...]:
    """Comma-separated text (or a sequence) -> its non-empty, stripped items."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(item).strip() for item in items if str(item).strip())


def check_conn_id(value: Any) -> str:
    text = str(value).strip()
    if not _CONN_ID.match(text):
        raise ValueError("a connection id is letters, digits, '_', '.' or '-'")
    return text


def check_spark_master(value: Any) -> str:
    """A master Spark accepts: local, local[N], local[*], local[N,F], local-cluster[...],
    yarn, k8s://..., mesos://... or spark://host:port (a comma-separated list for a
    standalone cluster with standby masters)."""
    text = str(value).strip()
    if not _SPARK_MASTER.match(text):
        raise ValueError(
            "not a Spark master (local, local[N], local[*], spark://host:port, yarn, k8s://...)"
        )
    threads = _LOCAL_THREADS.match(text)
    if threads and int(threads.group(1)) < 1:
        raise ValueError("local[N] needs at least 1 thread: use local[1] or more, or local[*]")
    if text.startswith("spark://"):
        for master in text.removeprefix("spark://").split(","):
            _check_standalone(master)
    return text


def _check_standalone(master: str) -> None:
    match = _STANDALONE.match(master)
    if not match:
        raise ValueError(
            f"{redaction.redact_uri('spark://' + master)} is not host:port: a standalone "
            "master is spark://host:port (7077 by default)"
        )
    if not 0 < int(match.group(2)) < 65536:
        raise ValueError(f"spark://{master}: the port must be between 1 and 65535")


def check_spark_remote(value: Any) -> str:
    """A Spark Connect address, `sc://host:port` (optionally `;param=value` pairs such as
    `;use_ssl=true;token=...`)."""
    text = str(value).strip()
    match = _SPARK_REMOTE.match(text)
    if not match:
        # The hint repeats the address, without a token it may carry (masked before the
        # closing words, which a token's mask would swallow); not for one already sc://.
        rest = redaction.redact_uri(text.split("://", 1)[-1])
        hint = f" (did you mean sc://{rest}?)" if "://" in text and "sc://" not in text else ""
        raise ValueError(f"not a Spark Connect address: use sc://host:port{hint}")
    if match.group(3) is not None and not 0 < int(match.group(3)) < 65536:
        raise ValueError("the port must be between 1 and 65535")
    return text


def parse_spark_conf(value: Any) -> dict[str, str]:
    """Spark settings as a JSON object (`{"spark.sql.shuffle.partitions": "8"}`), or a
    mapping: keys must be `spark.*`; values become strings as Spark reads them."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise ValueError('not a JSON object: use {"spark.sql.key": "value", ...}') from None
    if not isinstance(value, Mapping):
        raise ValueError('not a JSON object: use {"spark.sql.key": "value", ...}')
    bad = [str(k) for k in value if not str(k).startswith("spark.")]
    if bad:
        raise ValueError(f"not a Spark setting (keys start with spark.): {', '.join(bad)}")
    return {str(k): _conf_value(v) for k, v in value.items()}


def _conf_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_root(value: Any) -> str:
    """A storage root: `s3://bucket/prefix`, or `file:///absolute/path` whose folder
    exists or could be created (nothing is created here)."""
    text = str(value).strip()
    parsed = urlparse(text)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError("names no bucket: use s3://bucket/prefix")
        if redaction.holds_credentials(text):
            raise ValueError(redaction.CREDENTIALS_REFUSED)
        return text
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise ValueError("file URIs must be file:///absolute/path")
        problem = folder_problem(parsed.path)
        if problem:
            raise ValueError(problem)
        return text
    if parsed.scheme == "s3a":
        raise ValueError("use s3:// (batchpoint moves bytes with boto3, not Hadoop's s3a)")
    if not parsed.scheme and text.startswith("/"):
        raise ValueError(f"has no scheme: did you mean file://{redaction.redact_uri(text)}?")
    raise ValueError("use s3://bucket/prefix or file:///absolute/path")


def folder_problem(path: str) -> str | None:
    """Why `path` cannot be (or become) a folder, or None. Looks only: the nearest
    existing ancestor must be a folder this process may write into."""
    path = os.path.normpath(path)
    if os.path.lexists(path):
        return None if os.path.isdir(path) else f"{path} exists and is not a folder"
    parent = os.path.dirname(path)
    while parent != os.path.dirname(parent) and not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is a file, so no folder can be created under it"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable, so {path} cannot be created"
    return None


def default_savepoint_root(root: str) -> str:
    return root.rstrip("/") + "/savepoints/"


def check_savepoint_root(value: Any) -> str:
    """A savepoint root is a storage root too; kept with a trailing slash so that
    `startswith` on it never matches a sibling (`.../savepoints-old`)."""
    return check_root(value).rstrip("/") + "/"


def parse_interval(value: Any) -> CheckpointSchedule:
    """`300`, `90s`, `5m`, `1.5h`, `1d` -> timedelta; `none`/`manual`/`off` -> None
    (triggered by hand only); `upstream` -> UPSTREAM (after each publish of a sink its
    pipeline sources read); anything else must be a cron expression or preset
    (`@hourly`), returned as text."""
    if isinstance(value, timedelta | UpstreamSchedule) or value is None:
        return value
    text = str(value).strip()
    if text.lower() in ("none", "manual", "off"):
        return None
    if text.lower() == UPSTREAM.value:
        return UPSTREAM
    if _DURATION.match(text) or re.fullmatch(r"[-+.\deE]+|[-+]?(inf|nan)\w*", text, re.I):
        return timedelta(seconds=parse_duration(text, positive=True))
    if text == "@once":
        raise ValueError("a checkpoint schedule must repeat")
    try:
        from croniter import croniter  # an Airflow dependency; only needed for cron text
    except ImportError:  # no Airflow here (a Spark node): the DAG side checks it
        return text
    if not croniter.is_valid(CRON_PRESETS.get(text, text)):
        raise ValueError("neither a duration (300, 90s, 5m, 1h) nor a cron expression")
    return text


def parse_intervals(value: Any) -> dict[str, CheckpointSchedule]:
    """Checkpoint schedules by pipeline, a JSON object (`{"reports": "upstream",
    "payments": "1m"}`) or a mapping: each key a pipeline name, each value what
    `parse_interval` reads (JSON null: by hand only)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise ValueError('not a JSON object: use {"<pipeline>": "<schedule>", ...}') from None
    if not isinstance(value, Mapping):
        raise ValueError('not a JSON object: use {"<pipeline>": "<schedule>", ...}')
    out: dict[str, CheckpointSchedule] = {}
    for name, schedule in value.items():
        try:
            check_name(str(name), "pipeline")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        try:
            out[str(name)] = parse_interval("none" if schedule is None else schedule)
        except ValueError as exc:
            raise ValueError(f"pipeline '{name}': {schedule!r}: {exc}") from None
    return out
