"""A gate run's Data Docs site, opened from the checkpoint's page: the report holds the
store's URI (an s3:// one no browser opens), so the page links the UI's own route, which
serves the site's files from the store to users who may read the pipeline, and nothing
outside the site's folder. The site is stored as the gate stores it (publish_site), on
the local store and on SeaweedFS; Airflow's own API app as a logged-in viewer."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from batchpoint.protocol.layout import PipelineLayout
from support.airflow_ui import EXTERNAL_ASSET, on_local_store, viewer_client

pytestmark = [pytest.mark.airflow]

LAYOUT = PipelineLayout("payments")
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


LOCAL_ASSET = re.compile(r"(?:href=|src=|url\()[\"']?(/batchpoint/static/data-docs/[^\"'\s>)]+)")


def real_gx_site(folder: Path) -> None:
    """A Data Docs site as GX 1.x builds it: a failed validation of a small frame."""
    import great_expectations as gx
    import pandas as pd

    context = gx.get_context(mode="ephemeral")
    store = {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(folder)}
    context.add_data_docs_site("site", {"class_name": "SiteBuilder", "store_backend": store})
    asset = context.data_sources.add_pandas("frames").add_dataframe_asset("balances")
    suite = context.suites.add(gx.ExpectationSuite(name="payments_balances"))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToBeBetween(column="n", min_value=1))
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(
            name="balances", data=asset.add_batch_definition_whole_dataframe("all"), suite=suite
        )
    )
    definition.run(batch_parameters={"dataframe": pd.DataFrame({"n": [1, -2]})})
    context.build_data_docs(site_names=["site"])


@pytest.mark.parametrize("env", ["local"], indirect=True)
def test_a_real_sites_pages_load_no_asset_from_the_internet(
    env: Any, api: Any, tmp_path: Path
) -> None:
    from batchpoint.quality.gx_checkpoint import publish_site

    real_gx_site(tmp_path / "gx")
    cid, run = gate_run_site(env, tmp_path)
    publish_site(env.store, f"{LAYOUT.checkpoint(cid)}data-docs/{run}/", tmp_path / "gx")
    site = f"/batchpoint/payments/checkpoints/{cid}/data-docs/{run}/"
    pages = ["index.html", "static/styles/data_docs_default_styles.css"] + [
        p.relative_to(tmp_path / "gx").as_posix()
        for p in (tmp_path / "gx" / "validations").rglob("*.html")
    ]
    assert len(pages) == 3, pages
    for page in pages:
        served = api.get(site + quote(page))
        assert served.status_code == 200, served.text
        stored = (tmp_path / "gx" / page).read_text()
        assert EXTERNAL_ASSET.search(stored)  # as GX wrote it
        assert not EXTERNAL_ASSET.search(served.text), EXTERNAL_ASSET.search(served.text)
        assets = set(LOCAL_ASSET.findall(served.text))
        assert page.endswith(".css") or len(assets) >= 10, assets  # bootstrap, jQuery, ...
        for asset in assets:  # each is there, for a sandboxed page too (fonts need CORS)
            answer = api.get(asset)
            assert answer.status_code == 200, asset
            assert answer.headers["access-control-allow-origin"] == "*"
    fonts = api.get("/batchpoint/static/data-docs/fontawesome-free-6.6.0/css/all.min.css").text
    for font in set(re.findall(r"url\(\.\./webfonts/([\w.-]+\.woff2)\)", fonts)):
        answer = api.get(f"/batchpoint/static/data-docs/fontawesome-free-6.6.0/webfonts/{font}")
        assert answer.status_code == 200, font
