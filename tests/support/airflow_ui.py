"""The Checkpoints pages under test: the `bp` deployment moved to a local store, and
Airflow's own API app as a logged-in viewer (the simple auth manager's JWT)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: An asset a page loads from elsewhere: a stylesheet, script or image by an absolute
#: URL, or a CSS url() to one (GX's links to its docs are not assets).
EXTERNAL_ASSET = re.compile(
    r"<(?:link|script|img)\b[^>]*?\b(?:href|src)=[\"']?(?:https?:)?//[^\"'\s>]+"
    r"|url\([\"']?(?:https?:)?//[^\"')]+",
    re.IGNORECASE,
)


def on_local_store(bp: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """`bp` with its root on the local file system and no storage connection."""
    bp.root = (tmp_path / "root").as_uri()
    bp.set(root=bp.root)
    monkeypatch.delenv("AIRFLOW_CONN_BATCHPOINT_STORAGE")
    return bp


@contextmanager
def viewer_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Airflow's own API app (the plugin mounted under /batchpoint), as a viewer."""
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "tests-only-" * 8)
    with TestClient(create_app()) as client:
        user = SimpleAuthManagerUser(username="u", role="viewer")
        client.headers["Authorization"] = f"Bearer {get_auth_manager().generate_jwt(user)}"
        yield client
