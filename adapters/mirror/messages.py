"""The webhook message contract, read by the receiver (gaps.md, Webhooks).

Envelope: `{event_type, data, user_id, client_user_id, team_id}`. The data of the types the
mirror records:

- `provider.connection.created`: `{user_id, provider: {name, slug, logo},
  resource_availability, external_user_id}` (+ `source`, a copy of `provider`);
- `provider.connection.error`: `{provider: <slug>, user_id, message, error_type}`
  (+ `error_details`);
- `historical.data.<resource>.created`: `{user_id, start_date, end_date, provider}`
  (+ `is_final: true`), and the deprecated `historical.timeseries.hypnogram.created`;
- `daily.data.<resource>.created|updated`: for summary resources the summary object itself
  (`{id, user_id, provider, calendar_date, source, ...}`, the official client's shape), for
  timeseries ones `{user_id, provider, calendar_date, data: [samples], source}`, and the
  deprecated `daily.timeseries.hypnogram.created|updated`. The older summary shape
  `{user_id, provider, calendar_date, summary, source}` is still read, so messages sent
  before the change (a redelivery, a queue) are taken too;
- our own lifecycle types (not in the production service's catalog):
  `user.deleted`: `{user_id, team_id, deleted_at, erasure_due_at, request_id}`,
  `user.deletion_undone`: `{user_id, team_id, undone_at, request_id}`,
  `user.erased`: `{user_id, erased_at, removed}`; their envelope's client_user_id is null.

Fields the mirror does not need (`source`, `is_final`, the samples and summaries themselves)
and fields added later are ignored, so a deprecation or an addition on the sender's side
breaks no receiver; a missing or mistyped field the mirror needs is refused. Any other
event type is valid as long as its envelope is: the catalog grows (the enumeration is
non-exhaustive) and a receiver must not fail on a new type.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any, get_args
from uuid import UUID

from healthledger.adapters.reference import Resource
from healthledger.domain.connections.providers import SUMMARY_RESOURCES
from healthledger.domain.mirror.users import (
    Announcement,
    ConnectionCreated,
    ConnectionErrored,
    DailyDataAnnounced,
    DeletionAnnounced,
    Envelope,
    ErasureAnnounced,
    HistoricalDataAnnounced,
    UndoAnnounced,
)
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

HYPNOGRAM = "hypnogram"

_RESOURCE = r"([a-z0-9_]+)"
_HISTORICAL = re.compile(rf"^historical\.data\.{_RESOURCE}\.created$")
_DAILY = re.compile(rf"^daily\.data\.{_RESOURCE}\.(created|updated)$")
_HYPNOGRAM_HISTORICAL = "historical.timeseries.hypnogram.created"
_HYPNOGRAM_DAILY = re.compile(r"^daily\.timeseries\.hypnogram\.(created|updated)$")

Slug = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]{1,64}$")]
# The resources the catalog knows (spec 2.6); a daily event of another one may carry either
# a summary or samples, since the enumeration grows.
KNOWN_RESOURCES = frozenset(get_args(Resource))


class InvalidMessage(ValueError):
    """A verified body that is not a message of the contract. `reason` is a stable code;
    the message names fields, never their values."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


MALFORMED_JSON = "malformed_json"
INVALID_ENVELOPE = "invalid_envelope"
INVALID_DATA = "invalid_data"


class _Model(BaseModel):
    # Tolerant of additions (see the module docstring); strict about what is read.
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Envelope(_Model):
    event_type: str = Field(min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$")
    data: dict[str, Any]
    user_id: UUID
    client_user_id: str | None
    team_id: UUID


class _Provider(_Model):
    name: str
    slug: Slug
    logo: str | None


class _ConnectionCreated(_Model):
    user_id: UUID
    provider: _Provider
    resource_availability: dict[str, dict[str, Any]]
    external_user_id: str | None = None


class _ConnectionError(_Model):
    user_id: UUID
    provider: Slug
    message: str
    error_type: str = Field(min_length=1)


class _Historical(_Model):
    user_id: UUID
    provider: Slug
    start_date: AwareDatetime
    end_date: AwareDatetime


class _Daily(_Model):
    user_id: UUID
    provider: Slug
    calendar_date: date
    # Only checked for presence and kind; the mirror keeps no health data.
    summary: dict[str, Any] | list[Any] | None = None
    data: list[Any] | None = None
    # A summary object names its source; so does a timeseries group.
    source: dict[str, Any] | None = None


class _UserDeleted(_Model):
    user_id: UUID
    team_id: UUID
    deleted_at: AwareDatetime
    erasure_due_at: AwareDatetime
    request_id: str = Field(min_length=1, max_length=255)


class _DeletionUndone(_Model):
    user_id: UUID
    team_id: UUID
    undone_at: AwareDatetime
    request_id: str = Field(min_length=1, max_length=255)


class _UserErased(_Model):
    user_id: UUID
    erased_at: AwareDatetime
    removed: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        max_length=64
    )


@dataclass(frozen=True)
class Message:
    """A message of the contract: its envelope, and what it announces for the mirror
    (None for an event type the mirror does not record)."""

    envelope: Envelope
    announcement: Announcement | None


def parse_message(message_id: str, body: bytes) -> Message:
    """Read a verified body. Raises `InvalidMessage`."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise InvalidMessage(MALFORMED_JSON, "The body is not JSON.") from None
    try:
        envelope = _Envelope.model_validate(document)
    except ValidationError as exc:
        raise InvalidMessage(
            INVALID_ENVELOPE,
            "The body is not a webhook envelope "
            f"({{event_type, data, user_id, client_user_id, team_id}}): {_fields(exc)}.",
        ) from None
    announcement = _announcement(envelope)
    return Message(
        envelope=Envelope(
            message_id=message_id,
            event_type=envelope.event_type,
            user_id=envelope.user_id,
            team_id=envelope.team_id,
            client_user_id=envelope.client_user_id,
        ),
        announcement=announcement,
    )


def _announcement(envelope: _Envelope) -> Announcement | None:
    event_type, data = envelope.event_type, envelope.data
    try:
        if event_type == "provider.connection.created":
            created = _ConnectionCreated.model_validate(data)
            _same_user(envelope, created.user_id)
            return ConnectionCreated(
                provider=created.provider.slug,
                name=created.provider.name,
                logo=created.provider.logo,
                resource_availability=created.resource_availability,
                external_user_id=created.external_user_id,
            )
        if event_type == "provider.connection.error":
            errored = _ConnectionError.model_validate(data)
            _same_user(envelope, errored.user_id)
            return ConnectionErrored(
                provider=errored.provider,
                error_type=errored.error_type,
                error_message=errored.message,
            )
        lifecycle = _lifecycle(envelope)
        if lifecycle is not None:
            return lifecycle
        resource = _historical_resource(event_type)
        if resource is not None:
            historical = _Historical.model_validate(data)
            _same_user(envelope, historical.user_id)
            if historical.end_date < historical.start_date:
                raise InvalidMessage(INVALID_DATA, "data.end_date is before data.start_date.")
            return HistoricalDataAnnounced(
                provider=historical.provider,
                resource=resource,
                start_date=historical.start_date,
                end_date=historical.end_date,
            )
        daily_type = _daily_resource(event_type)
        if daily_type is not None:
            resource, change = daily_type
            daily = _Daily.model_validate(data)
            _same_user(envelope, daily.user_id)
            _check_daily_payload(resource, daily)
            return DailyDataAnnounced(
                provider=daily.provider,
                resource=resource,
                calendar_date=daily.calendar_date,
                change=change,
            )
    except ValidationError as exc:
        raise InvalidMessage(
            INVALID_DATA, f"The data of {event_type} is not as documented: {_fields(exc)}."
        ) from None
    return None


def _lifecycle(envelope: _Envelope) -> Announcement | None:
    """Our own lifecycle types; None for any other type. Raises ValidationError."""
    event_type, data = envelope.event_type, envelope.data
    if event_type == "user.deleted":
        deleted = _UserDeleted.model_validate(data)
        _same_user(envelope, deleted.user_id)
        _same_team(envelope, deleted.team_id)
        return DeletionAnnounced(
            deleted_at=deleted.deleted_at,
            erasure_due_at=deleted.erasure_due_at,
            request_id=deleted.request_id,
        )
    if event_type == "user.deletion_undone":
        undone = _DeletionUndone.model_validate(data)
        _same_user(envelope, undone.user_id)
        _same_team(envelope, undone.team_id)
        return UndoAnnounced(undone_at=undone.undone_at, request_id=undone.request_id)
    if event_type == "user.erased":
        erased = _UserErased.model_validate(data)
        _same_user(envelope, erased.user_id)
        return ErasureAnnounced(erased_at=erased.erased_at, removed=tuple(erased.removed))
    return None


def _historical_resource(event_type: str) -> str | None:
    if event_type == _HYPNOGRAM_HISTORICAL:
        return HYPNOGRAM
    matched = _HISTORICAL.match(event_type)
    return matched.group(1) if matched else None


def _daily_resource(event_type: str) -> tuple[str, str] | None:
    matched = _HYPNOGRAM_DAILY.match(event_type)
    if matched:
        return HYPNOGRAM, matched.group(1)
    matched = _DAILY.match(event_type)
    return (matched.group(1), matched.group(2)) if matched else None


def _check_daily_payload(resource: str, daily: _Daily) -> None:
    if resource in SUMMARY_RESOURCES:
        # The summary object itself as data (with its source), or the older `summary`.
        if daily.summary is None and daily.source is None:
            raise InvalidMessage(
                INVALID_DATA, f"data.source (or data.summary) is required for {resource}."
            )
    elif daily.data is None and (resource in KNOWN_RESOURCES or daily.summary is None):
        raise InvalidMessage(INVALID_DATA, f"data.data is required for {resource}.")


def _same_user(envelope: _Envelope, user_id: UUID) -> None:
    if user_id != envelope.user_id:
        raise InvalidMessage(INVALID_DATA, "data.user_id is not the envelope's user_id.")


def _same_team(envelope: _Envelope, team_id: UUID) -> None:
    if team_id != envelope.team_id:
        raise InvalidMessage(INVALID_DATA, "data.team_id is not the envelope's team_id.")


def _fields(exc: ValidationError) -> str:
    # Locations and kinds of error only: the input values may be personal.
    problems = sorted(
        {f"{'.'.join(str(p) for p in e['loc']) or 'body'} ({e['type']})" for e in exc.errors()}
    )
    return ", ".join(problems[:5])
