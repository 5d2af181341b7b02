"""Which catalog serves a table sink: its errors name the catalog's URI without the
URI's password, whatever the database driver repeats of it (invariant 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.errors import ConfigError
from batchpoint.storage.local import LocalObjectStore
from batchpoint.tables.catalog import open_catalog

PASSWORD = "pw-3f9a1c"


@pytest.mark.parametrize(
    "uri",
    [
        f"sqlite://bp:{PASSWORD}@/catalog.db",  # SQLAlchemy's message repeats the URI
        f"postgresql://bp:{PASSWORD}@127.0.0.1:notaport/catalog",
    ],
)
def test_a_catalog_error_names_the_uri_without_its_password(tmp_path: Path, uri: str) -> None:
    with pytest.raises(ConfigError) as info:
        open_catalog("shop", LocalObjectStore(tmp_path / "store"), uri)
    message = str(info.value)
    assert PASSWORD not in message
    assert message.startswith(f"table catalog 'shop' at {uri.split(':', 1)[0]}://bp:**********@")
