"""The DAG's Checkpoints tab is a React view (plugin.py's `react_apps`): Airflow's own API
app lists it with a bundle URL that the plugin's app serves as JavaScript, without a
session too (code, no data), and the committed bundle is what ui/'s source builds to."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.airflow_ui import viewer_client

pytestmark = [pytest.mark.airflow]

PROJECT = Path(__file__).resolve().parents[2]
BUNDLE = PROJECT / "include" / "batchpoint" / "airflow" / "static" / "checkpoints-tab.js"


def _react_apps(client) -> list[dict]:
    answer = client.get("/api/v2/plugins")
    assert answer.status_code == 200, answer.text
    (plugin,) = [p for p in answer.json()["plugins"] if p["name"] == "batchpoint"]
    return plugin["react_apps"]


def test_airflow_lists_the_tab_and_the_app_serves_its_bundle(bp, monkeypatch):
    with viewer_client(monkeypatch) as client:
        (tab,) = _react_apps(client)
        assert (tab["name"], tab["destination"]) == ("Checkpoints", "dag")
        # The UI resolves it against its base URL, as it does an external view's href.
        assert not tab["bundle_url"].startswith("/")
        answer = client.get("/" + tab["bundle_url"])
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].split(";")[0] in (
            "text/javascript",
            "application/javascript",
        )
        assert answer.content == BUNDLE.read_bytes()
        # The contract of Airflow's UI: the module sets the component it renders.
        assert b"globalThis.AirflowPlugin=" in answer.content
        del client.headers["Authorization"]
        assert client.get("/" + tab["bundle_url"]).status_code == 200
        # ...while every route about a pipeline still needs a user
        assert client.get("/batchpoint/api/pipelines").status_code == 401


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not on PATH: needs Node 20+")
def test_the_committed_bundle_is_what_the_source_builds(tmp_path):
    """ui/ rebuilt from its lock file (npm ci) into a copy of the package dir matches
    the committed bundle byte for byte: a source edit without `npm run build` fails."""
    work = tmp_path / "repo"
    shutil.copytree(PROJECT / "ui", work / "ui", ignore=shutil.ignore_patterns("node_modules"))
    built = work / BUNDLE.relative_to(PROJECT)
    built.parent.mkdir(parents=True)
    env = {**os.environ, "npm_config_audit": "false", "npm_config_fund": "false"}
    for command in (["npm", "ci"], ["npm", "run", "build"]):
        done = subprocess.run(
            command, cwd=work / "ui", env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert built.read_text() == BUNDLE.read_text(), "run `npm run build` in ui/ and commit"
