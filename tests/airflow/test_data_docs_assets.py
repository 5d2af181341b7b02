"""Every asset GX's Data Docs templates load from the internet has a copy in the UI's
static files: a GX upgrade that names a new CDN URL fails here, before a user's offline
Data Docs lose their styles. Reads the installed GX package's files (no GX import)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from batchpoint.airflow.data_docs_assets import CDN_FILES, local_assets
from batchpoint.airflow.ui import STATIC_DIR
from support.airflow_ui import EXTERNAL_ASSET

STATIC = "/batchpoint/static/data-docs/"


def gx_view_files() -> list[Path]:
    """GX's page templates and its sites' own stylesheets, as installed."""
    spec = importlib.util.find_spec("great_expectations")
    assert spec is not None and spec.origin is not None
    view = Path(spec.origin).parent / "render" / "view"
    return sorted(view.glob("templates/*.j2")) + sorted(view.glob("static/styles/*.css"))


def test_every_cdn_asset_of_gx_templates_is_served_from_the_uis_copies() -> None:
    named = 0
    for path in gx_view_files():
        text = path.read_text()
        named += len(EXTERNAL_ASSET.findall(text))
        served = local_assets(text.encode(), STATIC).decode()
        assert not EXTERNAL_ASSET.findall(served), (path.name, EXTERNAL_ASSET.findall(served))
    assert named >= 15  # the templates were read, and they do name CDNs


def test_every_copy_is_in_the_package() -> None:
    folder = STATIC_DIR / "data-docs"
    for name in [*CDN_FILES.values(), "gx/logo-long.png"]:
        assert (folder / name).stat().st_size > 0, name
    fonts = (folder / "fontawesome-free-6.6.0/css/all.min.css").read_text()
    woff2 = set(re.findall(r"url\(\.\./webfonts/([\w.-]+\.woff2)\)", fonts))
    assert woff2 and all((folder / "fontawesome-free-6.6.0/webfonts" / f).is_file() for f in woff2)


def test_a_logo_with_its_cache_buster_and_bytes_not_utf8_pass() -> None:
    page = (
        b"<img src='https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"
        b"logo-long.png?d=20261203T105109Z'>\xff<a href='https://greatexpectations.io'>"
    )
    assert local_assets(page, STATIC) == (
        b"<img src='/batchpoint/static/data-docs/gx/logo-long.png'>\xff"
        b"<a href='https://greatexpectations.io'>"
    )
