"""The receiver's mirror of one user, built from the webhook messages it receives.

A customer embeds the webhook receiver in its own backend; the mirror is what that
receiver knows of each user from our messages alone: its team and client_user_id, its
connections per provider (connected or in error, with their resource availability), and
per provider and resource what data has been announced (the historical range, how many
days were created and updated, when). It holds no health data: the messages' samples and
summaries are left to the customer's own handler.

One stream per user, with the user's own id (our `user_id`), so two messages about the same
user meet on the stream's version. Every event carries the id of the message that caused
it: that is the audit trail, and what the receiver's duplicate check is keyed on.

Messages are applied in the order they arrive. The sender retries a failed delivery later,
so after an outage an older message can arrive after a newer one; the envelope has no
event time to order by, and the mirror does not guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.errors import LedgerError

CONNECTED = "connected"
ERROR = "error"

CREATED = "created"
UPDATED = "updated"


class TeamMismatch(LedgerError):
    def __init__(self) -> None:
        super().__init__("The message's team_id is not the team of the user it names.")


# -- what a message says (parsed from the wire by the receiver adapter) ------------------


@dataclass(frozen=True)
class ConnectionCreated:
    """`provider.connection.created`."""

    provider: str
    name: str
    logo: str | None
    resource_availability: dict[str, Any]
    external_user_id: str | None


@dataclass(frozen=True)
class ConnectionErrored:
    """`provider.connection.error`."""

    provider: str
    error_type: str
    error_message: str


@dataclass(frozen=True)
class HistoricalDataAnnounced:
    """`historical.data.<resource>.created` (and the deprecated hypnogram timeseries one)."""

    provider: str
    resource: str
    start_date: datetime
    end_date: datetime


@dataclass(frozen=True)
class DailyDataAnnounced:
    """`daily.data.<resource>.created|updated` (and the deprecated hypnogram ones)."""

    provider: str
    resource: str
    calendar_date: date
    change: str  # CREATED or UPDATED


Announcement = ConnectionCreated | ConnectionErrored | HistoricalDataAnnounced | DailyDataAnnounced


@dataclass(frozen=True)
class Envelope:
    """The envelope fields every message carries, and which message it is."""

    message_id: str
    event_type: str
    user_id: UUID
    team_id: UUID
    client_user_id: str | None


# -- the aggregate ---------------------------------------------------------------------------


class MirroredUser(Aggregate):
    TOPIC = "healthledger:MirroredUser"

    class Event(Aggregate.Event):
        # The webhook message that caused the event, and its type.
        message_id: str
        event_type: str

    class Created(Event, Aggregate.Created):
        """The first message about this user."""

        TOPIC = "healthledger:MirroredUser.Created.v1"
        team_id: UUID
        client_user_id: str | None

    class ClientUserIdChanged(Event):
        """A message named the user with another client_user_id (the team changed it)."""

        TOPIC = "healthledger:MirroredUser.ClientUserIdChanged.v1"
        client_user_id: str

        def apply(self, user: MirroredUser) -> None:
            user.client_user_id = self.client_user_id

    class ProviderConnected(Event):
        TOPIC = "healthledger:MirroredUser.ProviderConnected.v1"
        provider: str
        name: str
        logo: str | None
        resource_availability: dict[str, Any]
        external_user_id: str | None

        def apply(self, user: MirroredUser) -> None:
            # Connecting again is how a connection in error is repaired (as on our side).
            user.connections = {
                **user.connections,
                self.provider: {
                    "status": CONNECTED,
                    "name": self.name,
                    "logo": self.logo,
                    "resource_availability": self.resource_availability,
                    "external_user_id": self.external_user_id,
                    "connected_at": self.timestamp,
                    "error_details": None,
                },
            }
            user.last_message_at = self.timestamp

    class ProviderErrored(Event):
        TOPIC = "healthledger:MirroredUser.ProviderErrored.v1"
        provider: str
        error_type: str
        error_message: str

        def apply(self, user: MirroredUser) -> None:
            # An error may be the first word of a connection (the receiver started later,
            # or the created message is still being retried): keep what little is known.
            before = user.connections.get(self.provider) or {
                "name": None,
                "logo": None,
                "resource_availability": {},
                "external_user_id": None,
                "connected_at": None,
            }
            user.connections = {
                **user.connections,
                self.provider: {
                    **before,
                    "status": ERROR,
                    "error_details": {
                        "error_type": self.error_type,
                        "error_message": self.error_message,
                        "errored_at": self.timestamp,
                    },
                },
            }
            user.last_message_at = self.timestamp

    class HistoricalDataAnnounced(Event):
        TOPIC = "healthledger:MirroredUser.HistoricalDataAnnounced.v1"
        provider: str
        resource: str
        start_date: datetime
        end_date: datetime

        def apply(self, user: MirroredUser) -> None:
            feed = _feed(user, self.provider, self.resource)
            feed["historical"] = {
                "start_date": self.start_date,
                "end_date": self.end_date,
                "announced_at": self.timestamp,
            }
            feed["historical_announcements"] += 1
            _touch(user, self, feed)

    class DailyDataAnnounced(Event):
        TOPIC = "healthledger:MirroredUser.DailyDataAnnounced.v1"
        provider: str
        resource: str
        calendar_date: date
        change: str

        def apply(self, user: MirroredUser) -> None:
            feed = _feed(user, self.provider, self.resource)
            feed["days_created" if self.change == CREATED else "days_updated"] += 1
            day = self.calendar_date
            first, last = feed["first_calendar_date"], feed["last_calendar_date"]
            feed["first_calendar_date"] = day if first is None else min(first, day)
            feed["last_calendar_date"] = day if last is None else max(last, day)
            _touch(user, self, feed)

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        message_id: str,
        event_type: str,
        team_id: UUID,
        client_user_id: str | None,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `start` and
        on every replay."""
        self.team_id: UUID = team_id
        self.client_user_id: str | None = client_user_id
        # Per provider: status, name, logo, resource_availability, external_user_id,
        # connected_at and error_details.
        self.connections: dict[str, dict[str, Any]] = {}
        # Per provider, per resource: what has been announced (`_feed`).
        self.resources: dict[str, dict[str, dict[str, Any]]] = {}
        self.last_message_at: datetime = timestamp

    @classmethod
    def start(cls, envelope: Envelope, now: datetime) -> MirroredUser:
        return cls(
            id=envelope.user_id,
            timestamp=now,
            message_id=envelope.message_id,
            event_type=envelope.event_type,
            team_id=envelope.team_id,
            client_user_id=envelope.client_user_id,
        )

    def note_envelope(self, envelope: Envelope, now: datetime) -> None:
        """What every message says of the user itself: its team and client_user_id."""
        if envelope.team_id != self.team_id:
            # User ids are unique across teams: a verified message naming another team is
            # a broken contract, not something to mirror.
            raise TeamMismatch()
        if envelope.client_user_id is not None and envelope.client_user_id != (self.client_user_id):
            self._trigger(
                envelope, now, self.ClientUserIdChanged, client_user_id=envelope.client_user_id
            )

    def announce(self, envelope: Envelope, now: datetime, announcement: Announcement) -> None:
        """Record what one message announced. Every known message records an event, even
        one that repeats the state (a second error of the same kind): it is a fact that
        the message arrived, and the event carries the message id."""
        match announcement:
            case ConnectionCreated():
                self._trigger(
                    envelope,
                    now,
                    self.ProviderConnected,
                    provider=announcement.provider,
                    name=announcement.name,
                    logo=announcement.logo,
                    resource_availability=announcement.resource_availability,
                    external_user_id=announcement.external_user_id,
                )
            case ConnectionErrored():
                self._trigger(
                    envelope,
                    now,
                    self.ProviderErrored,
                    provider=announcement.provider,
                    error_type=announcement.error_type,
                    error_message=announcement.error_message,
                )
            case HistoricalDataAnnounced():
                self._trigger(
                    envelope,
                    now,
                    self.HistoricalDataAnnounced,
                    provider=announcement.provider,
                    resource=announcement.resource,
                    start_date=announcement.start_date,
                    end_date=announcement.end_date,
                )
            case DailyDataAnnounced():
                self._trigger(
                    envelope,
                    now,
                    self.DailyDataAnnounced,
                    provider=announcement.provider,
                    resource=announcement.resource,
                    calendar_date=announcement.calendar_date,
                    change=announcement.change,
                )

    def _trigger(self, envelope: Envelope, now: datetime, event: type, **kwargs: Any) -> None:
        self.trigger_event(
            event,
            timestamp=now,
            message_id=envelope.message_id,
            event_type=envelope.event_type,
            **kwargs,
        )


def _feed(user: MirroredUser, provider: str, resource: str) -> dict[str, Any]:
    """A fresh copy of what is known of (provider, resource); the caller stores it back."""
    known = user.resources.get(provider, {}).get(resource)
    if known is not None:
        return dict(known)
    return {
        "historical": None,
        "historical_announcements": 0,
        "days_created": 0,
        "days_updated": 0,
        "first_calendar_date": None,
        "last_calendar_date": None,
        "last_event_type": None,
        "last_event_at": None,
    }


def _touch(user: MirroredUser, event: Any, feed: dict[str, Any]) -> None:
    # Replace, never mutate in place: a copy handed out earlier must not change under
    # its holder.
    feed["last_event_type"] = event.event_type
    feed["last_event_at"] = event.timestamp
    user.resources = {
        **user.resources,
        event.provider: {**user.resources.get(event.provider, {}), event.resource: feed},
    }
    user.last_message_at = event.timestamp
