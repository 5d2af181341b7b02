"""A root or storage URI that is refused is named in the refusal with its secrets masked
(invariant 13): a token in its query must not come back whole in a "did you mean" hint,
in the CLI's error (text or JSON), or in the plugin's page for a connection's root."""

from __future__ import annotations

import json

import pytest

from batchpoint.cli.main import main
from batchpoint.errors import ConfigError
from batchpoint.settings.values import check_root, check_spark_remote
from batchpoint.storage import open_store
from batchpoint.storage.redaction import REDACTED

SECRET = "SECRETSECRET-4f1e"

REFUSED_URIS = [
    f"/data/bp?token={SECRET}",  # no scheme: the hint spells the file:// it means
    f"file://elsewhere/bp?token={SECRET}",
    f"s3a://bucket/bp?token={SECRET}",
    f"ftp://host/bp?token={SECRET}",
    f"s3:///bp?token={SECRET}",
]


@pytest.mark.parametrize("uri", REFUSED_URIS)
def test_a_refused_storage_uri_is_named_with_its_token_masked(uri: str) -> None:
    with pytest.raises(ConfigError) as refused:
        open_store(uri)
    assert SECRET not in str(refused.value)
    assert REDACTED in str(refused.value)


def test_a_root_without_a_scheme_is_refused_with_the_token_masked_in_the_hint() -> None:
    with pytest.raises(ValueError, match="did you mean file:///data/bp") as refused:
        check_root(f"/data/bp?token={SECRET}")
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("argv", [["checkpoints", "list"], ["--json", "stats"]])
def test_the_cli_refuses_such_a_root_without_showing_its_token(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BATCHPOINT_ROOT", f"/data/bp?token={SECRET}")
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", "demo.payments:pipeline")
    code = main(argv)
    said = capsys.readouterr()
    assert code == 2
    assert "has no scheme" in said.out + said.err
    assert SECRET not in said.out + said.err


def test_the_plugin_page_of_a_connection_root_without_a_scheme_hides_its_token(
    tmp_path,
) -> None:
    from airflow.api_fastapi.core_api.security import get_user
    from airflow.models import Connection
    from fastapi.testclient import TestClient

    from batchpoint.airflow.storage_connection import settings_from_connection
    from batchpoint.airflow.ui import create_app
    from batchpoint.settings import Settings

    extra = json.dumps({"root": f"/data/bp?token={SECRET}"})
    conn = Connection(conn_id="batchpoint_storage", conn_type="aws", extra=extra)
    base = Settings(f"file://{tmp_path}/base")
    app = create_app(
        lambda: settings_from_connection(conn, base, "batchpoint_storage"),
        lambda: ["payments"],
        lambda _user, _pipeline: True,
    )
    app.dependency_overrides[get_user] = lambda: "viewer"
    client = TestClient(app, raise_server_exceptions=False)
    response = client.get("/api/pipelines")
    assert response.status_code == 503
    assert "has no scheme" in response.text
    assert SECRET not in response.text


def test_a_connect_address_of_another_scheme_is_hinted_with_its_token_masked() -> None:
    with pytest.raises(ValueError) as refused:
        check_spark_remote(f"grpc://spark:15002/;token={SECRET}")
    said = str(refused.value)
    assert SECRET not in said
    # the mask must not swallow the end of the hint
    assert said.endswith(f"(did you mean sc://spark:15002/;token={REDACTED}?)")
