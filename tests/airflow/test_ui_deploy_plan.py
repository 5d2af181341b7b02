"""The pipeline's page in the UI shows the deploy plan of the code the DAGs run on the
head (`batchpoint plan`), or says why it cannot: the code does not load there. The page
data is read through `CheckpointPages` on fake epochs (no Spark, no Airflow server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.airflow.ui import CheckpointPages
from batchpoint.airflow.ui_pages import render_pipeline
from batchpoint.settings import Settings
from support.cli import fresh_root, payments_driver
from support.deploy_variants import renamed_without_uid


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    root = fresh_root(tmp_path, monkeypatch)
    payments_driver(root, epochs=2)
    return Settings.from_env()


def page(settings: Settings, code) -> str:
    pages = CheckpointPages(lambda: settings, lambda: ["payments"], code)
    about, history = pages.pipeline("payments", 50, None, True)
    return render_pipeline(about, history, about["config"], about["dags"])


def test_the_page_shows_the_plan_of_the_code(settings: Settings) -> None:
    from demo.payments import build_pipeline

    html = page(settings, lambda name: build_pipeline())
    assert (
        "<h3>Deploy plan</h3><pre class='ok'>deploy plan against checkpoint 2: deployable" in html
    )
    refused = page(settings, lambda name: renamed_without_uid)
    assert "<pre class='error'>deploy plan against checkpoint 2: REFUSED" in refused
    assert "declare uid=&#39;dedup&#39; on &#39;dedup2&#39;" in refused


def test_code_that_does_not_load_is_said_instead_of_a_plan(settings: Settings) -> None:
    def broken(name: str):
        raise ModuleNotFoundError("No module named 'payments_v2'")

    html = page(settings, broken)
    assert "the pipeline&#39;s code could not be loaded here: No module named" in html
    assert "<pre" not in html.split("<h3>Deploy plan</h3>")[1].split("<h3>")[0]
