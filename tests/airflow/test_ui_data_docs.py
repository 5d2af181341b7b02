"""A gate run's Data Docs site, opened from the checkpoint's page: the report holds the
store's URI (an s3:// one no browser opens), so the page links the UI's own route, which
serves the site's files from the store to users who may read the pipeline, and nothing
outside the site's folder. The site is stored as the gate stores it (publish_site), on
the local store and on SeaweedFS; Airflow's own API app as a logged-in viewer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.airflow_ui import on_local_store, viewer_client

pytestmark = [pytest.mark.airflow]

INDEX = "<html><body><a href='validations/payments_balances/run/page.html'>run</a></body></html>"
PAGE = "<html><body>payments_balances: 3 expectations met</body></html>"


@pytest.fixture(params=["local", "s3"])
def env(request: pytest.FixtureRequest, bp: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    return on_local_store(bp, monkeypatch, tmp_path) if request.param == "local" else bp


@pytest.fixture
def api(env: Any, monkeypatch: pytest.MonkeyPatch):
    with viewer_client(monkeypatch) as client:
        yield client


def gate_run_site(env: Any, tmp_path: Path) -> tuple[int, str]:
    """A checkpoint whose stored report links a Data Docs site stored beside it, as a
    gate run leaves them: the checkpoint's id and the site's folder under data-docs/."""
    from batchpoint.protocol.layout import PipelineLayout
    from batchpoint.quality.gx_checkpoint import publish_site, run_folder_name
    from batchpoint.quality.report import CandidateReport, GateMode
    from support.fake_epochs import epoch

    driver = env.driver()
    cid = epoch(driver)
    site = tmp_path / "site"
    (site / "validations/payments_balances/run").mkdir(parents=True)
    (site / "index.html").write_text(INDEX)
    (site / "validations/payments_balances/run/page.html").write_text(PAGE)
    layout = PipelineLayout("payments")
    run = run_folder_name(1_700_000_000.0)
    link = publish_site(env.store, layout.checkpoint(cid) + f"data-docs/{run}/", site)
    report = CandidateReport(
        "payments", cid, "checkpoint", GateMode.RESTORE, 1_700_000_000.0, data_docs=link
    )
    env.store.put(layout.quality_report(cid), report.encode())
    return cid, run


def test_the_checkpoint_page_links_the_sites_files_served_from_the_store(
    env: Any, api: Any, tmp_path: Path
) -> None:
    cid, run = gate_run_site(env, tmp_path)
    page = api.get(f"/batchpoint/payments/checkpoints/{cid}")
    assert page.status_code == 200, page.text
    served = f"{cid}/data-docs/{run}/index.html"
    assert f"href='{served}'" in page.text  # relative to the checkpoint's page

    index = api.get(f"/batchpoint/payments/checkpoints/{served}")
    assert index.status_code == 200 and index.text == INDEX
    assert index.headers["content-type"].startswith("text/html")
    assert "sandbox" in index.headers["content-security-policy"]
    # the index's own relative link resolves inside the served site
    inner = api.get(
        f"/batchpoint/payments/checkpoints/{cid}/data-docs/{run}/"
        "validations/payments_balances/run/page.html"
    )
    assert inner.status_code == 200 and inner.text == PAGE


@pytest.mark.parametrize(
    "path",
    [
        "{run}/missing.html",
        "{run}/../../quality.json",
        "..%2F{run}%2Findex.html",
        "{run}//index.html",
    ],
)
def test_nothing_but_the_sites_own_files_is_served(
    env: Any, api: Any, tmp_path: Path, path: str
) -> None:
    cid, run = gate_run_site(env, tmp_path)
    answer = api.get(f"/batchpoint/payments/checkpoints/{cid}/data-docs/" + path.format(run=run))
    assert answer.status_code == 404, answer.text
    assert "quality-report" not in answer.text


def test_a_user_who_may_not_read_the_pipeline_gets_no_site(
    env: Any, api: Any, tmp_path: Path
) -> None:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    cid, run = gate_run_site(env, tmp_path)
    url = f"/batchpoint/payments/checkpoints/{cid}/data-docs/{run}/index.html"
    assert api.get(url).status_code == 200
    nobody = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="u", role=None))
    answer = api.get(url, headers={"Authorization": f"Bearer {nobody}"})
    assert answer.status_code == 403 and "payments_balances" not in answer.text
