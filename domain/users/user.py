"""The user and the claim of its client_user_id: the two aggregates of the user lifecycle.

States: active -> pending_erasure (on delete, due after the grace period) -> erased.
Undo inside the grace period returns to active. Event bodies only apply state (they
run again on every replay); the rules live in the command methods before them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import unicodedata
import uuid
import zoneinfo
from collections.abc import Callable
from dataclasses import MISSING
from datetime import date, datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, DomainEvent
from eventsourcing.utils import get_topic, resolve_topic
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ClientUserIdInUse,
    GracePeriodEnded,
    UserNotDeleted,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.identifiers import uuid_from_int

ACTIVE = "active"
PENDING_ERASURE = "pending_erasure"
ERASED = "erased"

MANUAL_SOURCE = "manual"
CLIENT_USER_ID_MAX_LENGTH = 255

# The spec forbids personal data in client_user_id. We refuse what is clearly an e-mail
# address or a phone number; a bare run of digits stays allowed (teams use numeric ids).
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")
_PHONE_SHAPED = re.compile(r"^\+?[\d\s().\-/]+$")


def _phone_shaped(value: str) -> bool:
    """`_PHONE_SHAPED.match(value)`, for an ASCII value without the regular expression
    engine (a few µs on a command's cold caches): without its optional "+", the value is
    not empty and every character is one the pattern's class takes (`\\d` and `\\s` of
    ASCII: the digits and Python's ASCII whitespace), so stripping them all leaves
    nothing. A test holds the two equal."""
    if not value.isascii():
        return _PHONE_SHAPED.match(value) is not None
    rest = value[1:] if value[0] == "+" else value
    return bool(rest) and not rest.strip(_PHONE_ASCII)


# The ASCII characters `[\d\s().\-/]` matches (`str.isspace` of ASCII: "\t\n\x0b\x0c\r",
# "\x1c" to "\x1f" and the space).
_PHONE_ASCII = "0123456789().-/ \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"


def client_user_id_problem(value: str) -> str | None:
    """Why `value` may not be a client_user_id, or None when it may."""
    if not value or not value.strip():
        return "client_user_id must not be empty."
    if len(value) > CLIENT_USER_ID_MAX_LENGTH:
        return f"client_user_id must be at most {CLIENT_USER_ID_MAX_LENGTH} characters."
    # isprintable() is False for every "Other" character (and for separators but the
    # ASCII space): one C call clears the usual id; the rest are looked at one by one.
    if not value.isprintable() and any(unicodedata.category(ch)[0] == "C" for ch in value):
        # Control and format characters (NUL above all) cannot be stored on PostgreSQL.
        return "client_user_id must not contain control characters."
    # The e-mail pattern needs an "@": without one, its search would try every start.
    if "@" in value and _EMAIL.search(value):
        return "client_user_id must not contain personal data such as an e-mail address."
    # The phone pattern cannot match from a letter: most ids are not looked at twice.
    if not value[0].isalpha() and _phone_shaped(value):
        digits = sum(ch.isdigit() for ch in value)
        separated = value.startswith("+") or any(ch in value for ch in " ().-/")
        if 7 <= digits <= 15 and separated:
            return "client_user_id must not contain personal data such as a phone number."
    return None


class CheapCopy:
    """The aggregate cache hands out deep copies (so a failed command cannot corrupt the
    cached aggregate); `copy.deepcopy` walks every datetime and UUID, which cost more than
    the database read it saves. Our aggregates hold only immutable values, and their event
    bodies replace attributes rather than mutate them in place, so a shallow copy with its
    own pending-event list is a deep copy. The shallow copy is what `copy.copy` does for a
    plain object (a new instance, the same attribute dict), without its generic
    `__reduce_ex__` round trip, which took three quarters of the time (every command loads
    one or two aggregates from the cache)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        cls = type(self)
        clone = cls.__new__(cls)
        clone.__dict__.update(self.__dict__)
        clone._pending_events = list(self._pending_events)  # type: ignore[attr-defined]
        return clone


def event_builder(event_class: type) -> Callable[[dict[str, Any]], Any]:
    """What makes an event of `event_class` from a dict of its fields: for an event whose
    dataclass `__init__` only sets its fields, a function that sets them in one step
    (`_build_without_init`); for any other, its class called with them."""
    builder = _BUILDERS.get(event_class)
    if builder is None:
        builder = _BUILDERS[event_class] = _build_without_init(event_class)
    return builder


_BUILDERS: dict[type, Callable[[dict[str, Any]], Any]] = {}


def _build_without_init(event_class: type) -> Callable[[dict[str, Any]], Any]:
    """A frozen dataclass's `__init__` sets each field through `object.__setattr__` (a
    call per field) and then runs `__post_init__`: a user's Created event (twelve
    fields) cost about 24,000 instructions, more than half of founding the user. The
    function made here takes a dict of the same fields (all required, no others) and
    fills the new event's `__dict__` with one `update`, in field order, as `__init__`
    would (the stored JSON follows that order). A dict, not keywords: a call's keywords
    are matched to the parameters by name, one comparison of strings per keyword and
    parameter when they go to a `**kwargs`. An event with defaults, fields outside
    `__init__`, slots or a `__post_init__` of its own (eventsourcing's checks that the id
    is a UUID, which the caller checks) keeps its class's `__init__`. A test holds the
    two equal, order of attributes included. The source is made from field names, which
    are identifiers, as `dataclasses` makes `__init__`."""
    fields = dataclasses.fields(event_class)  # type: ignore[arg-type]
    if (
        "__slots__" in vars(event_class)
        or getattr(event_class, "__post_init__", None) is not DomainEvent.__post_init__
        or any(
            not f.init or f.default is not MISSING or f.default_factory is not MISSING
            for f in fields
        )
    ):

        def construct(values: dict[str, Any]) -> Any:
            return event_class(**values)

        return construct
    names = [f.name for f in fields]
    source = (
        "def build(values):\n"
        f"    if len(values) != {len(names)}:\n"
        "        raise TypeError(f'{event_class.__qualname__} has the fields {names},"
        " not {sorted(values)}')\n"
        "    try:\n"
        f"        ordered = {{{', '.join(f'{n!r}: values[{n!r}]' for n in names)}}}\n"
        "    except KeyError as missing:\n"
        "        raise TypeError(f'{event_class.__qualname__} needs {missing}') from None\n"
        "    event = new(event_class)\n"
        "    event.__dict__.update(ordered)\n"
        "    return event\n"
    )
    namespace: dict[str, Any] = {"new": object.__new__, "event_class": event_class, "names": names}
    exec(source, namespace)
    build: Callable[[dict[str, Any]], Any] = namespace["build"]
    return build


class FoundedDirectly:
    """For an aggregate with no `__init__` of its own (state comes from its Created
    event's `apply`): eventsourcing's `_create`, for an id always given, without its
    generic keyword filtering. Its three dict comprehensions over every event field (which
    id arguments? which `__base_init__` and `__init__` parameters?) were a fifth of a
    create's Python work. The Created event's `mutate` comes from `Founding`. A test holds
    the aggregates and events made this way equal to eventsourcing's own."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__init__ is not object.__init__:
            raise TypeError(f"{cls.__name__} has an __init__: FoundedDirectly would skip it")

    @classmethod
    def _create(cls, event_class: Any, *, id: UUID, **kwargs: Any) -> Any:
        """eventsourcing's signature, for callers of it: `_found`."""
        return cls._found(event_class, id, kwargs)

    @classmethod
    def _found(cls, event_class: Any, id: UUID, fields: dict[str, Any]) -> Any:
        """The aggregate founded by an `event_class` event with `fields` (a dict the
        caller gives up: the event's id, version and topic are added to it)."""
        if not isinstance(id, UUID):  # what the event's __post_init__ checks
            raise TypeError(f"{event_class} was initialized with a non-UUID originator_id")
        fields["originator_topic"] = get_topic(cls)
        fields["originator_id"] = id
        fields["originator_version"] = cls.INITIAL_VERSION  # type: ignore[attr-defined]
        if fields.get("timestamp") is None:
            fields["timestamp"] = event_class.create_timestamp()
        event = event_builder(event_class)(fields)
        # `Founding.mutate`, with the class at hand (no topic to resolve).
        aggregate = cls.__new__(cls)
        aggregate.__base_init__(id, event.originator_version, event.timestamp)
        event.apply(aggregate)
        aggregate._pending_events.append(event)
        return aggregate


class Founding:
    """The Created event of a `FoundedDirectly` aggregate: `CanInitAggregate.mutate`
    without the keyword filtering (the aggregate's `__init__` is object's, a no-op)."""

    def mutate(self, aggregate: Any) -> Any:
        assert aggregate is None
        event: Any = self
        cls = resolve_topic(event.originator_topic)
        founded = cls.__new__(cls)
        founded.__base_init__(event.originator_id, event.originator_version, event.timestamp)
        event.apply(founded)
        return founded


class User(FoundedDirectly, CheapCopy, Aggregate):
    """An end user of a team. Personal values are held only sealed (per-user key)."""

    TOPIC = "healthledger:User"

    class Event(Aggregate.Event):
        actor: str
        request_id: str

    class Created(Founding, Event, Aggregate.Created):
        TOPIC = "healthledger:User.Created.v1"
        PERSONAL_FIELDS = ("sealed_birth_date",)
        team_id: UUID
        client_user_id: str
        fallback_time_zone: str | None
        sealed_birth_date: str | None
        ingestion_start: date | None
        ingestion_end: date | None

        def apply(self, user: User) -> None:
            user.team_id = self.team_id
            user.client_user_id = self.client_user_id
            user.status = ACTIVE
            user.fallback_time_zone = None
            user.sealed_birth_date = None
            if self.fallback_time_zone is not None:
                user.fallback_time_zone = (self.fallback_time_zone, MANUAL_SOURCE, self.timestamp)
            if self.sealed_birth_date is not None:
                user.sealed_birth_date = (self.sealed_birth_date, MANUAL_SOURCE, self.timestamp)
            user.ingestion_start = self.ingestion_start
            user.ingestion_end = self.ingestion_end
            user.sealed_demographics = None
            user.demographics_updated_at = None
            user.deleted_at = None
            user.erasure_due_at = None
            user.erased_at = None

    class SettingsChanged(Event):
        """Fallbacks or ingestion bounds changed; `changes` holds only the changed keys."""

        TOPIC = "healthledger:User.SettingsChanged.v1"
        PERSONAL_FIELDS = ("sealed_birth_date",)
        changes: dict[str, Any]

        def apply(self, user: User) -> None:
            for key, value in self.changes.items():
                if key == "fallback_time_zone":
                    user.fallback_time_zone = (
                        None if value is None else (value, MANUAL_SOURCE, self.timestamp)
                    )
                elif key == "sealed_birth_date":
                    user.sealed_birth_date = (
                        None if value is None else (value, MANUAL_SOURCE, self.timestamp)
                    )
                elif key in ("ingestion_start", "ingestion_end"):
                    setattr(user, key, value)

    class ClientUserIdChanged(Event):
        TOPIC = "healthledger:User.ClientUserIdChanged.v1"
        old_client_user_id: str
        new_client_user_id: str

        def apply(self, user: User) -> None:
            user.client_user_id = self.new_client_user_id

    class DemographicsRecorded(Event):
        """The whole demographics object, sealed; `fields` names what this change set."""

        TOPIC = "healthledger:User.DemographicsRecorded.v1"
        PERSONAL_FIELDS = ("sealed_demographics",)
        sealed_demographics: str
        fields: list[str]

        def apply(self, user: User) -> None:
            user.sealed_demographics = self.sealed_demographics
            user.demographics_updated_at = self.timestamp

    class Deleted(Event):
        TOPIC = "healthledger:User.Deleted.v1"
        erasure_due_at: datetime

        def apply(self, user: User) -> None:
            user.status = PENDING_ERASURE
            user.deleted_at = self.timestamp
            user.erasure_due_at = self.erasure_due_at

    class DeletionUndone(Event):
        TOPIC = "healthledger:User.DeletionUndone.v1"

        def apply(self, user: User) -> None:
            user.status = ACTIVE
            user.deleted_at = None
            user.erasure_due_at = None

    class Erased(Event):
        """Personal data destroyed for good; `removed` says what went, for the audit."""

        TOPIC = "healthledger:User.Erased.v1"
        removed: list[str]

        def apply(self, user: User) -> None:
            user.status = ERASED
            user.erased_at = self.timestamp
            user.sealed_birth_date = None
            user.sealed_demographics = None

    # State (set by Created.apply; class annotations would become __init__ parameters):
    # team_id, client_user_id, status, fallback_time_zone and sealed_birth_date as
    # (value, source_slug, updated_at) or None, ingestion_start, ingestion_end,
    # sealed_demographics, demographics_updated_at, deleted_at, erasure_due_at, erased_at.

    @classmethod
    def register(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        user_id: UUID,
        team_id: UUID,
        client_user_id: str,
        fallback_time_zone: str | None,
        sealed_birth_date: str | None,
        ingestion_start: date | None,
        ingestion_end: date | None,
    ) -> User:
        return cls._found(
            cls.Created,
            user_id,
            {
                "timestamp": now,
                "actor": ctx.actor,
                "request_id": ctx.request_id,
                "team_id": team_id,
                "client_user_id": client_user_id,
                "fallback_time_zone": fallback_time_zone,
                "sealed_birth_date": sealed_birth_date,
                "ingestion_start": ingestion_start,
                "ingestion_end": ingestion_end,
            },
        )

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
        self.trigger_event(
            self.SettingsChanged,
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            changes=changes,
        )

    def change_client_user_id(self, ctx: CommandContext, now: datetime, new_value: str) -> None:
        self.require_live()
        self.trigger_event(
            self.ClientUserIdChanged,
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            old_client_user_id=self.client_user_id,
            new_client_user_id=new_value,
        )

    def record_demographics(
        self, ctx: CommandContext, now: datetime, sealed: str, fields: list[str]
    ) -> None:
        self.require_live()
        self.trigger_event(
            self.DemographicsRecorded,
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            sealed_demographics=sealed,
            fields=fields,
        )

    def delete(self, ctx: CommandContext, now: datetime, erasure_due_at: datetime) -> None:
        self.require_live()
        self.trigger_event(
            self.Deleted,
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            erasure_due_at=erasure_due_at,
        )

    def undo_deletion(self, ctx: CommandContext, now: datetime) -> None:
        if self.status == ERASED:
            raise UserNotFound()
        if self.status == ACTIVE:
            raise UserNotDeleted()
        if self.grace_period_over(now):
            raise GracePeriodEnded()
        self.trigger_event(
            self.DeletionUndone, timestamp=now, actor=ctx.actor, request_id=ctx.request_id
        )

    def grace_period_over(self, now: datetime) -> bool:
        return self.erasure_due_at is not None and now >= self.erasure_due_at

    def is_due_for_erasure(self, now: datetime) -> bool:
        return self.status == PENDING_ERASURE and self.grace_period_over(now)

    def erase(self, ctx: CommandContext, now: datetime, removed: list[str]) -> None:
        """Only a user whose grace period has ended can be erased (callers check first)."""
        if not self.is_due_for_erasure(now):
            raise UserNotDeleted()
        self.trigger_event(
            self.Erased,
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            removed=removed,
        )


# A fixed namespace: claim ids must never change, or uniqueness would be lost.
CLAIM_NAMESPACE = uuid.UUID("6f1c7a52-4c1e-5b7e-9a43-2d8e0b1f6c11")
_CLAIM_NAMESPACE_BYTES = CLAIM_NAMESPACE.bytes
# A name-based SHA-1 UUID's version (5) and variant (RFC 4122) bits, as `uuid5` sets them.
_UUID5_KEEP = ~((0xF000 << 64) | (0xC000 << 48))
_UUID5_SET = (5 << 76) | (0x8000 << 48)
# (a team id's int, a SHA-1 fed with the namespace's bytes and the team's text up to the
# separator): the last team's (`ClientUserIdClaim.id_for`), replaced whole, so that
# another thread sees one pair or the other. The hash is only ever copied, never fed
# again.
_claim_name_prefix: tuple[int, Any] = (-1, hashlib.sha1(usedforsecurity=False))


class ClientUserIdClaim(FoundedDirectly, CheapCopy, Aggregate):
    """Who holds a client_user_id within a team.

    Its id is derived from (team, client_user_id), so two concurrent creates race on the
    event store's (originator_id, version) uniqueness: the loser gets a conflict, never a
    duplicate. Released at deletion, claimed again by a new user or an undo.
    """

    TOPIC = "healthledger:ClientUserIdClaim"

    class Event(Aggregate.Event):
        actor: str
        request_id: str

    class Created(Founding, Event, Aggregate.Created):
        TOPIC = "healthledger:ClientUserIdClaim.Created.v1"
        team_id: UUID
        client_user_id: str
        user_id: UUID

        def apply(self, claim: ClientUserIdClaim) -> None:
            claim.team_id = self.team_id
            claim.client_user_id = self.client_user_id
            claim.holder = self.user_id

    class Claimed(Event):
        TOPIC = "healthledger:ClientUserIdClaim.Claimed.v1"
        user_id: UUID

        def apply(self, claim: ClientUserIdClaim) -> None:
            claim.holder = self.user_id

    class Released(Event):
        TOPIC = "healthledger:ClientUserIdClaim.Released.v1"
        user_id: UUID

        def apply(self, claim: ClientUserIdClaim) -> None:
            claim.holder = None

    # State: team_id, client_user_id, holder (the user id, or None when released).

    @staticmethod
    def id_for(team_id: UUID, client_user_id: str) -> UUID:
        """`uuid.uuid5(CLAIM_NAMESPACE, f"{team_id}\\x1f{client_user_id}")`, in fewer
        steps (`uuid5` took 6 µs, half a claim's founding; a test holds the two equal):
        the digest's bits set as `uuid5` sets them, made a UUID by `uuid_from_int`.
        For the last team, the hash is kept fed with the bytes up to the client_user_id
        and copied: the text of a UUID (`UUID.__str__`, Python slicing) cost 8,000
        instructions, and a new `hashlib.sha1` asks OpenSSL to fetch the algorithm (a
        provider lookup under locks), 8 µs on a command's cold caches against 3 µs for
        a copy."""
        global _claim_name_prefix
        prefix = _claim_name_prefix
        if prefix[0] != team_id.int:
            fed = hashlib.sha1(_CLAIM_NAMESPACE_BYTES, usedforsecurity=False)
            fed.update(f"{team_id}\x1f".encode())
            prefix = (team_id.int, fed)
            _claim_name_prefix = prefix
        hashed = prefix[1].copy()
        hashed.update(client_user_id.encode())
        digest = hashed.digest()
        return uuid_from_int((int.from_bytes(digest[:16]) & _UUID5_KEEP) | _UUID5_SET)

    @classmethod
    def start(
        cls, ctx: CommandContext, now: datetime, team_id: UUID, client_user_id: str, user_id: UUID
    ) -> ClientUserIdClaim:
        return cls._found(
            cls.Created,
            cls.id_for(team_id, client_user_id),
            {
                "timestamp": now,
                "actor": ctx.actor,
                "request_id": ctx.request_id,
                "team_id": team_id,
                "client_user_id": client_user_id,
                "user_id": user_id,
            },
        )

    def claim(self, ctx: CommandContext, now: datetime, user_id: UUID) -> None:
        if self.holder == user_id:
            return
        if self.holder is not None:
            raise ClientUserIdInUse()
        self.trigger_event(
            self.Claimed, timestamp=now, actor=ctx.actor, request_id=ctx.request_id, user_id=user_id
        )

    def release(self, ctx: CommandContext, now: datetime, user_id: UUID) -> None:
        if self.holder != user_id:
            return
        self.trigger_event(
            self.Released,
            timestamp=now,
            actor=ctx.actor,
            request_id=ctx.request_id,
            user_id=user_id,
        )


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
