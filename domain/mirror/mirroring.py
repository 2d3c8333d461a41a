"""The receiver's use case: apply one verified webhook message to the user's mirror.

The mirror is its own event-sourced application (`MirrorLedger`), recording in its own
tables, because it runs in the customer's database, not ours. Its recorder writes the
message id into the received-messages table in the transaction that stores the events, under
a primary key (see `adapters/mirror/received_webhooks.py`): a message applied once
can never be applied again, however its copies race.

The user's identifiers are sealed through the mirror's own vault (a key per mirrored user,
in the customer's database, under the customer's master key); `user.erased` destroys that
key in the transaction that records the erasure (`adapters/mirror/erasure.py`).
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
from healthledger.domain.mirror.users import (
    ERASED,
    MIRROR_ERASURE_REMOVES,
    Announcement,
    Envelope,
    ErasureAnnounced,
    MirroredUser,
    holds_clear_identifier,
)
from healthledger.domain.personal_data import (
    ERASED_PLACEHOLDER,
    SEALED_PLACEHOLDER,
    PersonalDataVault,
)

# How often a message is tried when another message about the same user was saved between
# its read and its write. Each failure means another message was applied, and each retry
# re-reads the user, so N messages racing for one user all apply when N <= SAVE_ATTEMPTS;
# beyond that the loser is refused (409) and the sender retries it later.
SAVE_ATTEMPTS = 10

# What became of a message the mirror was given.
APPLIED = "applied"  # its events were recorded
DUPLICATE = "duplicate"  # taken before (same message id): nothing changed
UNCHANGED = "unchanged"  # about an erased user, or a stale lifecycle message: no event

# How a personal value an event recorded in clear (version 1) shows in the history: never
# the value, and never "erased", which it is not (the log still holds it).
CLEAR_PLACEHOLDER = "<personal data: in clear, recorded before sealing>"

# Fields every mirror event has, left out of a history entry's changes.
_BASE_FIELDS = frozenset(
    {"originator_id", "originator_version", "originator_topic", "timestamp", "message_id"}
)


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
        self,
        ledger: MirrorLedger,
        clock: Clock,
        was_received: Callable[[str], bool],
        vault: PersonalDataVault,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.was_received = was_received
        self.vault = vault

    def apply(self, envelope: Envelope, announcement: Announcement) -> str:
        """Apply a message: APPLIED, DUPLICATE (applied before) or UNCHANGED (nothing to
        record: the caller notes the message as received)."""
        for _ in range(SAVE_ATTEMPTS):
            # A cheap early answer for a redelivery. The guarantee is the primary key,
            # written with the events: a copy racing past this check loses there.
            if self.was_received(envelope.message_id):
                return DUPLICATE
            now = self.clock()
            user = self.find(envelope.user_id)
            if user is not None and user.status == ERASED:
                # Nothing about an erased user is learnt again. A message that raced the
                # erasure may have made the user a new key (sealing before it lost): that
                # key must not outlive the erasure either.
                if self.vault.has_key(user.id):
                    self.vault.discard(user.id)
                return UNCHANGED
            if user is None:
                user = MirroredUser.start(envelope, now, self.vault)
            else:
                user.note_envelope(envelope, now, self.vault)
            if isinstance(announcement, ErasureAnnounced):
                user.erase(
                    envelope,
                    now,
                    announcement,
                    removed=self.erasure_removes(user.id),
                    clear_events_left=self.clear_events(user.id),
                )
            else:
                user.announce(envelope, now, announcement, self.vault)
            if not user.pending_events:
                return UNCHANGED  # a stale lifecycle message about a known user
            try:
                self.ledger.save(user)
            except IntegrityError:
                # Either a copy of this message was applied first (the next check says
                # so), or another message about this user was: read it again and retry.
                continue
            return APPLIED
        if self.was_received(envelope.message_id):
            return DUPLICATE
        raise MirrorBusy()

    def erasure_removes(self, user_id: UUID) -> list[str]:
        """What the mirror's erasure of the user will remove: what there is of
        `MIRROR_ERASURE_REMOVES` (checked, not asserted)."""
        snapshots = self.ledger.snapshots
        present = {
            "mirror_user_key": self.vault.has_key(user_id),
            "mirror_snapshots": snapshots is not None
            and any(True for _ in snapshots.get(user_id, limit=1)),
        }
        return [item for item in MIRROR_ERASURE_REMOVES if present[item]]

    def clear_events(self, user_id: UUID) -> int:
        """How many of the user's stored events hold an identifier in clear (version 1):
        what an erasure leaves in the log, counted once, when it is recorded."""
        return sum(1 for event in self.ledger.events.get(user_id) if holds_clear_identifier(event))

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
            client_user_id=user.client_user_id_in(self.vault),
            status=user.status,
            deleted_at=user.deleted_at,
            erasure_due_at=user.erasure_due_at,
            erased_at=user.erased_at,
            last_message_at=user.last_message_at,
            connections=tuple(
                self._connection(user, slug, fields)
                for slug, fields in sorted(user.connections.items())
            ),
            resources=tuple(
                MirroredResource(provider=slug, resource=resource, **fields)
                for slug, feeds in sorted(user.resources.items())
                for resource, fields in sorted(feeds.items())
            ),
        )

    def _connection(
        self, user: MirroredUser, slug: str, fields: dict[str, Any]
    ) -> MirroredConnection:
        sealed = fields["sealed_external_user_id"]
        external = fields["external_user_id"]
        if sealed is not None:
            opened = self.vault.open(user.id, sealed)
            external = None if opened is None else str(opened)
        return MirroredConnection(
            provider=slug,
            status=fields["status"],
            name=fields["name"],
            logo=fields["logo"],
            resource_availability=fields["resource_availability"],
            external_user_id=external,
            connected_at=fields["connected_at"],
            error_details=fields["error_details"],
        )

    def history(self, user_id: UUID) -> list[MirrorHistoryEntry]:
        """The user's mirror event by event, oldest first: when the receiver recorded it,
        the message that caused it, what it says, and what changed. Personal values are
        never shown: a sealed one says whether its key still exists, one a version 1
        event holds in clear says so."""
        key_exists = self.vault.has_key(user_id)
        sealed = SEALED_PLACEHOLDER if key_exists else ERASED_PLACEHOLDER
        entries = []
        # Every mirror event carries its message id and type besides eventsourcing's
        # fields, which the read-back protocol does not declare.
        events: list[Any] = list(self.ledger.events.get(user_id))
        for event in events:
            personal = set(getattr(type(event), "PERSONAL_FIELDS", ()))
            clear = set(getattr(type(event), "CLEAR_PERSONAL_FIELDS", ()))
            changes: dict[str, Any] = {}
            for name, value in vars(event).items():
                if name in _BASE_FIELDS or name == "event_type":
                    continue
                if name in personal or name in clear:
                    if value is not None:
                        changes[name] = sealed if name in personal else CLEAR_PLACEHOLDER
                else:
                    changes[name] = value
            entries.append(
                MirrorHistoryEntry(
                    recorded_at=event.timestamp,
                    version=event.originator_version,
                    event=type(event).__name__,
                    message_id=event.message_id,
                    event_type=event.event_type,
                    summary=_summary(event),
                    changes=changes,
                )
            )
        return entries


def _summary(event: Any) -> str:
    """One line an operator reads: the lifecycle facts in words, others by message type."""
    if isinstance(event, MirroredUser.Deleted):
        return (
            f"deleted upstream at {event.deleted_at.isoformat()}, "
            f"erasure due at {event.erasure_due_at.isoformat()}"
        )
    if isinstance(event, MirroredUser.DeletionUndone):
        return f"deletion undone upstream at {event.undone_at.isoformat()}"
    if isinstance(event, MirroredUser.Erased):
        removed = ", ".join(event.removed) or "nothing"
        line = f"erased upstream at {event.erased_at.isoformat()}; the mirror removed {removed}"
        if event.clear_events_left:
            line += (
                f"; {event.clear_events_left} event(s) recorded before sealing still hold "
                "an identifier in clear"
            )
        return line
    if isinstance(event, MirroredUser.Created):
        return f"first message about the user ({event.event_type})"
    return str(event.event_type)


@dataclass(frozen=True)
class MirrorHistoryEntry:
    recorded_at: datetime  # when the receiver recorded it (its clock)
    version: int
    event: str  # the mirror event's name (`Erased`)
    message_id: str
    event_type: str  # the message's type
    summary: str
    changes: dict[str, Any]  # the event's fields, personal values as placeholders


@dataclass(frozen=True)
class MirroredConnection:
    """A connection as the messages told it (spec 2.2's item, as far as messages say)."""

    provider: str  # slug
    status: str  # connected or error
    name: str | None  # None while only an error message has been seen
    logo: str | None
    resource_availability: dict[str, Any]
    external_user_id: str | None  # None once the user is erased
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
    client_user_id: str | None  # None once the user is erased
    status: str  # active, deleted or erased (upstream)
    deleted_at: datetime | None  # upstream times, from the lifecycle messages
    erasure_due_at: datetime | None
    erased_at: datetime | None
    last_message_at: datetime
    connections: tuple[MirroredConnection, ...]
    resources: tuple[MirroredResource, ...]

    def connection(self, provider: str) -> MirroredConnection | None:
        return next((c for c in self.connections if c.provider == provider), None)

    def resource(self, provider: str, resource: str) -> MirroredResource | None:
        found = (r for r in self.resources if (r.provider, r.resource) == (provider, resource))
        return next(found, None)
