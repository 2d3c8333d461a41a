"""Webhooks in: the receiver a customer embeds to take our webhook messages.

`build_receiver(database_url, secrets, master_key=...)` gives a `WebhookReceiver`; its
`receive(body, headers)` is a plain synchronous function for any web framework, and
`create_receiver_app(receiver)` (`receiver_app.py`) wraps it in a small ASGI app.

For each message, in this order:

1. verify the Standard Webhooks signature over the raw body bytes, under any of the
   secrets held (several during a rotation), and the timestamp within the tolerance;
2. read the envelope and, for the types the mirror records, the data (`messages.py`);
3. apply it to the user's mirror and note the message id in `received_webhooks`, in one
   transaction, so a copy of a message that was taken before changes nothing, however the
   copies race. A type the mirror does not record is noted as received, alone, and so is
   a message that changes nothing (about an erased user, or a stale lifecycle message).

The user's identifiers are sealed with a key per mirrored user, in the mirror's own key
store (`mirror_user_keys`, the service's `KeyStore` on the receiver's tables) under the
receiver's own master key; `user.erased` destroys the key (`erasure.py`).

The receiver is its own small composition root, not the service's: it runs in the
customer's process, on the customer's database, with its own master key and none of the
service's settings or tables.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.mirror.erasure import mirror_erasure_effects
from healthledger.adapters.mirror.messages import InvalidMessage, parse_message
from healthledger.adapters.mirror.received_webhooks import ReceivedWebhook, ReceivedWebhooks
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.mirror_schema import MIRROR_KEY_TABLES, MIRROR_TABLES
from healthledger.adapters.persistence.eventstore.infrastructure import LedgerInfrastructure
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder, SnapshotRecorder
from healthledger.adapters.persistence.keys.key_store import KeyStore, open_master_key
from healthledger.adapters.persistence.keys.master_key import MasterKeySource
from healthledger.adapters.webhooks.signing import (
    DEFAULT_TOLERANCE,
    SigningError,
    secret_key,
    verify,
)
from healthledger.domain.ledger import Clock, utc_now
from healthledger.domain.mirror.mirroring import (
    APPLIED as APPLIED,  # re-exported: what `Receipt.outcome` says
)
from healthledger.domain.mirror.mirroring import (
    DUPLICATE,
    UNCHANGED,
    Mirror,
    MirroredUserView,
    MirrorHistoryEntry,
    MirrorLedger,
)
from healthledger.domain.mirror.users import MirroredUser, TeamMismatch
from sqlalchemy import Connection

logger = logging.getLogger("healthledger.receiver")

# What became of a verified message: APPLIED (the mirror recorded it), DUPLICATE (taken
# before, same message id: nothing changed), or
RECEIVED = "received"  # noted, nothing else: a type the mirror does not record, or a
# message that changes nothing (about an erased user, a stale lifecycle message)

TEAM_MISMATCH = "team_mismatch"


@dataclass(frozen=True)
class Receipt:
    outcome: str  # APPLIED, DUPLICATE or RECEIVED
    message_id: str
    event_type: str


class WebhookReceiver:
    def __init__(
        self,
        db: Database,
        ledger: MirrorLedger,
        received: ReceivedWebhooks,
        secrets: Sequence[str],
        key_store: KeyStore,
        *,
        tolerance: timedelta = DEFAULT_TOLERANCE,
        clock: Clock = utc_now,
    ) -> None:
        _check_secrets(secrets)
        self.db = db
        self.ledger = ledger
        self.received = received
        self.secrets = tuple(secrets)
        self.key_store = key_store
        self.tolerance = tolerance
        self.clock = clock
        self.mirror = Mirror(ledger, clock, received.was_received, key_store)

    def receive(self, body: bytes, headers: Mapping[str, str]) -> Receipt:
        """Verify, read and apply one delivery (`body` exactly as received).

        Raises `VerificationError` (untrusted: answer 401, or 400 for missing or malformed
        headers), `InvalidMessage` (trusted but not of the contract: 400) or `MirrorBusy`
        (retry later: 409). Returns a `Receipt`; a duplicate is a success."""
        verified = verify(self.secrets, headers, body, now=self.clock(), tolerance=self.tolerance)
        message = parse_message(verified.message_id, body)
        envelope = message.envelope
        applied = UNCHANGED
        if message.announcement is not None:
            try:
                applied = self.mirror.apply(envelope, message.announcement)
            except TeamMismatch as exc:
                raise InvalidMessage(TEAM_MISMATCH, exc.message) from None
        if applied == UNCHANGED:
            taken = self.received.record_received(
                envelope.message_id, envelope.event_type, envelope.user_id, self.clock()
            )
            outcome = RECEIVED if taken else DUPLICATE
        else:
            outcome = applied  # APPLIED or DUPLICATE
        # Ids and types only: nothing of the payload goes to a log.
        logger.info("webhook %s %s: %s", envelope.message_id, envelope.event_type, outcome)
        return Receipt(outcome, envelope.message_id, envelope.event_type)

    # -- reading the mirror back -----------------------------------------------------------

    def user(self, user_id: UUID) -> MirroredUserView | None:
        """What the messages said of a user: team, client_user_id, status upstream,
        connections, data. An erased user's view keeps its statuses, dates and counts,
        without identifiers."""
        return self.mirror.view(user_id)

    def history(self, user_id: UUID) -> list[MirrorHistoryEntry]:
        """The user's mirror event by event (`Mirror.history`): "erased upstream at ..."
        and the like, never a personal value."""
        return self.mirror.history(user_id)

    def user_ids(self) -> list[UUID]:
        """Every user a message was taken about."""
        return self.received.user_ids()

    def message(self, message_id: str) -> ReceivedWebhook | None:
        """The record of one message taken (its type, user, outcome, time)."""
        return self.received.get(message_id)

    def messages(self, user_id: UUID) -> list[ReceivedWebhook]:
        return self.received.for_user(user_id)

    def close(self) -> None:
        self.ledger.close()
        self.db.dispose()


def build_receiver(
    database_url: str,
    secrets: Sequence[str],
    *,
    master_key: MasterKeySource,
    tolerance: timedelta = DEFAULT_TOLERANCE,
    clock: Clock = utc_now,
    snapshot_interval: int = 100,
) -> WebhookReceiver:
    """A receiver on the database at `database_url` (SQLite file or PostgreSQL), its
    tables created or migrated there first (their own migration line, see
    `migrating.MIRROR`). `secrets`: the endpoint's signing secrets
    (`whsec_...`); give the old and the new one during a rotation. `master_key`: where
    the receiver's own master key comes from (`FileKeySource`, `EnvironmentKeySource`,
    `CommandKeySource` of `adapters/persistence/keys/master_key.py`), which wraps the key of
    each mirrored user; made on first use (a file) for a mirror that holds no key yet,
    refused when it does not open the keys the mirror holds."""
    _check_secrets(secrets)
    db = Database(database_url)
    migrating.upgrade(database_url, migrating.MIRROR)
    key_store = KeyStore(
        db,
        open_master_key(db, master_key, MIRROR_KEY_TABLES),
        clock,
        source=master_key,
        tables=MIRROR_KEY_TABLES,
    )
    received = ReceivedWebhooks(db)

    def on_record(conn: Connection, events: Sequence[Any]) -> None:
        received.record_applied(conn, events)
        mirror_erasure_effects(conn, events)

    # The receiver's log is not hash-chained: the service's chain and signed heads prove
    # what it was sent (docs/adr/0015-hash-chained-log.md).
    recorder = LedgerRecorder(db, on_record, tables=MIRROR_TABLES, chained=False)

    def after_erasure(events: Sequence[Any]) -> None:
        # Once the erasure committed: SQLite's WAL still holds the destroyed key's page
        # until a checkpoint (PostgreSQL: VACUUM of the dead row). See docs/webhooks.md.
        if any(isinstance(event, MirroredUser.Erased) for event in events):
            db.vacuum_key_store(MIRROR_KEY_TABLES.keys.name)

    recorder.add_commit_listener(after_erasure)
    ledger = MirrorLedger(
        LedgerInfrastructure(recorder, SnapshotRecorder(db, MIRROR_TABLES.snapshots)),
        snapshot_interval=snapshot_interval,
    )
    return WebhookReceiver(
        db, ledger, received, secrets, key_store, tolerance=tolerance, clock=clock
    )


def _check_secrets(secrets: Sequence[str]) -> None:
    # A broken secret fails at start, not on every message.
    if not secrets:
        raise SigningError("a receiver verifies with at least one secret")
    for secret in secrets:
        secret_key(secret)
