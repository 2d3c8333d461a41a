"""The service's keyed digests of connections' providers (issue 29 §1, ADR 0032).

A connection's provider is a health fact (a glucose monitor): the connections read model
holds it only sealed with the user's key. The team's introspection filters its users by
provider in SQL (`GET /v2/introspect/historical_pull?provider=`), across users whose keys
differ, so the row also holds a keyed digest of (team, provider), and the filter compares
digests: an index lookup.

The key is the service's digest key of the makers' account ids (`maker_accounts.py`),
under its own label, as the orders' interpretations use it
(`order_interpretations.py`): one service key, never erased, rewrapped by every master
key rotation. The team id is in the digest: the same provider gives each team another
digest. Within a team equal providers give equal digests, which tells whoever reads the
table without the key which of a team's connections share a maker, not which maker; the
row goes with the user's erasure.
"""

from __future__ import annotations

from uuid import UUID

from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher
from healthledger.adapters.persistence.keys.maker_accounts import ACCOUNT_DIGEST_KEY_ID

_LABEL = b"provider\x1f"


class ProviderDigests:
    """HMAC-SHA256 (hex) of (team, provider) under the service's digest key, read (or
    made) once per process: call it outside a write transaction."""

    def __init__(self, key_store: KeyStore) -> None:
        self._cipher: UserCipher = key_store.service_cipher(ACCOUNT_DIGEST_KEY_ID)

    def digest(self, team_id: UUID, provider: str) -> str:
        """What the connections read model's `provider_digest` holds."""
        return self._cipher.digest(_LABEL + team_id.bytes + provider.encode())
