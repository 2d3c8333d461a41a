"""The service's keyed digests of lab orders' interpretations (issue 29 §1, ADR 0028).

An order's interpretation (normal, abnormal, critical) is a health fact: the orders read
model holds it sealed with the user's key, which its answers open. The team's listing
filters on it (`GET /v3/orders?interpretation=`) in SQL, across users whose keys differ,
so the row also holds a keyed digest of (team, interpretation), and the filter compares
digests.

The key is the service's digest key of the makers' account ids (`maker_accounts.py`),
under another label: one service key, never erased, rewrapped by every master key
rotation. The team id is in the digest, so the same interpretation gives each team a
different digest (no telling across teams which rows agree). A digest is equal for
equal values within a team: it reveals which of a team's orders share an
interpretation to whoever reads the table, not which one, without the key; the row goes
with the user's erasure, and the start's rewrite after it (VACUUM FULL on PostgreSQL,
secure_delete on SQLite) leaves no copy.
"""

from __future__ import annotations

from uuid import UUID

from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher
from healthledger.adapters.persistence.keys.maker_accounts import ACCOUNT_DIGEST_KEY_ID

_LABEL = b"interpretation\x1f"


class InterpretationDigests:
    """HMAC-SHA256 (hex) of (team, interpretation) under the service's digest key, read
    (or made) once per process: call it outside a write transaction."""

    def __init__(self, key_store: KeyStore) -> None:
        self._cipher: UserCipher = key_store.service_cipher(ACCOUNT_DIGEST_KEY_ID)

    def digest(self, team_id: UUID, interpretation: str) -> str:
        """What the orders read model's `interpretation_digest` holds."""
        return self._cipher.digest(_LABEL + team_id.bytes + interpretation.encode())
