"""Signing webhook deliveries: the Standard Webhooks scheme (gaps.md, Webhooks).

The signed content is `"{id}.{timestamp}.{raw body}"`, signed with HMAC-SHA256 under the
bytes of each secret in force (`whsec_` + base64). The signature header holds one
`v1,<base64>` per secret, space-separated, so during a rotation a receiver holding either
the old or the new secret verifies. The same three headers go out under the `webhook-`
and the `svix-` prefix, so either family of receiver library verifies them. The message
id stays the same across retries; the timestamp is the time of each attempt.

Receiving (`verify`): the same computation over the raw body as received, under each
secret the receiver holds, compared in constant time with every `v1` signature of the
header; any one match is enough. The timestamp must be within a tolerance of the
receiver's clock either way, so a captured delivery cannot be replayed later.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import uuid4

from healthledger.domain.webhooks.endpoints import SECRET_PREFIX

SIGNATURE_VERSION = "v1"
HEADER_PREFIXES = ("webhook", "svix")
# The Standard Webhooks libraries' default: a delivery signed more than 5 minutes before
# (or after) the receiver's clock is refused.
DEFAULT_TOLERANCE = timedelta(minutes=5)
# Our ids are `msg_` + 32 hex; Svix's are alike. Bounded and printable, because the
# receiver stores it as a primary key and may name it in a log line.
_MESSAGE_ID = re.compile(r"^[\x21-\x7e]{1,255}$")
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")


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
    return f"msg_{uuid4().hex}"


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


# -- receiving ---------------------------------------------------------------------------

# Why a delivery was refused: stable codes, for a program to branch on.
MISSING_HEADERS = "missing_headers"
MALFORMED_HEADERS = "malformed_headers"
TIMESTAMP_TOO_OLD = "timestamp_too_old"
TIMESTAMP_IN_FUTURE = "timestamp_in_future"
INVALID_SIGNATURE = "invalid_signature"


class VerificationError(ValueError):
    """A delivery that is not trusted. `reason` is one of the codes above; the message is
    safe to show the sender (it never holds a header value, the body or a secret)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class VerifiedDelivery:
    message_id: str
    timestamp: int


def delivery_headers(headers: Mapping[str, str]) -> tuple[str, str, str]:
    """The (id, timestamp, signature) headers of one family, names matched case-free.

    `webhook-*` is read when all three are there, else `svix-*`: our deliveries carry both,
    other senders one or the other. Mixing families is not allowed, since each family's
    three values were signed together."""
    lowered = {name.lower(): value for name, value in headers.items()}
    for prefix in HEADER_PREFIXES:
        message_id = lowered.get(f"{prefix}-id")
        timestamp = lowered.get(f"{prefix}-timestamp")
        signatures = lowered.get(f"{prefix}-signature")
        if message_id is not None and timestamp is not None and signatures is not None:
            return message_id, timestamp, signatures
    raise VerificationError(
        MISSING_HEADERS,
        "The webhook-id, webhook-timestamp and webhook-signature headers (or their svix- "
        "equivalents) are required.",
    )


def verify(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime,
    tolerance: timedelta = DEFAULT_TOLERANCE,
) -> VerifiedDelivery:
    """Check a delivery's signature over the raw `body` under any of `secrets` (several
    during a rotation), and its timestamp against `now`. Raises `VerificationError`."""
    keys = [secret_key(secret) for secret in secrets]
    if not keys:
        raise SigningError("a receiver verifies with at least one secret")
    message_id, timestamp_text, signatures = delivery_headers(headers)
    if not _MESSAGE_ID.match(message_id):
        raise VerificationError(
            MALFORMED_HEADERS, "The message id header is not 1 to 255 printable characters."
        )
    if not _TIMESTAMP.match(timestamp_text.strip()):
        raise VerificationError(
            MALFORMED_HEADERS, "The timestamp header is not a number of Unix seconds."
        )
    timestamp = int(timestamp_text)
    age = now.timestamp() - timestamp
    if age > tolerance.total_seconds():
        raise VerificationError(TIMESTAMP_TOO_OLD, "The message timestamp is too old.")
    if -age > tolerance.total_seconds():
        raise VerificationError(TIMESTAMP_IN_FUTURE, "The message timestamp is in the future.")

    given = []
    for entry in signatures.split():
        version, _, encoded = entry.partition(",")
        if version != SIGNATURE_VERSION:
            continue  # another scheme (`v1a`, asymmetric): not ours to check
        try:
            given.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue  # an undecodable entry matches nothing; another may still match
    signed = f"{message_id}.{timestamp}.".encode() + body
    expected = [hmac.new(key, signed, hashlib.sha256).digest() for key in keys]
    # Every pair is compared (no early exit), in constant time each.
    matched = False
    for digest in expected:
        for candidate in given:
            matched |= hmac.compare_digest(digest, candidate)
    if not matched:
        raise VerificationError(INVALID_SIGNATURE, "No signature matches the message.")
    return VerifiedDelivery(message_id=message_id, timestamp=timestamp)
