"""The signing keys of our webhooks at the makers that hand one out only when the webhook
is made (Polar's `signature_secret_key`, docs/makers/polar.md#webhooks-in): kept so that
`healthledger makers subscribe` can make the webhook and every service process verify
its notifications with no setting to copy by hand.

One row per maker (a maker gives an application one webhook): the maker's webhook id in
clear (it names our registration, not a person), the key sealed under a service key of
its own (a data key in the key store under a fixed id that is no user's, wrapped by the
master key and rewrapped with every rotation, as the account digests' key is). The row
goes when the webhook is deleted at the maker (`makers unsubscribe`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import maker_webhook_secrets
from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher
from healthledger.domain.ledger import Clock
from sqlalchemy import delete, insert, select

# The key store's id of the key that seals the makers' webhook keys: a fixed UUID no user has.
WEBHOOK_SECRETS_KEY_ID = uuid.UUID("7c1d2e3f-4a5b-5c6d-8e7f-9a0b1c2d3e4f")


@dataclass(frozen=True)
class StoredWebhook:
    webhook_id: str
    secret: str


class MakerWebhookSecrets:
    """Read on each notification (one indexed row: a webhook made by another process, the
    CLI's, is seen at once); the service key is read (or made) at the first use."""

    def __init__(self, db: Database, key_store: KeyStore, clock: Clock) -> None:
        self._db = db
        self._key_store = key_store
        self._clock = clock
        self._cipher: UserCipher | None = None

    def _sealer(self) -> UserCipher:
        if self._cipher is None:
            # Made outside any write transaction: making the key writes.
            self._cipher = self._key_store.service_cipher(WEBHOOK_SECRETS_KEY_ID)
        return self._cipher

    def stored(self, provider: str) -> StoredWebhook | None:
        with self._db.read() as conn:
            row = conn.execute(
                select(
                    maker_webhook_secrets.c.webhook_id, maker_webhook_secrets.c.sealed_secret
                ).where(maker_webhook_secrets.c.provider == provider)
            ).first()
        if row is None:
            return None
        return StoredWebhook(row.webhook_id, str(self._sealer().open(row.sealed_secret)))

    def secret(self, provider: str) -> str | None:
        found = self.stored(provider)
        return None if found is None else found.secret

    def store(self, provider: str, webhook_id: str, secret: str) -> None:
        """Replaces what was kept for the maker (its webhook was made again)."""
        sealed = self._sealer().seal(secret)
        with self._db.write() as conn:
            conn.execute(
                delete(maker_webhook_secrets).where(maker_webhook_secrets.c.provider == provider)
            )
            conn.execute(
                insert(maker_webhook_secrets).values(
                    provider=provider,
                    webhook_id=webhook_id,
                    sealed_secret=sealed,
                    created_at=self._clock(),
                )
            )

    def forget(self, provider: str) -> None:
        with self._db.write() as conn:
            conn.execute(
                delete(maker_webhook_secrets).where(maker_webhook_secrets.c.provider == provider)
            )
