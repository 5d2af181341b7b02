"""The Connect server's warm-up child: its address (which may carry `;token=`) reaches it
through its environment, never its command line (which `ps` shows to every user); and a
bad server port is one ConfigError line, not a traceback. No Spark is started here."""

from __future__ import annotations

import pytest

from batchpoint.errors import ConfigError
from batchpoint.jobs import connect_server, warm_up

TOKEN = "tok-8c1d-never-on-argv"
REMOTE = f"sc://spark-connect:15002/;token={TOKEN}"


def test_the_token_stays_off_the_warm_up_command_line() -> None:
    env = {"BATCHPOINT_SPARK_REMOTE": REMOTE, "BATCHPOINT_PIPELINE_REF": "m:p, n:q"}
    argv = connect_server.warm_up_command(env, 15002)
    assert not any(TOKEN in arg for arg in argv)
    args = argv[argv.index("batchpoint.jobs.warm_up") + 1 :]
    assert args == ["--remote-from-env", "m:p", "n:q", "--sessions-only"]
    child_env = connect_server.warm_up_environment({**env, "SPARK_CONNECT_MODE": "1"}, 15002)
    assert child_env["BATCHPOINT_SPARK_REMOTE"] == REMOTE
    assert "SPARK_CONNECT_MODE" not in child_env
    # What the child makes of that command line and environment.
    read = warm_up.arguments(args, child_env)
    assert (read.remote, read.pipelines, read.sessions_only) == (REMOTE, ["m:p", "n:q"], True)


def test_without_the_clients_address_the_warm_up_joins_this_hosts_port() -> None:
    argv = connect_server.warm_up_command({}, 16000)
    child_env = connect_server.warm_up_environment({}, 16000)
    read = warm_up.arguments(argv[argv.index("batchpoint.jobs.warm_up") + 1 :], child_env)
    assert (read.remote, read.pipelines) == ("sc://127.0.0.1:16000", [])


def test_the_address_on_the_command_line_still_works() -> None:
    read = warm_up.arguments(["sc://h:15002", "m:p", "--scratch", "/tmp/x"], {})
    assert (read.remote, read.pipelines) == ("sc://h:15002", ["m:p"])


def test_remote_from_env_without_the_variable_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        warm_up.arguments(["--remote-from-env", "m:p"], {})
    assert exited.value.code == 2
    assert "BATCHPOINT_SPARK_REMOTE is not set" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["abc", "0", "70000", ""])
def test_a_bad_server_port_is_one_config_error_line(port: str, capsys) -> None:
    options = ["--conf", f"{connect_server.PORT_SETTING}={port}"]
    with pytest.raises(ConfigError, match=r"spark\.connect\.grpc\.binding\.port=.*1 to 65535"):
        connect_server.run(options, {})
    assert connect_server.main(options) == 2  # before any server is started
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "binding.port" in err and "Traceback" not in err


def test_the_default_and_a_given_port() -> None:
    assert connect_server.server_port([]) == 15002
    assert connect_server.server_port(["--conf=spark.connect.grpc.binding.port=16001"]) == 16001
