"""The pydantic field types of the BATCHPOINT_* variables: how one value is parsed and
checked (durations, counts, booleans, refs, savepoint roots, secrets kept out of reprs).
The rules themselves are in `values`; this module only binds them to fields."""

from __future__ import annotations

import os
import shlex
from functools import partial
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic_settings import NoDecode

from batchpoint.settings import values


def duration(minimum: float = 0.0, positive: bool = False) -> BeforeValidator:
    return BeforeValidator(partial(values.parse_duration, minimum=minimum, positive=positive))


def count(minimum: int) -> BeforeValidator:
    return BeforeValidator(partial(values.parse_count, minimum=minimum))


def optional(check: Any) -> BeforeValidator:
    return BeforeValidator(lambda v: None if v is None or not str(v).strip() else check(v))


Bool = Annotated[bool, BeforeValidator(values.parse_bool)]


def text(value: Any) -> str | None:
    return None if value is None else (str(value).strip() or None)


def lowercase(value: Any) -> str:
    return str(value).strip().lower()


Text = Annotated[str | None, BeforeValidator(text)]
Secret = Annotated[str | None, Field(repr=False), BeforeValidator(text)]
Refs = Annotated[
    tuple[str, ...],
    NoDecode,
    BeforeValidator(lambda v: tuple(values.check_ref(r) for r in values.split_list(v))),
]
SavepointRoots = Annotated[
    tuple[str, ...],
    NoDecode,
    BeforeValidator(lambda v: tuple(values.check_savepoint_root(r) for r in values.split_list(v))),
]

#: Spark settings: a JSON object in the variable; never shown in a repr (a Hadoop
#: credential may be among them).
SparkConf = Annotated[
    dict[str, str], NoDecode, Field(repr=False), BeforeValidator(values.parse_spark_conf)
]


def submit_args(value: Any) -> tuple[str, ...]:
    return tuple(shlex.split(value)) if isinstance(value, str) else tuple(value)


def default_root() -> str:
    return "file://" + os.path.abspath(".batchpoint")
