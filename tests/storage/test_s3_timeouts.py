"""S3 connect and read timeouts: a finite number of seconds up to an hour. nan passes a
`<= 0` check and nan, inf or 1e12 fail only in the first socket, far from the setting:
refused where they are read, naming the variable."""

from __future__ import annotations

import pytest

from batchpoint.errors import ConfigError
from batchpoint.settings import Settings
from batchpoint.storage.s3 import S3Settings


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e12", "3601"])
@pytest.mark.parametrize("name", ["CONNECT_TIMEOUT", "READ_TIMEOUT"])
def test_a_timeout_that_is_no_finite_sane_number_is_refused(name: str, value: str) -> None:
    variable = f"BATCHPOINT_S3_{name}"
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({"BATCHPOINT_ROOT": "s3://bucket/p", variable: value})
    message = str(raised.value)
    assert message.startswith(variable) and "\n" not in message, message
    assert "finite number of seconds" in message or "must be positive" in message, message


def test_the_same_check_for_settings_built_directly() -> None:
    with pytest.raises(ConfigError, match="read_timeout=nan is not a finite number"):
        S3Settings(read_timeout=float("nan"))


def test_sensible_timeouts_are_taken() -> None:
    settings = S3Settings.from_options({"connect_timeout": "0.5", "read_timeout": "3600"})
    assert (settings.connect_timeout, settings.read_timeout) == (0.5, 3600.0)
