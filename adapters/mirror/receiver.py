"""Webhooks in: the receiver a customer embeds to take our webhook messages.

`build_receiver(database_url, secrets)` gives a `WebhookReceiver`; its `receive(body,
headers)` is a plain synchronous function for any web framework, and
`create_receiver_app(receiver)` (`receiver_app.py`) wraps it in a small ASGI app.

For each message, in this order:

1. verify the Standard Webhooks signature over the raw body bytes, under any of the
   secrets held (several during a rotation), and the timestamp within the tolerance;
2. read the envelope and, for the types the mirror records, the data (`messages.py`);
3. apply it to the user's mirror and note the message id in `received_webhooks`, in one
   transaction, so a copy of a message that was taken before changes nothing, however the
   copies race. A type the mirror does not record is noted as received, alone.

The receiver is its own small composition root, not the service's: it runs in the
customer's process, on the customer's database, with no service settings, master key or
service tables.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from healthledger.adapters.eventstore.infrastructure import LedgerInfrastructure
from healthledger.adapters.eventstore.recorder import LedgerRecorder, SnapshotRecorder
from healthledger.adapters.mirror.messages import InvalidMessage, parse_message
from healthledger.adapters.mirror.received_webhooks import ReceivedWebhook, ReceivedWebhooks
from healthledger.adapters.mirror.schema import MIRROR_TABLES
from healthledger.adapters.persistence import migrating
from healthledger.adapters.persistence.database import Database
from healthledger.adapters.webhooks.signing import (
    DEFAULT_TOLERANCE,
    SigningError,
    secret_key,
    verify,
)
from healthledger.domain.ledger import Clock, utc_now
from healthledger.domain.mirror.mirroring import Mirror, MirroredUserView, MirrorLedger
from healthledger.domain.mirror.users import TeamMismatch

logger = logging.getLogger("healthledger.receiver")

# What became of a verified message.
APPLIED = "applied"  # the mirror recorded it
DUPLICATE = "duplicate"  # taken before (same message id): nothing changed
RECEIVED = "received"  # a type the mirror does not record: noted, nothing else

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
        *,
        tolerance: timedelta = DEFAULT_TOLERANCE,
        clock: Clock = utc_now,
    ) -> None:
        _check_secrets(secrets)
        self.db = db
        self.ledger = ledger
        self.received = received
        self.secrets = tuple(secrets)
        self.tolerance = tolerance
        self.clock = clock
        self.mirror = Mirror(ledger, clock, received.was_received)

    def receive(self, body: bytes, headers: Mapping[str, str]) -> Receipt:
        """Verify, read and apply one delivery (`body` exactly as received).

        Raises `VerificationError` (untrusted: answer 401, or 400 for missing or malformed
        headers), `InvalidMessage` (trusted but not of the contract: 400) or `MirrorBusy`
        (retry later: 409). Returns a `Receipt`; a duplicate is a success."""
        verified = verify(self.secrets, headers, body, now=self.clock(), tolerance=self.tolerance)
        message = parse_message(verified.message_id, body)
        envelope = message.envelope
        if message.announcement is None:
            taken = self.received.record_received(
                envelope.message_id, envelope.event_type, envelope.user_id, self.clock()
            )
            outcome = RECEIVED if taken else DUPLICATE
        else:
            try:
                applied = self.mirror.apply(envelope, message.announcement)
            except TeamMismatch as exc:
                raise InvalidMessage(TEAM_MISMATCH, exc.message) from None
            outcome = APPLIED if applied else DUPLICATE
        # Ids and types only: nothing of the payload goes to a log.
        logger.info("webhook %s %s: %s", envelope.message_id, envelope.event_type, outcome)
        return Receipt(outcome, envelope.message_id, envelope.event_type)

    # -- reading the mirror back -----------------------------------------------------------

    def user(self, user_id: UUID) -> MirroredUserView | None:
        """What the messages said of a user: team, client_user_id, connections, data."""
        return self.mirror.view(user_id)

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
    tolerance: timedelta = DEFAULT_TOLERANCE,
    clock: Clock = utc_now,
    snapshot_interval: int = 100,
) -> WebhookReceiver:
    """A receiver on the database at `database_url` (SQLite file or PostgreSQL), its
    tables created or migrated there first (their own migration line, see
    `migrating.MIRROR`). `secrets`: the endpoint's signing secrets
    (`whsec_...`); give the old and the new one during a rotation."""
    _check_secrets(secrets)
    db = Database(database_url)
    migrating.upgrade(database_url, migrating.MIRROR)
    received = ReceivedWebhooks(db)
    recorder = LedgerRecorder(db, received.record_applied, tables=MIRROR_TABLES)
    ledger = MirrorLedger(
        LedgerInfrastructure(recorder, SnapshotRecorder(db, MIRROR_TABLES.snapshots)),
        snapshot_interval=snapshot_interval,
    )
    return WebhookReceiver(db, ledger, received, secrets, tolerance=tolerance, clock=clock)


def _check_secrets(secrets: Sequence[str]) -> None:
    # A broken secret fails at start, not on every message.
    if not secrets:
        raise SigningError("a receiver verifies with at least one secret")
    for secret in secrets:
        secret_key(secret)
