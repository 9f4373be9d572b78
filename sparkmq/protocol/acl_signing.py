"""RocketMQ ACL 1.0 request signing: what ``AclClientRPCHook`` (Java) and ``ClientRPCHook`` (C++) do.

A signed request carries ``AccessKey`` and ``Signature`` in its extFields. The signature is
``base64(HMAC-SHA1(secretKey, content))`` where ``content`` is the values of every extField
except ``Signature``, sorted by key and joined with no separator, UTF-8 encoded, followed by
the raw body bytes. Keys are never signed. Brokers rebuild the same content from the fields as
received (:func:`content_to_sign`); clients add the fields with :meth:`SessionCredentials.sign`.

Example::

    >>> creds = SessionCredentials("RocketMQ", "12345678")
    >>> signed = creds.sign({"topic": "T"}, b"hi")
    >>> signed["AccessKey"], signed["Signature"] == signature("12345678", content_to_sign(signed, b"hi"))
    ('RocketMQ', True)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"
#: Old Java clients (MQVersion ≤ V4_9_3 = 399) added this field after signing; the broker leaves it out.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
UNIQUE_KEY_QUERY_LAST_VERSION = 399


def content_to_sign(ext_fields: dict[str, str], body: bytes = b"", version: int | None = None) -> bytes:
    """The bytes a request's signature covers: sorted ext values (no ``Signature``) + body.

    ``version`` is the request header's; at or below 399 ``_UNIQUE_KEY_QUERY`` is left out too.
    """
    skip_unique = version is not None and version <= UNIQUE_KEY_QUERY_LAST_VERSION
    # A list comprehension over sorted keys: half the cost of a generator over sorted items (per request).
    values = "".join(
        [
            ext_fields[key]
            for key in sorted(ext_fields)
            if key != SIGNATURE and not (skip_unique and key == UNIQUE_KEY_QUERY)
        ]
    )
    encoded = values.encode("utf-8", "surrogatepass")
    return encoded + body if body else encoded


def signature(secret_key: str | bytes | hmac.HMAC, content: bytes) -> str:
    """``base64(HMAC-SHA1(secret_key, content))`` with padding, as ``AclUtils.calSignature``.

    ``secret_key`` may be a prepared ``hmac.new(key, digestmod=hashlib.sha1)`` (see :func:`prepared_key`):
    it is copied, never updated, so a broker keys each account once.
    """
    if isinstance(secret_key, hmac.HMAC):
        mac = secret_key.copy()
        mac.update(content)
        digest = mac.digest()
    else:
        key = secret_key.encode("utf-8") if isinstance(secret_key, str) else secret_key
        digest = hmac.digest(key, content, hashlib.sha1)
    return base64.b64encode(digest).decode("ascii")


def prepared_key(secret_key: str) -> hmac.HMAC:
    """An HMAC-SHA1 keyed with ``secret_key`` and fed nothing: :func:`signature` copies it per request."""
    return hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)


@dataclass(frozen=True)
class SessionCredentials:
    """An ACL 1.0 access key and secret key; :meth:`sign` is the client-side RPC hook.

    ``security_token`` (optional) is sent and signed as RocketMQ's ``SecurityToken`` field; an
    ACL 1.0 broker does not check it.
    """

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("SessionCredentials need both an access key and a secret key")

    def __repr__(self) -> str:  # never print the secret
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key=<hidden>)"

    def sign(self, ext_fields: dict[str, str] | None, body: bytes = b"") -> dict[str, str]:
        """A copy of ``ext_fields`` with ``AccessKey`` (and token) added and ``Signature`` computed."""
        fields = {} if ext_fields is None else dict(ext_fields)
        fields[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            fields[SECURITY_TOKEN] = self.security_token
        fields.pop(SIGNATURE, None)
        fields[SIGNATURE] = signature(self.secret_key, content_to_sign(fields, body))
        return fields


__all__ = [
    "ACCESS_KEY",
    "ONS_CHANNEL",
    "SECRET_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "UNIQUE_KEY_QUERY",
    "SessionCredentials",
    "content_to_sign",
    "prepared_key",
    "signature",
]
