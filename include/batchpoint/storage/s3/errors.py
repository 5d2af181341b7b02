"""What an S3 failure means: transient or final, and the one-line batchpoint error that
names the endpoint, the operation and the key. botocore decides what to retry; this
module only explains what is left once it has given up."""

from __future__ import annotations

from typing import Any, Protocol

import botocore.exceptions as bce
from boto3.exceptions import RetriesExceededError, S3UploadFailedError

from batchpoint.errors import (
    BucketNotFound,
    StorageAccessDenied,
    StorageError,
    StorageUnavailable,
)
from batchpoint.storage.redaction import scrub
from batchpoint.storage.s3.settings import S3Settings


class FailedStore(Protocol):
    """What a message names of the store that failed (an S3 object store): this module
    needs no more of it, so it does not import the store that imports it."""

    uri: str
    bucket: str
    settings: S3Settings

    @property
    def shown_endpoint(self) -> str: ...

    def child(self, key: str) -> str: ...

    def credential_source(self) -> str: ...


THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "ProvisionedThroughputExceededException",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        # A conditional write raced another write or a delete of the same key; AWS says
        # to retry, and the retry then either succeeds or gets a definite 412.
        "ConditionalRequestConflict",
    }
)
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "AllAccessDisabled",
        "403",
        "Forbidden",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
# A body that broke off mid-read: botocore has returned by then, so it cannot retry it.
BODY_ERRORS: tuple[type[BaseException], ...] = (
    bce.IncompleteReadError,
    bce.ResponseStreamingError,
    bce.ReadTimeoutError,
    bce.ConnectionClosedError,
)
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    bce.EndpointConnectionError,
    bce.ConnectTimeoutError,
    bce.ProxyConnectionError,
    *BODY_ERRORS,
)
_NO_CREDENTIALS = (
    bce.NoCredentialsError,
    bce.PartialCredentialsError,
    bce.CredentialRetrievalError,
)
_CREDENTIAL_LABELS = {
    "env": "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment",
    "shared-credentials-file": "~/.aws/credentials",
    "config-file": "~/.aws/config",
    "iam-role": "the EC2 instance role",
    "container-role": "the container role",
    "assume-role": "an assumed role (~/.aws/config)",
    "sso": "AWS SSO",
}


def unwrap(exc: BaseException) -> BaseException:
    """The botocore error behind the transfer manager's wrappers."""
    if isinstance(exc, RetriesExceededError) and exc.last_exception is not None:
        return exc.last_exception
    if isinstance(exc, S3UploadFailedError) and exc.__context__ is not None:
        return exc.__context__
    return exc


def code(exc: BaseException) -> str:
    if isinstance(exc, bce.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def status(exc: BaseException) -> int:
    if isinstance(exc, bce.ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


def retried(exc: BaseException) -> int:
    """How many times botocore retried the request that ended in `exc` (0 if unknown)."""
    if isinstance(exc, bce.ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0)
    return 0


def is_transient(exc: BaseException) -> bool:
    """Throttling, 5xx and network errors: what retries were for. Used to word the final
    error, not to decide on retries (botocore's retry mode does that)."""
    exc = unwrap(exc)
    if isinstance(exc, _TRANSIENT_ERRORS):
        return True
    if isinstance(exc, bce.ClientError):
        return (
            code(exc) in THROTTLING_CODES
            or code(exc) in TRANSIENT_CODES
            or (status(exc) in _TRANSIENT_STATUS)
        )
    return False


def is_precondition_failure(exc: BaseException) -> bool:
    return code(exc) == "PreconditionFailed" or status(exc) == 412


def is_not_found(exc: BaseException) -> bool:
    return code(exc) in _NOT_FOUND_CODES or (status(exc) == 404 and code(exc) != "NoSuchBucket")


def etag(raw: str) -> str:
    # S3 quotes etags on the wire; the interface promises bare ones everywhere.
    return raw.strip().strip('"')


def describe(exc: BaseException) -> str:
    if isinstance(exc, bce.ClientError):
        error = exc.response.get("Error", {})
        message = error.get("Message") or ""
        return f"{error.get('Code') or status(exc)}{': ' + message if message else ''}"
    return f"{type(exc).__name__}: {exc}"


def credential_label(method: str) -> str:
    return _CREDENTIAL_LABELS.get(method, method)


def translate(store: FailedStore, op: str, key: str, exc: BaseException) -> StorageError:
    """The batchpoint error for what escaped botocore's retries. Its message never
    holds a secret: the endpoint is shown as the settings allow, and whatever the
    server or botocore said is scrubbed of the store's credentials."""
    error = _translated(store, op, key, unwrap(exc))
    return type(error)(scrub(str(error), store.settings.secret_values()))


def _translated(store: FailedStore, op: str, key: str, inner: BaseException) -> StorageError:
    where = f"{op} {store.child(key) if key else store.uri}"
    endpoint = store.shown_endpoint
    if isinstance(inner, _NO_CREDENTIALS):
        return StorageAccessDenied(
            f"{where}: no usable AWS credentials for bucket '{store.bucket}' "
            f"({inner}). Set access_key_id/secret_access_key in the storage options "
            "(BATCHPOINT_S3_ACCESS_KEY_ID/BATCHPOINT_S3_SECRET_ACCESS_KEY, or the Airflow "
            "connection's login and password), or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in "
            "the environment, or AWS_PROFILE with ~/.aws/credentials"
        )
    if is_transient(inner):
        s = store.settings
        # A reply carries botocore's own count; an exception (no reply at all) does not,
        # and the retry quota may have cut the attempts short of max_attempts.
        attempts = (
            f"after {retried(inner) + 1} attempt(s)"
            if isinstance(inner, bce.ClientError)
            else f"after up to {s.max_attempts} attempt(s)"
        )
        return StorageUnavailable(
            f"S3 endpoint {endpoint} did not answer {where} {attempts} "
            f"({s.retry_mode} retries): {describe(inner)}"
        )
    error_code = code(inner)
    if error_code == "NoSuchBucket":
        return BucketNotFound(
            f"bucket '{store.bucket}' does not exist at {endpoint}: "
            "create it or fix the storage URI"
        )
    if error_code in _DENIED_CODES or status(inner) == 403:
        return StorageAccessDenied(
            f"{where}: access to bucket '{store.bucket}' at {endpoint} was refused "
            f"({describe(inner)}); credentials used: {store.credential_source()}"
        )
    return StorageError(f"{where} failed at {endpoint}: {describe(inner)}")


def fake_error(error_code: str, message: str, operation: str) -> bce.ClientError:
    response: dict[str, Any] = {"Error": {"Code": error_code, "Message": message}}
    return bce.ClientError(response, operation)  # type: ignore[arg-type]


# -- what a store's retry loops ask of a failure ------------------------------------------

PASSING_DELETE_CODES = THROTTLING_CODES | TRANSIENT_CODES


def conflict(exc: BaseException) -> bool:
    """Two conditional writes of one key met at the server: the loser may try again."""
    return code(exc) == "ConditionalRequestConflict"


def passing_delete(exc: BaseException) -> bool:
    return isinstance(exc, bce.ClientError) and code(exc) in PASSING_DELETE_CODES


class BodyBroke(Exception):
    """A reply's body broke off mid-read (after botocore's retries were over)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def body_broke(exc: BaseException) -> bool:
    return isinstance(exc, BodyBroke)
