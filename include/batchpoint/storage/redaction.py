"""Secrets in text (invariant 13): a value type whose every textual form is `**********`
while the code that signs a request asks for the real value, and the helpers that take
credentials out of URIs and messages.

A value becomes a `Secret` where it is read: a store option written as `${VAR}` (taken
from the environment), and every credential option (`secret_access_key`,
`session_token`) wherever it comes from. Reprs, f-strings, `str()` and error messages
then show the mask; pickling keeps the value, because a Spark executor or a Spark Connect
server must sign with it. An access key id is not a secret (AWS says so; it is in every
request's authorization header and in CloudTrail): errors show it masked (`mask_key`),
unless it came from `${VAR}`, which makes it a Secret like any other value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "**********"
#: Store options that are credentials whatever their source.
CREDENTIAL_OPTIONS = frozenset({"secret_access_key", "session_token"})

# scheme://user:password@host -> scheme://user:**********@host; the password runs to the
# last '@' of the word, since an AWS secret key may hold '/' (and a password '@')
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):(?P<password>\S*)@")
# ;token=... ?password=... &X-Amz-Signature=... (Spark Connect, presigned and driver URIs)
_PARAMETER = re.compile(
    r"(?P<head>[;?&](?:token|password|passwd|pwd|secret|access_token|sig|signature"
    r"|x-amz-signature|x-amz-security-token|x-amz-credential)=)[^;&\s'\"]*",
    re.IGNORECASE,
)


class Secret:
    """A string that never shows itself: `reveal()` is the one way to the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = str(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{REDACTED}')"

    def __str__(self) -> str:
        return REDACTED

    def __format__(self, spec: str) -> str:
        return format(REDACTED, spec)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    # The value travels when pickled: executors and Connect servers sign with it.
    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


def reveal(value: Any) -> Any:
    """The real value of a Secret; anything else as it is."""
    return value.reveal() if isinstance(value, Secret) else value


def shown(value: Any) -> str:
    """How a value may appear in a message: the mask for a Secret, URIs without passwords."""
    return REDACTED if isinstance(value, Secret) else redact_uri(str(value))


def conceal(name: str, value: Any) -> Any:
    """A credential option's value as a Secret (other options unchanged)."""
    if name in CREDENTIAL_OPTIONS and isinstance(value, str) and value:
        return Secret(value)
    return value


def conceal_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {name: conceal(name, value) for name, value in options.items()}


def revealed_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options as the store must receive them (for a child's environment)."""
    return {name: reveal(value) for name, value in options.items()}


def mask_key(access_key: str) -> str:
    """An access key id shortened for messages: enough to tell keys apart."""
    return access_key if len(access_key) <= 8 else f"{access_key[:4]}...{access_key[-4:]}"


#: Spark settings whose value is a credential (spark.hadoop.fs.s3a.secret.key, ...).
_SECRET_CONF_KEY = re.compile(r"secret|password|passwd|token|credential|key$", re.IGNORECASE)


def masked_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Spark settings as a repr or a log may show them: credentials masked."""
    return {k: REDACTED if _SECRET_CONF_KEY.search(k) else v for k, v in conf.items()}


def masked_argv(argv: Iterable[str]) -> list[str]:
    """A command line (spark-submit's) as a log may show it: the value of every
    `--conf KEY=VALUE` (`--conf=`, `-c`) whose key masked_conf masks, URIs redacted."""
    shown: list[str] = []
    conf_next = False
    for arg in argv:
        if conf_next:
            shown.append(_masked_setting(arg))
        elif arg.startswith("--conf="):
            shown.append("--conf=" + _masked_setting(arg.removeprefix("--conf=")))
        else:
            shown.append(redact_uri(arg))
        conf_next = not conf_next and arg in ("--conf", "-c")
    return shown


def _masked_setting(setting: str) -> str:
    key, sep, _ = setting.partition("=")
    if sep and _SECRET_CONF_KEY.search(key):
        return f"{key}={REDACTED}"
    return redact_uri(setting)


#: Why an s3 URI with '@' before its query is refused, never shown: the part before it
#: reads as `access-key:secret@bucket` (a secret holding '/' splits the bucket off)
CREDENTIALS_REFUSED = (
    "holds credentials before '@' (refused, not shown): an s3 URI names a bucket and a "
    "prefix only; give the keys as BATCHPOINT_S3_ACCESS_KEY_ID and "
    "BATCHPOINT_S3_SECRET_ACCESS_KEY"
)


#: What S3 accepts as a bucket name: no '@', ':' or upper case
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def holds_credentials(uri: str) -> bool:
    """Whether a URI carries keys before an '@' (`CREDENTIALS_REFUSED`): an '@' or ':'
    where an s3 bucket is named (any '@' there, for another scheme), or an '@' after
    something that is no bucket name (a secret holding '/' split it off). An '@' in
    the key of a bucket (`s3://bucket/exports/team@corp/`) is the key's."""
    scheme, sep, rest = uri.split("?", 1)[0].partition("://")
    if not sep:
        return False
    netloc, _, path = rest.partition("/")
    if scheme.lower() not in ("s3", "s3a", "s3n"):  # s3a: a Spark user's slip
        return "@" in netloc
    if "@" in netloc or ":" in netloc:
        return True
    return "@" in path and not _BUCKET.fullmatch(netloc)


def redact_uri(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` and every token or
    signature parameter replaced by the mask."""
    text = _USERINFO.sub(lambda m: f"{m['head']}:{REDACTED}@", text)
    return _PARAMETER.sub(lambda m: f"{m['head']}{REDACTED}", text)


def scrub(text: str, secrets: Iterable[Any]) -> str:
    """`text` (a third party's error message, say) with every occurrence of each secret
    value masked, and URIs redacted."""
    for secret in secrets:
        value = reveal(secret)
        if isinstance(value, str) and len(value) >= 4:  # a 1-3 character "secret" is no secret
            text = text.replace(value, REDACTED)
    return redact_uri(text)
