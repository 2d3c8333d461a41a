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
event time to order by, and the mirror does not guess. The lifecycle messages are the
exception: `user.deleted` and `user.deletion_undone` carry the time of the fact upstream,
so a stale one (older than the lifecycle fact the mirror holds) changes nothing.

The user's identifiers (its `client_user_id`, each connection's `external_user_id`) are
personal: events since version 2 hold them sealed with the user's own key in the mirror's
key store (the `PersonalDataVault` port), which `user.erased` destroys. Events stored by
version 1 hold them in clear; they load as they are (the log is not rewritten) and the
erasure counts them (`Erased.clear_events_left`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.errors import LedgerError
from healthledger.domain.personal_data import PersonalDataVault

CONNECTED = "connected"
ERROR = "error"

CREATED = "created"
UPDATED = "updated"

# The user's lifecycle upstream, as the lifecycle messages told it.
ACTIVE = "active"
DELETED = "deleted"  # deleted upstream, erased at `erasure_due_at` unless undone
ERASED = "erased"  # erased upstream: the mirror forgot the user's identifiers


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


@dataclass(frozen=True)
class DeletionAnnounced:
    """`user.deleted` (ours): deleted upstream at `deleted_at`, by the request
    `request_id`; erased at `erasure_due_at` unless the deletion is undone."""

    deleted_at: datetime
    erasure_due_at: datetime
    request_id: str


@dataclass(frozen=True)
class UndoAnnounced:
    """`user.deletion_undone` (ours): the deletion was undone upstream at `undone_at`."""

    undone_at: datetime
    request_id: str


@dataclass(frozen=True)
class ErasureAnnounced:
    """`user.erased` (ours): erased upstream at `erased_at`; `removed` is what the service
    says it removed."""

    erased_at: datetime
    removed: tuple[str, ...]


Announcement = (
    ConnectionCreated
    | ConnectionErrored
    | HistoricalDataAnnounced
    | DailyDataAnnounced
    | DeletionAnnounced
    | UndoAnnounced
    | ErasureAnnounced
)

# What the mirror itself removes when a user is erased upstream, in this order: the user's
# key in the mirror's key store (every sealed identifier in its events becomes unreadable)
# and its snapshots (which may hold identifiers a version 1 event recorded in clear).
MIRROR_ERASURE_REMOVES = ("mirror_user_key", "mirror_snapshots")


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
    # Version 2 keeps the identifiers sealed beside the clear ones of version 1, and the
    # user's lifecycle; a snapshot taken by version 1 is upcast (`upcast_v1_v2`).
    class_version = 2

    class Event(Aggregate.Event):
        # The webhook message that caused the event, and its type.
        message_id: str
        event_type: str

    class Created(Event, Aggregate.Created):
        """The first message about this user. Version 2 seals the client_user_id
        (`sealed_client_user_id`, `client_user_id` None); version 1 holds it in clear."""

        TOPIC = "healthledger:MirroredUser.Created.v1"
        class_version = 2
        PERSONAL_FIELDS = ("sealed_client_user_id",)
        CLEAR_PERSONAL_FIELDS = ("client_user_id",)
        team_id: UUID
        client_user_id: str | None
        sealed_client_user_id: str | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["sealed_client_user_id"] = None

    class ClientUserIdChanged(Event):
        """A message named the user with another client_user_id (the team changed it).
        Version 2 seals it, as `Created` does."""

        TOPIC = "healthledger:MirroredUser.ClientUserIdChanged.v1"
        class_version = 2
        PERSONAL_FIELDS = ("sealed_client_user_id",)
        CLEAR_PERSONAL_FIELDS = ("client_user_id",)
        client_user_id: str | None
        sealed_client_user_id: str | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["sealed_client_user_id"] = None

        def apply(self, user: MirroredUser) -> None:
            user.client_user_id = self.client_user_id
            user.sealed_client_user_id = self.sealed_client_user_id

    class ProviderConnected(Event):
        """Version 2 seals the provider's id for the user (`sealed_external_user_id`)."""

        TOPIC = "healthledger:MirroredUser.ProviderConnected.v1"
        class_version = 2
        PERSONAL_FIELDS = ("sealed_external_user_id",)
        CLEAR_PERSONAL_FIELDS = ("external_user_id",)
        provider: str
        name: str
        logo: str | None
        resource_availability: dict[str, Any]
        external_user_id: str | None
        sealed_external_user_id: str | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["sealed_external_user_id"] = None

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
                    "sealed_external_user_id": self.sealed_external_user_id,
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
                "sealed_external_user_id": None,
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

    class Deleted(Event):
        """`user.deleted`: deleted upstream at `deleted_at` by the request
        `upstream_request_id`, to be erased at `erasure_due_at` unless undone."""

        TOPIC = "healthledger:MirroredUser.Deleted.v1"
        deleted_at: datetime
        erasure_due_at: datetime
        upstream_request_id: str

        def apply(self, user: MirroredUser) -> None:
            user.status = DELETED
            user.deleted_at = self.deleted_at
            user.erasure_due_at = self.erasure_due_at
            user.lifecycle_at = self.deleted_at
            user.last_message_at = self.timestamp

    class DeletionUndone(Event):
        """`user.deletion_undone`: the deletion was undone upstream at `undone_at`."""

        TOPIC = "healthledger:MirroredUser.DeletionUndone.v1"
        undone_at: datetime
        upstream_request_id: str

        def apply(self, user: MirroredUser) -> None:
            user.status = ACTIVE
            user.deleted_at = None
            user.erasure_due_at = None
            user.lifecycle_at = self.undone_at
            user.last_message_at = self.timestamp

    class Erased(Event):
        """`user.erased`: erased upstream at `erased_at`. The mirror forgets the user's
        identifiers for good: `removed` is what it removed itself (`MIRROR_ERASURE_REMOVES`
        that there were), `upstream_removed` what the service says it removed, and
        `clear_events_left` how many of the user's events, recorded by version 1, still
        hold an identifier in clear (the log is not rewritten)."""

        TOPIC = "healthledger:MirroredUser.Erased.v1"
        erased_at: datetime
        upstream_removed: list[str]
        removed: list[str]
        clear_events_left: int

        def apply(self, user: MirroredUser) -> None:
            user.status = ERASED
            user.erased_at = self.erased_at
            user.lifecycle_at = self.erased_at
            user.client_user_id = None
            user.sealed_client_user_id = None
            user.connections = {
                slug: {**fields, "external_user_id": None, "sealed_external_user_id": None}
                for slug, fields in user.connections.items()
            }
            user.last_message_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        message_id: str,
        event_type: str,
        team_id: UUID,
        client_user_id: str | None,
        sealed_client_user_id: str | None,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `start` and
        on every replay."""
        self.team_id: UUID = team_id
        # In clear: what a version 1 event recorded (None since version 2).
        self.client_user_id: str | None = client_user_id
        self.sealed_client_user_id: str | None = sealed_client_user_id
        # Per provider: status, name, logo, resource_availability, external_user_id (a
        # version 1 event's, in clear), sealed_external_user_id, connected_at and
        # error_details.
        self.connections: dict[str, dict[str, Any]] = {}
        # Per provider, per resource: what has been announced (`_feed`).
        self.resources: dict[str, dict[str, dict[str, Any]]] = {}
        self.last_message_at: datetime = timestamp
        self.status: str = ACTIVE
        # Upstream times, from the lifecycle messages.
        self.deleted_at: datetime | None = None
        self.erasure_due_at: datetime | None = None
        self.erased_at: datetime | None = None
        # The upstream time of the latest lifecycle fact applied: an older one is stale.
        self.lifecycle_at: datetime | None = None

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """A snapshot taken by version 1: its identifiers are in clear, its user active."""
        state["sealed_client_user_id"] = None
        state["connections"] = {
            slug: {**fields, "sealed_external_user_id": None}
            for slug, fields in state["connections"].items()
        }
        state.update(
            status=ACTIVE, deleted_at=None, erasure_due_at=None, erased_at=None, lifecycle_at=None
        )

    @classmethod
    def start(cls, envelope: Envelope, now: datetime, vault: PersonalDataVault) -> MirroredUser:
        return cls(
            id=envelope.user_id,
            timestamp=now,
            message_id=envelope.message_id,
            event_type=envelope.event_type,
            team_id=envelope.team_id,
            client_user_id=None,
            sealed_client_user_id=_sealed(vault, envelope.user_id, envelope.client_user_id),
        )

    @property
    def may_be_snapshotted(self) -> bool:
        """Not once erased: erasure deletes the user's snapshots, and one taken after it
        would bring back what a version 1 event held in clear."""
        return self.status != ERASED

    def client_user_id_in(self, vault: PersonalDataVault) -> str | None:
        """The client_user_id: opened, or a version 1 event's; None once erased."""
        if self.sealed_client_user_id is not None:
            opened = vault.open(self.id, self.sealed_client_user_id)
            return None if opened is None else str(opened)
        return self.client_user_id

    def note_envelope(self, envelope: Envelope, now: datetime, vault: PersonalDataVault) -> None:
        """What every message says of the user itself: its team and client_user_id."""
        if envelope.team_id != self.team_id:
            # User ids are unique across teams: a verified message naming another team is
            # a broken contract, not something to mirror.
            raise TeamMismatch()
        changed = envelope.client_user_id
        if changed is not None and changed != self.client_user_id_in(vault):
            self._trigger(
                envelope,
                now,
                self.ClientUserIdChanged,
                client_user_id=None,
                sealed_client_user_id=_sealed(vault, self.id, changed),
            )

    def announce(
        self,
        envelope: Envelope,
        now: datetime,
        announcement: Announcement,
        vault: PersonalDataVault,
    ) -> bool:
        """Record what one message announced; False when it records nothing. Every known
        message records an event, even one that repeats the state (a second error of the
        same kind): it is a fact that the message arrived, and the event carries the
        message id. Only a stale lifecycle message records nothing (`is_stale`)."""
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
                    external_user_id=None,
                    sealed_external_user_id=_sealed(vault, self.id, announcement.external_user_id),
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
            case DeletionAnnounced():
                if self.is_stale(announcement.deleted_at):
                    return False
                self._trigger(
                    envelope,
                    now,
                    self.Deleted,
                    deleted_at=announcement.deleted_at,
                    erasure_due_at=announcement.erasure_due_at,
                    upstream_request_id=announcement.request_id,
                )
            case UndoAnnounced():
                if self.is_stale(announcement.undone_at):
                    return False
                self._trigger(
                    envelope,
                    now,
                    self.DeletionUndone,
                    undone_at=announcement.undone_at,
                    upstream_request_id=announcement.request_id,
                )
            case ErasureAnnounced():
                raise TypeError("an erasure is recorded by `erase`, which is told what it removed")
        return True

    def is_stale(self, upstream_at: datetime) -> bool:
        """Whether a lifecycle fact of `upstream_at` is older than the one the mirror
        holds (a retried `user.deleted` arriving after the `user.deletion_undone` that
        followed it), or comes after the erasure, which is final."""
        if self.status == ERASED:
            return True
        return self.lifecycle_at is not None and upstream_at < self.lifecycle_at

    def erase(
        self,
        envelope: Envelope,
        now: datetime,
        announcement: ErasureAnnounced,
        *,
        removed: list[str],
        clear_events_left: int,
    ) -> None:
        """Record the upstream erasure; the caller found what the mirror removes. Erasing
        twice records nothing the second time."""
        if self.status == ERASED:
            return
        self._trigger(
            envelope,
            now,
            self.Erased,
            erased_at=announcement.erased_at,
            upstream_removed=list(announcement.removed),
            removed=removed,
            clear_events_left=clear_events_left,
        )

    def _trigger(self, envelope: Envelope, now: datetime, event: type, **kwargs: Any) -> None:
        self.trigger_event(
            event,
            timestamp=now,
            message_id=envelope.message_id,
            event_type=envelope.event_type,
            **kwargs,
        )


def holds_clear_identifier(event: Any) -> bool:
    """Whether a stored mirror event holds a personal value in clear: a version 1 event's
    client_user_id or external_user_id (its class's `CLEAR_PERSONAL_FIELDS`; the sealed
    ones are its `PERSONAL_FIELDS`, as on every event of the service)."""
    clear = getattr(type(event), "CLEAR_PERSONAL_FIELDS", ())
    return any(getattr(event, name, None) is not None for name in clear)


def _sealed(vault: PersonalDataVault, user_id: UUID, value: str | None) -> str | None:
    return None if value is None else vault.seal(user_id, value)


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
