"""The service's keyed digests of makers' account ids (issue 28, ADR 0031).

A maker's webhook names the person by the maker's own account id, which the connection
holds only sealed with the person's key: no query can find a connection by it. The
connections read model therefore also holds a keyed digest of (provider, account id),
and the webhook intake computes the same digest to find the connection.

The key is one for the whole service (a webhook arrives before we know whose it is, so
no team's or user's key can name it): a data key in the key store under a fixed id that
is no user's, made at the first start that needs it, wrapped by the master key and
rewrapped with every rotation like a user's. Never erased: a digest means nothing
without it, and the rows that hold one go with their user's erasure.
"""

from __future__ import annotations

import uuid

from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher

# The key store's id of the service's account-digest key: a fixed UUID no user has.
ACCOUNT_DIGEST_KEY_ID = uuid.UUID("5e7a1c0d-8b2f-5d3e-9c4a-6f0b1e2d3c4b")

_SEPARATOR = b"\x1f"


class AccountDigests:
    """HMAC-SHA256 (hex) of a maker's account id, and of a notice's key, under the
    service's account-digest key; the key is read (or made) once per process."""

    def __init__(self, key_store: KeyStore) -> None:
        self._cipher: UserCipher = key_store.service_cipher(ACCOUNT_DIGEST_KEY_ID)

    def account(self, provider: str, account_id: str) -> str:
        """What the connections read model's `account_digest` holds."""
        return self._cipher.digest(b"account" + _SEPARATOR + _pair(provider, account_id))

    def notice(self, provider: str, key: str) -> str:
        """What a notice's stream is named by: its de-duplication key, keyed, so that the
        log's stream ids say nothing about a person even when the maker's key is a
        digest of the notice's fields."""
        return self._cipher.digest(b"notice" + _SEPARATOR + _pair(provider, key))


def _pair(provider: str, value: str) -> bytes:
    return provider.encode() + _SEPARATOR + value.encode()
