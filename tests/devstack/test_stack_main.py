"""`./dev stack`'s command line where it refuses before starting anything: one error line,
exit 1, and no claim to have kept a folder it never used; a missing secret's line says
how to try it with trial.env; `exec` with no stack up."""

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
        trial = Path(__file__).resolve().parents[2] / "trial.env"
        code = main(["--env-file", str(trial), "--keep", str(keep), "no-such-service"])
        made = keep.exists()
    finally:
        shutil.rmtree(parent)

    out, err = capsys.readouterr()
    assert code == 1
    assert err.strip() == "error: no service no-such-service in docker-compose.yaml"
    assert "kept in" not in out and not made


SECRETS = (
    "S3_ACCESS_KEY",
    "S3_SECRET_KEY",
    "POSTGRES_PASSWORD",
    "AIRFLOW_ADMIN_PASSWORD",
    "AIRFLOW_JWT_SECRET",
)


def test_without_its_secrets_it_says_how_to_try_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in SECRETS:
        monkeypatch.delenv(name, raising=False)
    project = Path(__file__).resolve().parents[2]
    assert not (project / ".env").exists()
    assert main(["no-such-service"]) == 1
    err = capsys.readouterr().err
    assert "} is required: " in err and "--env-file trial.env" in err
    # with the trial's values the file loads (and only the service is unknown)
    assert main(["--env-file", str(project / "trial.env"), "no-such-service"]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: no service no-such-service in docker-compose.yaml"
    )


def test_exec_needs_an_up_stack(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["exec", "--dir", str(tmp_path), "airflow-scheduler", "true"]) == 2
    assert "is not an up stack's folder" in capsys.readouterr().err
