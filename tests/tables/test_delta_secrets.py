"""The store's credentials never reach a message from a Delta table sink's path
(invariant 13). delta-rs says a server's error with the server's response body in it,
and AWS's SignatureDoesNotMatch body repeats the canonical request, the session token's
header included: an S3 endpoint that answers so (a small HTTP server of the test's) makes
a read of the table fail as such an answer would. The other texts a user sees (the
sync's error, GC's and `verify`'s findings) are checked on SeaweedFS, the table's reads
failing with a text that repeats the store's secret."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from batchpoint.ops.maintenance import gc, table_findings
from batchpoint.storage import StoreRef
from batchpoint.storage.redaction import reveal
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta import DeltaSinkTable
from batchpoint.tables.service import sink_table, sync_tables
from batchpoint.tables.sync import TableError
from tables.sinkfiles import PIPELINE, SINK
from tables.table_epochs import TableEpochs

SECRET = "wJalrXUtnFEMI-test-s3cret-key"
TOKEN = "FwoGZXIvYXdzE-test-session-t0ken"


class _EchoingS3(BaseHTTPRequestHandler):
    """Refuses every request as AWS does a badly signed one, repeating the request."""

    seen: list[str] = []

    def _refuse(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))  # the whole request
        token = self.headers.get("x-amz-security-token", "")
        self.seen.append(token)
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code>'
            "<Message>The request signature we calculated does not match the signature you "
            f"provided.</Message><CanonicalRequest>{self.command} {self.path}\n"
            f"x-amz-security-token:{token}\n</CanonicalRequest></Error>"
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _refuse

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def refusing_s3() -> Iterator[StoreRef]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingS3)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _EchoingS3.seen = []
    options = {
        "endpoint_url": f"http://127.0.0.1:{server.server_address[1]}",
        "region": "us-east-1",
        "access_key_id": "AKIATESTKEYID",
        "secret_access_key": SECRET,
        "session_token": TOKEN,
        "addressing_style": "path",
        "max_attempts": "1",
    }
    yield StoreRef.of("s3://bucket/root", options)
    server.shutdown()
    server.server_close()


def _clean(text: str, *secrets: str) -> str:
    for secret in (SECRET, TOKEN, *secrets):
        assert secret not in text, text
    return text


def test_delta_rs_repeating_the_servers_answer_is_said_without_the_token(
    refusing_s3: StoreRef,
) -> None:
    """Real delta-rs against the echoing endpoint: the token it sent comes back in the
    server's body, and the reader's error masks it."""
    binding = TableBinding("pay.balances", format="delta")
    table = sink_table(refusing_s3, PIPELINE, SINK, binding)
    with pytest.raises(TableError) as read:
        table.read()
    said = _clean(str(read.value))
    assert said.startswith(
        f"sink '{SINK}': delta table pay.balances at s3://bucket/root/delta/pay/balances "
        "cannot be read ("
    ), said
    assert "SignatureDoesNotMatch" in said and "\x1b[" not in said  # one uncoloured line
    assert "x-amz-security-token:**********" in said  # the server did repeat it
    assert TOKEN in _EchoingS3.seen  # delta-rs did send it


@pytest.mark.parametrize("table_store", ["s3"], indirect=True)
def test_the_sync_gc_and_findings_mask_what_delta_rs_repeats(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SeaweedFS, every read of the table then fails with delta-rs's text repeating
    the store's secret (as it repeats a server's answer above): the sync's error, GC's
    findings and `verify`'s say the sink and the table, never the secret."""
    epochs = TableEpochs(table_store, tmp_path, monkeypatch, table_format="delta")
    epochs.epoch({"a": 1})
    store = epochs.store
    secret = reveal(store.settings.secret_access_key)  # type: ignore[attr-defined]
    assert secret

    def echoing(adapter: DeltaSinkTable, version: int | None = None) -> None:
        raise OSError(
            f"Generic S3 error\n  \x1b[31m\u21b3\x1b[0m Server returned 400: "
            f"<Error><Code>InvalidArgument</Code><Secret>{secret}</Secret></Error>"
        )

    monkeypatch.setattr(DeltaSinkTable, "_open", echoing)
    with pytest.raises(TableError) as synced:
        sync_tables(epochs.store_ref, PIPELINE, {SINK: epochs.binding})
    said = _clean(str(synced.value), secret)
    assert said.startswith(f"sink '{SINK}': delta table pay.balances at {table_store.uri}/")
    assert "Generic S3 error: Server returned 400" in said and "**********" in said

    report = gc(epochs.coordinator, store)
    assert report.deleted_files == [] and report.findings
    for text in [*map(str, report.findings), *map(str, table_findings(epochs.coordinator, store))]:
        _clean(text, secret)
