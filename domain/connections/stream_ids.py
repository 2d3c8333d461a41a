"""The stream ids of a user's connections, resource feeds and credential sign-ins (issue
29 §1, ADR 0045).

A connection was the stream `uuid5(user_id, provider)` and a feed `uuid5(connection_id,
resource)`. The user's id stays in clear after the erasure (the proof of it), so whoever
holds the log could try the few dozen provider slugs and resources against the ids and
learn which makers a person had (a glucose monitor: diabetic), from the ids alone.

New streams take ids keyed by **the user's data key**, as new webhook deliveries' message
ids do (ADR 0028): 128 bits of HMAC-SHA256 under the user's digest key over the provider
(or the connection and the resource), shaped as a version-4 UUID, so a keyed id looks like
any random one. The key never changes while the user exists (a master key rotation
rewraps the same key), so the id is stable for the lookups by (user, provider); once the
key is destroyed no one, the service included, can recompute or test it.

A credential sign-in (one pending per link token and provider) was the stream
`uuid5(NAMESPACE_URL, "healthledger:credential-sign-in:<token id>:<provider>")`: the
token's id is in clear in the log, so the same few dozen tries named the maker of the
sign-in. Since revision 0045 it is keyed likewise, over the token's id and the provider.

Streams made before keep their uuid5 ids (they are record keys, covered by the chain,
ADR 0045 says why they stay): a lookup finds the keyed stream, else the old one, else
names the keyed id for a new stream. Every derivation of these ids is here, one function
each.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Protocol
from uuid import UUID

from healthledger.domain.ledger import Ledger

# A keyed digest under one user's data key (the user's cipher's `digest`): bytes -> hex.
UsersDigest = Callable[[bytes], str]

# The namespaces of the old, unkeyed ids (never used for a new stream).
_CONNECTION_NAMESPACE = uuid.UUID("9a7d5c3e-1b2f-5a4d-8c6e-0f1e2d3c4b5a")
_FEED_NAMESPACE = uuid.UUID("3c1d8e52-7a0b-5f64-9d2e-41b7c6a9e0f3")


class UsersDigests(Protocol):
    """The port to users' keyed digests (the key store implements it)."""

    def users_digest(self, user_id: UUID) -> UsersDigest | None:
        """The digest under the user's data key; None when the user has no key (erased)."""
        ...


def legacy_connection_id(user_id: UUID, provider: str) -> UUID:
    """The unkeyed id of a connection made before keyed ids (guessable: found, never
    made)."""
    return uuid.uuid5(_CONNECTION_NAMESPACE, f"{user_id}\x1f{provider}")


def legacy_feed_id(connection_id: UUID, resource: str) -> UUID:
    """The unkeyed id of a feed opened before keyed ids (guessable: found, never made)."""
    return uuid.uuid5(_FEED_NAMESPACE, f"{connection_id}\x1f{resource}")


def legacy_sign_in_id(token_id: UUID, provider: str) -> UUID:
    """The unkeyed id of a credential sign-in made before revision 0045 (guessable:
    found, never made)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"healthledger:credential-sign-in:{token_id}:{provider}")


def keyed_uuid(digest: UsersDigest, label: bytes) -> UUID:
    """128 bits of the keyed digest of `label`, shaped as a version-4 UUID: a keyed id is
    not told apart from a random one (stream ids here; summary and device ids,
    `summary_ids.py`)."""
    return uuid.UUID(hex=digest(label)[:32], version=4)


def keyed_connection_id(digest: UsersDigest, provider: str) -> UUID:
    """The id of a user's connection of `provider`, keyed by the user's data key."""
    return keyed_uuid(digest, b"connection-id\x1f" + provider.encode())


def keyed_feed_id(digest: UsersDigest, connection_id: UUID, resource: str) -> UUID:
    """The id of a connection's feed of `resource`, keyed by the user's data key."""
    return keyed_uuid(digest, b"feed-id\x1f" + connection_id.bytes + resource.encode())


def keyed_sign_in_id(digest: UsersDigest, token_id: UUID, provider: str) -> UUID:
    """The id of the credential sign-in of a link token and a provider, keyed by the
    token's user's data key."""
    return keyed_uuid(digest, b"sign-in-id\x1f" + token_id.bytes + provider.encode())


class StreamIds:
    """Where a user's connection of a provider, a connection's feed of a resource, or the
    sign-in of a link token at a provider is: the keyed stream if it exists, else the old
    unkeyed one if that exists, else the keyed id a new stream takes."""

    def __init__(self, ledger: Ledger, digests: UsersDigests) -> None:
        self.ledger = ledger
        self.digests = digests

    def connection_id(self, user_id: UUID, provider: str) -> UUID:
        legacy = legacy_connection_id(user_id, provider)
        digest = self.digests.users_digest(user_id)
        if digest is None:
            return self._keyless(legacy)
        return self._pick(keyed_connection_id(digest, provider), legacy)

    def feed_id(self, connection_id: UUID, user_id: UUID, resource: str) -> UUID:
        legacy = legacy_feed_id(connection_id, resource)
        digest = self.digests.users_digest(user_id)
        if digest is None:
            return self._keyless(legacy)
        return self._pick(keyed_feed_id(digest, connection_id, resource), legacy)

    def sign_in_id(self, user_id: UUID, token_id: UUID, provider: str) -> UUID:
        """The credential sign-in of the link token `token_id` (of `user_id`) at
        `provider`: one pending per token and provider, a later one replaces it."""
        legacy = legacy_sign_in_id(token_id, provider)
        digest = self.digests.users_digest(user_id)
        if digest is None:
            return self._keyless(legacy)
        return self._pick(keyed_sign_in_id(digest, token_id, provider), legacy)

    def _keyless(self, legacy: UUID) -> UUID:
        # No key (an erased user): no keyed id can be derived, so no keyed stream is
        # found. An old stream is found by its uuid5 as before; else a random id, which
        # names nothing, so that a stream made in a race with the erasure (an import that
        # passed its check before) takes no guessable id.
        return legacy if self._exists(legacy) else uuid.uuid4()

    def _pick(self, keyed: UUID, legacy: UUID) -> UUID:
        # The keyed stream first: for every stream made since, one query. Both cannot
        # exist: a lookup that finds the old one never names the keyed id.
        if self._exists(keyed) or not self._exists(legacy):
            return keyed
        return legacy

    def _exists(self, stream_id: UUID) -> bool:
        # A read of the stream's first event (a load would look for a snapshot first).
        return any(True for _ in self.ledger.events.get(stream_id, limit=1))
