"""A test's Airflow tasks pointed at a SeaweedFS server of its own: BATCHPOINT_ROOT under
`prefix` and the `batchpoint_storage` connection (an `aws` one, as a deployment's)."""

from __future__ import annotations

import json

import pytest

from devstack.seaweed import SeaweedServer


def use_seaweed(monkeypatch: pytest.MonkeyPatch, server: SeaweedServer, prefix: str) -> None:
    monkeypatch.setenv("BATCHPOINT_ROOT", server.uri(prefix))
    connection = {
        "conn_type": "aws",
        "host": server.endpoint_url,
        "login": server.access_key,
        "password": server.secret_key,
        "extra": {"region": server.region},
    }
    monkeypatch.setenv("AIRFLOW_CONN_BATCHPOINT_STORAGE", json.dumps(connection))
