"""Where a Delta table lives and how delta-rs reaches it.

Delta tables are path-based here: `namespace.table` names the folder
<root>/delta/<namespace...>/<table>/ of the pipeline's own store, so one storage and one
set of credentials serve the checkpoints and the table. Not under tables/, where the
Iceberg warehouse keeps <namespace>/<table>/: a VACUUM of a Delta table deletes every
file of its folder that its log does not list, an Iceberg table's metadata too.

No Delta catalog is involved (Unity Catalog's server is not something this project can
run and test; a catalog name on a Delta binding is ignored).

delta-rs commits by writing the next `_delta_log/<version>.json` with a conditional put:
locally an exclusive create, on S3 `If-None-Match: *` (AWS_CONDITIONAL_PUT=etag), so
two writers of one version cannot both win and no external lock (DynamoDB) is needed.
"""

from __future__ import annotations

from batchpoint.storage import ObjectStore
from batchpoint.storage.redaction import reveal
from batchpoint.tables.binding import TableBinding


def table_key(binding: TableBinding) -> str:
    """The table's folder as a key of the store, with a trailing slash."""
    return "delta/" + "/".join(binding.identifier.split(".")) + "/"


def table_uri(store: ObjectStore, binding: TableBinding) -> str:
    """The URI delta-rs opens: file:///... for a local root, s3://bucket/... on S3."""
    return store.child(table_key(binding)).rstrip("/")


def storage_options(store: ObjectStore) -> dict[str, str]:
    """delta-rs (object_store) options reaching the store's objects as the store does."""
    s3 = getattr(store, "settings", None)
    if not store.uri.startswith("s3://") or s3 is None:
        return {}
    endpoint = s3.effective_endpoint()
    options = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": s3.region or "us-east-1",
        "AWS_ACCESS_KEY_ID": s3.access_key_id,
        "AWS_SECRET_ACCESS_KEY": reveal(s3.secret_access_key),
        "AWS_SESSION_TOKEN": reveal(s3.session_token),
        "AWS_PROFILE": s3.profile,
        # Commits are conditional puts: the log's next version is created or not.
        "AWS_CONDITIONAL_PUT": "etag",
        "AWS_ALLOW_HTTP": "true" if endpoint and endpoint.startswith("http://") else None,
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"
        if s3.effective_addressing_style() == "virtual"
        else None,
    }
    return {k: v for k, v in options.items() if v}
