"""The receiver's use case: apply one verified webhook message to the user's mirror.

The mirror is its own event-sourced application (`MirrorLedger`), recording in its own
tables, because it runs in the customer's database, not ours. Its recorder writes the
message id into the received-messages table in the transaction that stores the events, under
a primary key (see `adapters/mirror/received_webhooks.py`): a message applied once
can never be applied again, however its copies race.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import InfrastructureFactory, IntegrityError
from healthledger.domain.errors import LedgerError
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.mirror.users import Announcement, Envelope, MirroredUser

# How often a message is tried when another message about the same user was saved between
# its read and its write. Each failure means another message was applied, and each retry
# re-reads the user, so N messages racing for one user all apply when N <= SAVE_ATTEMPTS;
# beyond that the loser is refused (409) and the sender retries it later.
SAVE_ATTEMPTS = 10


class MirrorBusy(LedgerError):
    def __init__(self) -> None:
        super().__init__("Other messages about this user kept winning; try again.")


class MirrorLedger(Ledger):
    """The mirror's event-sourced application: the ledger's transcoder, save path and
    aggregate cache, on the mirror's own recorder and tables."""

    name = "healthledger_mirror"

    def __init__(
        self,
        factory: InfrastructureFactory,
        *,
        snapshot_interval: int = 100,
        aggregate_cache_size: int = 1_000,
    ) -> None:
        # A user announces data every day for every resource: its stream grows without
        # end, so it is replayed from a snapshot.
        super().__init__(
            factory,
            snapshot_intervals={MirroredUser: snapshot_interval},
            aggregate_cache_size=aggregate_cache_size,
        )


class Mirror:
    def __init__(
        self, ledger: MirrorLedger, clock: Clock, was_received: Callable[[str], bool]
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.was_received = was_received

    def apply(self, envelope: Envelope, announcement: Announcement) -> bool:
        """Apply a message; False when it had been applied before (a duplicate)."""
        for _ in range(SAVE_ATTEMPTS):
            # A cheap early answer for a redelivery. The guarantee is the primary key,
            # written with the events: a copy racing past this check loses there.
            if self.was_received(envelope.message_id):
                return False
            now = self.clock()
            user = self.find(envelope.user_id)
            if user is None:
                user = MirroredUser.start(envelope, now)
            else:
                user.note_envelope(envelope, now)
            user.announce(envelope, now, announcement)
            try:
                self.ledger.save(user)
            except IntegrityError:
                # Either a copy of this message was applied first (the next check says
                # so), or another message about this user was: read it again and retry.
                continue
            return True
        if self.was_received(envelope.message_id):
            return False
        raise MirrorBusy()

    def find(self, user_id: UUID) -> MirroredUser | None:
        """The user's mirror as of now, or None before its first message."""
        found = self.ledger.find(user_id)
        return found if isinstance(found, MirroredUser) else None

    # -- reading the mirror back -----------------------------------------------------------

    def view(self, user_id: UUID) -> MirroredUserView | None:
        user = self.find(user_id)
        if user is None:
            return None
        return MirroredUserView(
            user_id=user.id,
            team_id=user.team_id,
            client_user_id=user.client_user_id,
            last_message_at=user.last_message_at,
            connections=tuple(
                MirroredConnection(provider=slug, **fields)
                for slug, fields in sorted(user.connections.items())
            ),
            resources=tuple(
                MirroredResource(provider=slug, resource=resource, **fields)
                for slug, feeds in sorted(user.resources.items())
                for resource, fields in sorted(feeds.items())
            ),
        )


@dataclass(frozen=True)
class MirroredConnection:
    """A connection as the messages told it (spec 2.2's item, as far as messages say)."""

    provider: str  # slug
    status: str  # connected or error
    name: str | None  # None while only an error message has been seen
    logo: str | None
    resource_availability: dict[str, Any]
    external_user_id: str | None
    connected_at: datetime | None  # when the mirror recorded the created message
    error_details: dict[str, Any] | None  # {error_type, error_message, errored_at}


@dataclass(frozen=True)
class MirroredResource:
    """What the messages announced of one resource from one provider."""

    provider: str
    resource: str
    historical: dict[str, Any] | None  # the latest {start_date, end_date, announced_at}
    historical_announcements: int
    days_created: int  # daily.data.<resource>.created messages
    days_updated: int  # daily.data.<resource>.updated messages
    first_calendar_date: date | None
    last_calendar_date: date | None
    last_event_type: str | None
    last_event_at: datetime | None  # when the mirror recorded the latest of them


@dataclass(frozen=True)
class MirroredUserView:
    user_id: UUID
    team_id: UUID
    client_user_id: str | None
    last_message_at: datetime
    connections: tuple[MirroredConnection, ...]
    resources: tuple[MirroredResource, ...]

    def connection(self, provider: str) -> MirroredConnection | None:
        return next((c for c in self.connections if c.provider == provider), None)

    def resource(self, provider: str, resource: str) -> MirroredResource | None:
        found = (r for r in self.resources if (r.provider, r.resource) == (provider, resource))
        return next(found, None)
