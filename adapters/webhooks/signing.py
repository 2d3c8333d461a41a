"""Signing webhook deliveries: the Standard Webhooks scheme (gaps.md, Webhooks).

The signed content is `"{id}.{timestamp}.{raw body}"`, signed with HMAC-SHA256 under the
bytes of each secret in force (`whsec_` + base64). The signature header holds one
`v1,<base64>` per secret, space-separated, so during a rotation a receiver holding either
the old or the new secret verifies. The same three headers go out under the `webhook-`
and the `svix-` prefix, so either family of receiver library verifies them. The message
id stays the same across retries; the timestamp is the time of each attempt.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from collections.abc import Sequence

from healthledger.domain.webhook_endpoints import SECRET_PREFIX

SIGNATURE_VERSION = "v1"
HEADER_PREFIXES = ("webhook", "svix")


class SigningError(ValueError):
    """A secret that is not `whsec_` + base64; its value is never part of the message."""


def secret_key(secret: str) -> bytes:
    """The HMAC key a `whsec_` secret stands for."""
    if not secret.startswith(SECRET_PREFIX):
        raise SigningError(f"a signing secret starts with {SECRET_PREFIX}")
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError:
        raise SigningError("a signing secret is base64 after its prefix") from None
    if not key:
        raise SigningError("a signing secret is not empty")
    return key


def new_message_id() -> str:
    """A message id, made once per event and endpoint and kept across retries."""
    return f"msg_{uuid.uuid4().hex}"


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256>` of one delivery under one secret."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def signature_header(secrets: Sequence[str], message_id: str, timestamp: int, body: bytes) -> str:
    """One signature per secret in force, space-separated (current secret first)."""
    if not secrets:
        raise SigningError("a delivery is signed with at least one secret")
    return " ".join(signature(s, message_id, timestamp, body) for s in secrets)


def signed_headers(
    secrets: Sequence[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The id, timestamp and signature headers of a delivery, under both prefixes."""
    signatures = signature_header(secrets, message_id, timestamp, body)
    headers: dict[str, str] = {}
    for prefix in HEADER_PREFIXES:
        headers[f"{prefix}-id"] = message_id
        headers[f"{prefix}-timestamp"] = str(timestamp)
        headers[f"{prefix}-signature"] = signatures
    return headers
