"""A Spark application's REST API (its UI, on for the test), found through the port the
driver's log names: what a server ran, read back as Spark reports it."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any


def rest(log_path: Path, path: str) -> Any:
    """GET `path` under the application's /api/v1/applications/APP/ (the last UI port
    that the log at `log_path` names)."""
    found = re.findall(r"started service 'SparkUI' on port (\d+)", log_path.read_text())
    assert found, "the server's UI did not start"
    base = f"http://127.0.0.1:{found[-1]}/api/v1/applications"
    app = json.load(urllib.request.urlopen(base, timeout=60))[0]["id"]
    return json.load(urllib.request.urlopen(f"{base}/{app}/{path}", timeout=60))


def tagged(jobs: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """The jobs that carry `tag` (Connect prefixes a tag with its session's own)."""
    return [j for j in jobs if any(t.endswith(tag) for t in j.get("jobTags", []))]
