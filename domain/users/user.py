"""The user and the claim of its client_user_id: the two aggregates of the user lifecycle.

States: active -> pending_erasure (on delete, due after the grace period) -> erased.
Undo inside the grace period returns to active. Event bodies only apply state (they
run again on every replay); the rules live in the command methods before them.
"""

from __future__ import annotations

import functools
import re
import uuid
import zoneinfo
from datetime import date, datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import DEFAULT_ENVIRONMENT, CommandContext
from healthledger.domain.errors import (
    ClientUserIdInUse,
    GracePeriodEnded,
    UserNotDeleted,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.free_text import CONTROL_CHARACTERS, has_control_characters

ACTIVE = "active"
PENDING_ERASURE = "pending_erasure"
ERASED = "erased"

MANUAL_SOURCE = "manual"
CLIENT_USER_ID_MAX_LENGTH = 255

# The spec forbids personal data in client_user_id. We refuse what is clearly an e-mail
# address or a phone number; a bare run of digits stays allowed (teams use numeric ids).
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")
_PHONE_SHAPED = re.compile(r"^\+?[\d\s().\-/]+$")


# A deletion's ticket reference: an id in the caller's own records (a support ticket, a
# case number), stored in clear, so shaped like a request id: no spaces, no "@".
DELETION_TICKET = re.compile(r"^[A-Za-z0-9._:#/\-]{1,128}$")
# A deletion's reason: free text, sealed with the user's key.
DELETION_REASON_MAX_LENGTH = 500


def deletion_ticket_problem(value: str) -> str | None:
    """Why `value` may not be a deletion's ticket reference, or None when it may."""
    if not DELETION_TICKET.match(value):
        return (
            "the ticket reference must be 1 to 128 letters, digits or . _ : # / - "
            "(an id in your records, not a description)."
        )
    return None


def deletion_reason_problem(value: str) -> str | None:
    """Why `value` may not be a deletion's reason, or None when it may."""
    if not value.strip():
        return "the deletion reason must not be empty."
    if len(value) > DELETION_REASON_MAX_LENGTH:
        return f"the deletion reason must be at most {DELETION_REASON_MAX_LENGTH} characters."
    if has_control_characters(value):
        return f"the deletion reason {CONTROL_CHARACTERS}."
    return None


def client_user_id_problem(value: str) -> str | None:
    """Why `value` may not be a client_user_id, or None when it may."""
    if not value or not value.strip():
        return "client_user_id must not be empty."
    if len(value) > CLIENT_USER_ID_MAX_LENGTH:
        return f"client_user_id must be at most {CLIENT_USER_ID_MAX_LENGTH} characters."
    if has_control_characters(value):
        # Control and format characters (NUL above all) cannot be stored on PostgreSQL.
        return f"client_user_id {CONTROL_CHARACTERS}."
    # The e-mail pattern needs an "@": without one, its search would try every start.
    if "@" in value and _EMAIL.search(value):
        return "client_user_id must not contain personal data such as an e-mail address."
    if _PHONE_SHAPED.match(value):
        digits = sum(ch.isdigit() for ch in value)
        separated = value.startswith("+") or any(ch in value for ch in " ().-/")
        if 7 <= digits <= 15 and separated:
            return "client_user_id must not contain personal data such as a phone number."
    return None


# Why an undo of a deletion was refused, by the error the caller got: recorded as
# User.DeletionUndoRefused. An undo of an active user (nothing to undo) is not recorded:
# it concerns no deletion, and would let any caller grow a live user's stream.
UNDO_REFUSALS: dict[type[Exception], str] = {
    GracePeriodEnded: "grace_period_ended",
    ClientUserIdInUse: "client_user_id_in_use",
    UserNotFound: "erased",
}

# A sourced setting: (value, source slug, when it was set). A snapshot stores it as a
# JSON array, so a user restored from one holds a list of the same three values.
Sourced = tuple[str, str, datetime]


class User(Audited):
    """An end user of a team. Personal values are held only sealed (per-user key)."""

    TOPIC = "healthledger:User"
    USER_STREAM = UserStream(
        "user",
        owner="originator_id",
        read_models=("read_model:users", "read_model:pending_erasures"),
    )

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        """Version 4 seals the fallback time zone with the user's own key
        (`sealed_fallback_time_zone`; `fallback_time_zone` is None): which zone a person
        lives in is personal, and goes with the erasure. Events stored before hold it in
        clear and load with no sealed value; the service's start redacts them into this
        version (ADR 0028: `old_versions.SEALED_IN_PLACE`).
        Version 3 seals the client_user_id with the user's own key
        (`sealed_client_user_id`; `client_user_id` is None) and names the claim the user
        holds (`claim_id`, derived from the team's digest of the value): the value is in
        clear nowhere in the log. Events stored before keep the value in clear; they
        load with no sealed value and the claim of their time (uuid5 of team and value).
        Version 2 records the environment of the key that created the user (where its
        webhooks go); version 1 events, stored before, load with None, and the users
        read model holds what migration 0002 found for them."""

        TOPIC = "healthledger:User.Created.v1"
        ANNOUNCES = ()
        PERSONAL_FIELDS = (
            "sealed_birth_date",
            "sealed_client_user_id",
            "sealed_fallback_time_zone",
        )
        class_version = 4
        team_id: UUID
        client_user_id: str | None
        # None from version 4; in clear in events stored before (until redacted).
        fallback_time_zone: str | None
        sealed_birth_date: str | None
        ingestion_start: date | None
        ingestion_end: date | None
        environment: str | None
        sealed_client_user_id: str | None
        claim_id: UUID
        sealed_fallback_time_zone: str | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["environment"] = None

        @staticmethod
        def upcast_v2_v3(state: dict[str, Any]) -> None:
            state["sealed_client_user_id"] = None
            state["claim_id"] = ClientUserIdClaim.id_for(state["team_id"], state["client_user_id"])

        @staticmethod
        def upcast_v3_v4(state: dict[str, Any]) -> None:
            state["sealed_fallback_time_zone"] = None

    class SettingsChanged(Event):
        """Fallbacks or ingestion bounds changed; `changes` holds only the changed keys.
        The time zone is `sealed_fallback_time_zone`, sealed with the user's key (None:
        removed). Events stored before held it in clear as `fallback_time_zone`; the
        service's start redacts them into the sealed key (ADR 0028), and they load as
        they are until then."""

        TOPIC = "healthledger:User.SettingsChanged.v1"
        ANNOUNCES = ()
        PERSONAL_FIELDS = ("sealed_birth_date", "sealed_fallback_time_zone")
        changes: dict[str, Any]

        def apply(self, user: User) -> None:
            for key, value in self.changes.items():
                if key == "sealed_fallback_time_zone":
                    user.sealed_fallback_time_zone = (
                        None if value is None else (value, MANUAL_SOURCE, self.timestamp)
                    )
                    user.fallback_time_zone = None
                elif key == "fallback_time_zone":
                    # Recorded in clear, before the zone was sealed (not redacted yet).
                    user.fallback_time_zone = (
                        None if value is None else (value, MANUAL_SOURCE, self.timestamp)
                    )
                    user.sealed_fallback_time_zone = None
                elif key == "sealed_birth_date":
                    user.sealed_birth_date = (
                        None if value is None else (value, MANUAL_SOURCE, self.timestamp)
                    )
                elif key in ("ingestion_start", "ingestion_end"):
                    setattr(user, key, value)

    class ClientUserIdChanged(Event):
        """Version 2 seals the new value with the user's key and names the claim the user
        moved to (`new_claim_id`); both clear values are None. Version 1 events, stored
        before, hold both values in clear and load with no sealed value and no claim id:
        the claim of their time is the one named by the team and the clear value. The
        service's start redacts them into version 2, that claim named (ADR 0054:
        `old_versions.SEALED_IN_PLACE`)."""

        TOPIC = "healthledger:User.ClientUserIdChanged.v1"
        ANNOUNCES = ()
        PERSONAL_FIELDS = ("sealed_new_client_user_id",)
        class_version = 2
        old_client_user_id: str | None
        new_client_user_id: str | None
        sealed_new_client_user_id: str | None
        new_claim_id: UUID | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["sealed_new_client_user_id"] = None
            state["new_claim_id"] = None

        def apply(self, user: User) -> None:
            user.client_user_id = self.new_client_user_id
            user.sealed_client_user_id = self.sealed_new_client_user_id
            if self.new_claim_id is not None:
                user.claim_id = self.new_claim_id
            else:
                assert self.new_client_user_id is not None, "a version 1 event holds it"
                user.claim_id = ClientUserIdClaim.id_for(user.team_id, self.new_client_user_id)

    class DemographicsRecorded(Event):
        """The whole demographics object, sealed; `fields` names what this change set."""

        TOPIC = "healthledger:User.DemographicsRecorded.v1"
        ANNOUNCES = ()
        PERSONAL_FIELDS = ("sealed_demographics",)
        sealed_demographics: str
        fields: list[str]

        def apply(self, user: User) -> None:
            user.sealed_demographics = self.sealed_demographics
            user.demographics_updated_at = self.timestamp

    class Deleted(Event):
        """The deletion asked for: the grace period ends at `erasure_due_at`. Version 2
        records why, if the caller said: `sealed_reason` (its free text, sealed with the
        user's key: a reason may name the person or its health, so it goes with the
        erasure) and `ticket` (a reference into the caller's own records, in clear: shaped
        like a request id, it cannot hold an e-mail address or a sentence, and it must
        outlive the erasure to be of use to an auditor). Version 1 events, stored before,
        load with neither."""

        TOPIC = "healthledger:User.Deleted.v1"
        ANNOUNCES = ("user.deleted",)
        PERSONAL_FIELDS = ("sealed_reason",)
        # The audit shows neither while None: a deletion that said no reason reads as
        # version 1 did.
        AUDIT_OMITS_NONE = ("sealed_reason", "ticket")
        class_version = 2
        erasure_due_at: datetime
        sealed_reason: str | None
        ticket: str | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["sealed_reason"] = None
            state["ticket"] = None

        def apply(self, user: User) -> None:
            user.status = PENDING_ERASURE
            user.deleted_at = self.timestamp
            user.erasure_due_at = self.erasure_due_at

    class DeletionUndone(Event):
        TOPIC = "healthledger:User.DeletionUndone.v1"
        ANNOUNCES = ("user.deletion_undone",)

        def apply(self, user: User) -> None:
            user.status = ACTIVE
            user.deleted_at = None
            user.erasure_due_at = None

    class DeletionUndoRefused(Event):
        """An undo of this user's deletion was asked for and refused: the audit trail of a
        deletion shows every try to stop it. `reason` is one of UNDO_REFUSALS' values,
        never a value of the caller's. It changes no state."""

        TOPIC = "healthledger:User.DeletionUndoRefused.v1"
        ANNOUNCES = ()
        reason: str

    class Erased(Event):
        """Personal data destroyed for good, for the audit: `checked` holds, for every
        place an erasure empties (lifecycle.ERASURE_REMOVES, in its order), the rows
        found there and deleted, counted in the transaction that records this event and
        checked to be none left after it (else nothing is recorded); `removed` lists the
        places that had rows. Version 1 events, recorded before the counts, load with
        `checked` empty: their `removed` is what the service asserted, unchecked."""

        TOPIC = "healthledger:User.Erased.v1"
        ANNOUNCES = ("user.erased",)
        SHREDS_KEY = True
        class_version = 2
        removed: list[str]
        checked: dict[str, int]

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["checked"] = {}

        def apply(self, user: User) -> None:
            user.status = ERASED
            user.erased_at = self.timestamp
            user.sealed_birth_date = None
            user.sealed_demographics = None
            user.sealed_fallback_time_zone = None
            user.fallback_time_zone = None

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        client_user_id: str | None,
        fallback_time_zone: str | None,
        sealed_birth_date: str | None,
        ingestion_start: date | None,
        ingestion_end: date | None,
        environment: str | None,
        sealed_client_user_id: str | None,
        claim_id: UUID,
        sealed_fallback_time_zone: str | None,
    ) -> None:
        """The state of a new user, from its Created event's fields: eventsourcing calls
        this with them at `register` and again on every replay of that event (the id,
        actor and request id are the event's, taken because every field is passed).
        Attributes are set in the order snapshots have always stored them, the ones
        added since at the end (see `upcast_v1_v2`). The environment is the users read
        model's to keep (the webhook dispatcher reads it there), not the aggregate's.
        The client_user_id is held in clear only if it was recorded so (before version
        3 of Created), else sealed; `claim_id` names the claim the user holds. So is the
        fallback time zone (in clear only from an event of before version 4 that the
        start has not redacted yet; `fallback_time_zone` is None once sealed)."""
        del environment
        self.team_id: UUID = team_id
        self.client_user_id: str | None = client_user_id
        self.status: str = ACTIVE
        self.fallback_time_zone: Sourced | None = (
            None if fallback_time_zone is None else (fallback_time_zone, MANUAL_SOURCE, timestamp)
        )
        self.sealed_birth_date: Sourced | None = (
            None if sealed_birth_date is None else (sealed_birth_date, MANUAL_SOURCE, timestamp)
        )
        self.ingestion_start: date | None = ingestion_start
        self.ingestion_end: date | None = ingestion_end
        self.sealed_demographics: str | None = None
        self.demographics_updated_at: datetime | None = None
        self.deleted_at: datetime | None = None
        self.erasure_due_at: datetime | None = None
        self.erased_at: datetime | None = None
        self.sealed_client_user_id: str | None = sealed_client_user_id
        self.claim_id: UUID = claim_id
        self.sealed_fallback_time_zone: Sourced | None = (
            None
            if sealed_fallback_time_zone is None
            else (sealed_fallback_time_zone, MANUAL_SOURCE, timestamp)
        )

    # Version 2 of the attribute dict (what a snapshot stores) adds the sealed
    # client_user_id and the claim id; a snapshot taken before loads with the claim of
    # its clear value. Version 3 adds the sealed time zone (revision 0042 deleted the
    # users' snapshots taken before, which held the zone in clear).
    class_version = 3

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["sealed_client_user_id"] = None
        state["claim_id"] = ClientUserIdClaim.id_for(state["team_id"], state["client_user_id"])

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        state["sealed_fallback_time_zone"] = None

    @classmethod
    def register(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        user_id: UUID,
        team_id: UUID,
        sealed_client_user_id: str,
        claim_id: UUID,
        sealed_fallback_time_zone: str | None,
        sealed_birth_date: str | None,
        ingestion_start: date | None,
        ingestion_end: date | None,
    ) -> User:
        """A new user: its client_user_id (and its fallbacks) sealed with its own key,
        and the id of the claim it takes (see domain/users/client_user_ids.py)."""
        return cls.new(
            ctx,
            now,
            id=user_id,
            team_id=team_id,
            client_user_id=None,
            fallback_time_zone=None,
            sealed_birth_date=sealed_birth_date,
            ingestion_start=ingestion_start,
            ingestion_end=ingestion_end,
            environment=ctx.environment or DEFAULT_ENVIRONMENT,
            sealed_client_user_id=sealed_client_user_id,
            claim_id=claim_id,
            sealed_fallback_time_zone=sealed_fallback_time_zone,
        )

    @property
    def may_be_snapshotted(self) -> bool:
        """Not once erased: erasure deletes the user's snapshots, and a snapshot taken
        after it (snapshots follow the save) would bring its state back."""
        return self.status != ERASED

    # -- rules ------------------------------------------------------------------------

    def require_live(self) -> None:
        """Commands and reads on a user need it active."""
        if self.status == ERASED:
            raise UserNotFound()
        if self.status == PENDING_ERASURE:
            raise UserScheduledForDeletion()

    # -- commands ---------------------------------------------------------------------

    def change_settings(self, ctx: CommandContext, now: datetime, changes: dict[str, Any]) -> None:
        self.require_live()
        self.record(ctx, now, self.SettingsChanged, changes=changes)

    def change_client_user_id(
        self, ctx: CommandContext, now: datetime, sealed_new_value: str, new_claim_id: UUID
    ) -> None:
        """Move to another client_user_id, sealed with the user's key, held by the claim
        `new_claim_id` (the caller moved the claims). Neither value is recorded in clear."""
        self.require_live()
        self.record(
            ctx,
            now,
            self.ClientUserIdChanged,
            old_client_user_id=None,
            new_client_user_id=None,
            sealed_new_client_user_id=sealed_new_value,
            new_claim_id=new_claim_id,
        )

    def record_demographics(
        self, ctx: CommandContext, now: datetime, sealed: str, fields: list[str]
    ) -> None:
        self.require_live()
        self.record(ctx, now, self.DemographicsRecorded, sealed_demographics=sealed, fields=fields)

    def delete(
        self,
        ctx: CommandContext,
        now: datetime,
        erasure_due_at: datetime,
        *,
        sealed_reason: str | None = None,
        ticket: str | None = None,
    ) -> None:
        """Start the grace period; `sealed_reason` (sealed with the user's key) and
        `ticket` (checked: `deletion_ticket_problem`) say why, if the caller said."""
        self.require_live()
        if ticket is not None and (problem := deletion_ticket_problem(ticket)) is not None:
            raise ValueError(problem)
        self.record(
            ctx,
            now,
            self.Deleted,
            erasure_due_at=erasure_due_at,
            sealed_reason=sealed_reason,
            ticket=ticket,
        )

    def undo_deletion(self, ctx: CommandContext, now: datetime) -> None:
        if self.status == ERASED:
            raise UserNotFound()
        if self.status == ACTIVE:
            raise UserNotDeleted()
        if self.grace_period_over(now):
            raise GracePeriodEnded()
        self.record(ctx, now, self.DeletionUndone)

    def refuse_undo(self, ctx: CommandContext, now: datetime, reason: str) -> None:
        """Record that an undo of the deletion was refused (the caller found why)."""
        if reason not in UNDO_REFUSALS.values():
            raise ValueError(f"not an undo refusal reason: {reason}")
        self.record(ctx, now, self.DeletionUndoRefused, reason=reason)

    def grace_period_over(self, now: datetime) -> bool:
        return self.erasure_due_at is not None and now >= self.erasure_due_at

    def is_due_for_erasure(self, now: datetime) -> bool:
        return self.status == PENDING_ERASURE and self.grace_period_over(now)

    def erase(self, ctx: CommandContext, now: datetime, checked: dict[str, int]) -> None:
        """Only a user whose grace period has ended can be erased (callers check first).
        `checked`: the rows each place holds, which the erasure deletes (and the
        recording transaction counts again: `Erased`)."""
        if not self.is_due_for_erasure(now):
            raise UserNotDeleted()
        self.record(
            ctx,
            now,
            self.Erased,
            removed=[place for place, rows in checked.items() if rows],
            checked=dict(checked),
        )


# Fixed namespaces: claim ids must never change, or uniqueness would be lost. The first
# names claims made before digests (by team and clear value), the second those named by
# the team's keyed digest of the value (domain/users/client_user_ids.py).
CLAIM_NAMESPACE = uuid.UUID("6f1c7a52-4c1e-5b7e-9a43-2d8e0b1f6c11")
DIGEST_CLAIM_NAMESPACE = uuid.UUID("b3e8f0a4-5d2c-5e71-8c69-0f4a7d13e952")


class ClientUserIdClaim(Audited):
    """Who holds a client_user_id within a team.

    Its id is derived from the team's keyed digest of the value (before digests, from
    the team and the clear value), so two concurrent creates race on the event store's
    (originator_id, version) uniqueness: the loser gets a conflict, never a duplicate.
    Released at deletion, claimed again by a new user or an undo.
    """

    TOPIC = "healthledger:ClientUserIdClaim"
    USER_STREAM = UserStream("claim")

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        """Version 2 names the value by the team's keyed digest (`digest`), never in
        clear (`client_user_id` is None). Version 1 events, stored before, hold the value
        in clear and load with no digest; the service's start redacts them into version 2
        (ADR 0054), their stream id (derived from the team and the clear value) kept."""

        TOPIC = "healthledger:ClientUserIdClaim.Created.v1"
        ANNOUNCES = ()
        class_version = 2
        team_id: UUID
        client_user_id: str | None
        user_id: UUID
        digest: str | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["digest"] = None

    class Claimed(Event):
        TOPIC = "healthledger:ClientUserIdClaim.Claimed.v1"
        ANNOUNCES = ()
        # A new user, an undo or a change of client_user_id takes a released claim.
        HANDS_STREAM_TO = "user_id"
        user_id: UUID

        def apply(self, claim: ClientUserIdClaim) -> None:
            claim.holder = self.user_id

    class Released(Event):
        TOPIC = "healthledger:ClientUserIdClaim.Released.v1"
        ANNOUNCES = ()
        user_id: UUID

        def apply(self, claim: ClientUserIdClaim) -> None:
            claim.holder = None

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        client_user_id: str | None,
        user_id: UUID,
        digest: str | None,
    ) -> None:
        self.team_id: UUID = team_id
        # In clear only in a claim made before digests; else None.
        self.client_user_id: str | None = client_user_id
        # The user id, or None when released.
        self.holder: UUID | None = user_id
        self.digest: str | None = digest

    # Version 2 of the attribute dict (what a snapshot stores) adds the digest.
    class_version = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["digest"] = None

    @staticmethod
    def id_for(team_id: UUID, client_user_id: str) -> UUID:
        """The id of a claim made before digests: where an old claim of a value is."""
        return uuid.uuid5(CLAIM_NAMESPACE, f"{team_id}\x1f{client_user_id}")

    @staticmethod
    def id_for_digest(digest: str) -> UUID:
        """The id of the claim of a value, by the team's digest of it (hex)."""
        return uuid.uuid5(DIGEST_CLAIM_NAMESPACE, digest)

    @classmethod
    def start(
        cls, ctx: CommandContext, now: datetime, team_id: UUID, digest: str, user_id: UUID
    ) -> ClientUserIdClaim:
        """A new claim of the value the team's `digest` names, held by `user_id`."""
        return cls.new(
            ctx,
            now,
            id=cls.id_for_digest(digest),
            team_id=team_id,
            client_user_id=None,
            user_id=user_id,
            digest=digest,
        )

    def claim(self, ctx: CommandContext, now: datetime, user_id: UUID) -> None:
        if self.holder == user_id:
            return
        if self.holder is not None:
            raise ClientUserIdInUse()
        self.record(ctx, now, self.Claimed, user_id=user_id)

    def release(self, ctx: CommandContext, now: datetime, user_id: UUID) -> None:
        if self.holder != user_id:
            return
        self.record(ctx, now, self.Released, user_id=user_id)


def time_zone_problem(value: str) -> str | None:
    """Why `value` is not an IANA time zone id, or None when it is one."""
    if value not in _iana_zones():
        # The value is not repeated: errors never echo what a caller sent.
        return "fallback_time_zone must be an IANA time zone identifier (e.g. Europe/Berlin)."
    return None


def ingestion_bounds_problem(start: date | None, end: date | None) -> str | None:
    if start is not None and end is not None and start > end:
        return "ingestion_start must not be after ingestion_end."
    return None


def birth_date_problem(value: date, today: date) -> str | None:
    if value > today or value.year < 1900:
        return "fallback_birth_date must be a real birth date, not in the future."
    return None


@functools.cache
def _iana_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())
