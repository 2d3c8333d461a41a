"""What the events declare, and what the adapters derive from it (issue 27): every
aggregate of the ledger declares whether its stream is a user's, every event of a user's
stream what it announces; an aggregate that leaves one out is refused when defined."""

from __future__ import annotations

from uuid import UUID

import pytest
from eventsourcing.domain import Aggregate
from healthledger.adapters.persistence.projections import declared_handlers
from healthledger.adapters.persistence.projections.erasure import DELETED, ERASING
from healthledger.adapters.persistence.projections.stream_owners import (
    FOUNDING,
    HANDING,
    OWNED_STREAMS,
)
from healthledger.adapters.webhooks.dispatcher import ANNOUNCING_EVENTS
from healthledger.domain.audited import (
    Audited,
    UserStream,
    audited_aggregates,
    audited_events,
    check_declarations,
    events_of,
)
from healthledger.domain.labs.unmatched_results import UnmatchedResult
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.lifecycle import ERASURE_REMOVES
from healthledger.domain.users.user import ClientUserIdClaim, User
from healthledger.domain.webhooks.announcements import LIFECYCLE_EVENT_TYPES, TEAM_EVENT_TYPES
from healthledger.domain.webhooks.event_destinations import EventDestination

from tests.recorded import audited


def test_every_aggregate_of_the_domain_is_audited_and_declares_its_stream() -> None:
    aggregates = audited_aggregates()
    # The receiver's MirroredUser is the only aggregate of its own kind (no actor).
    assert len(aggregates) == 31
    for aggregate in aggregates:
        assert "USER_STREAM" in vars(aggregate), aggregate
        check_declarations(aggregate)  # what the class's definition checked
        for event in events_of(aggregate):
            assert issubclass(event, Audited.Event), event
            if aggregate.USER_STREAM is not None:
                declaring = next(c for c in event.__mro__ if "ANNOUNCES" in vars(c))
                assert declaring is not Audited.Event, event


def test_the_adapters_tables_are_derived_from_the_declarations() -> None:
    announcing = {e for e in audited_events() if e.ANNOUNCES}
    assert set(ANNOUNCING_EVENTS) == announcing
    # The lifecycle's own webhook types, as announcements.py maps them.
    for event_class, event_type in LIFECYCLE_EVENT_TYPES.items():
        assert issubclass(event_class, Audited.Event)
        assert (event_type,) == event_class.ANNOUNCES
    assert set(OWNED_STREAMS.values()) == {
        "user",
        "claim",
        "connection",
        "pull",
        "link_token",
        "webhook_delivery",
        "oauth_flow",
        "credential_sign_in",
        "link_code",
        "order",
        "import",
        "maker_notice",
        "appointment",
        "lab_report_parsing_job",
    }
    assert FOUNDING[User.Created] == "user"
    assert dict.fromkeys([ClientUserIdClaim.Claimed], "user_id") == HANDING
    # An unmatched result's own key goes with its acceptance or rejection, or with its
    # team's deletion before either (ADR 0040).
    assert (
        frozenset(
            [
                User.Erased,
                Team.Deleted,
                UnmatchedResult.Accepted,
                UnmatchedResult.Rejected,
                UnmatchedResult.ResolvedByTeamDeletion,
            ]
        )
        == ERASING
    )
    read_models = [place for place in DELETED if place.startswith("read_model:")]
    assert read_models[0] == "read_model:users"
    assert set(read_models) == {p for p in ERASURE_REMOVES if p.startswith("read_model:")}
    handlers = declared_handlers()
    assert set(handlers) <= set(audited_events())
    assert handlers[User.Created].__name__ == "user_created"


def test_an_aggregate_that_declares_no_user_stream_is_refused() -> None:
    with pytest.raises(TypeError, match="must declare USER_STREAM"):

        class Undeclared(Audited):
            TOPIC = "healthledger:test.Undeclared"

            class Event(Audited.Event):
                pass

            class Created(Event, Aggregate.Created):
                TOPIC = "healthledger:test.Undeclared.Created.v1"


def test_an_event_of_a_users_stream_that_declares_no_announcements_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Silent\.Noted must declare ANNOUNCES"):

        class Silent(Audited):
            TOPIC = "healthledger:test.Silent"

            class Event(Audited.Event):
                pass

            USER_STREAM = UserStream("silent")

            class Created(Event, Aggregate.Created):
                TOPIC = "healthledger:test.Silent.Created.v1"
                ANNOUNCES = ()
                user_id: UUID
                team_id: UUID

            class Noted(Event):
                TOPIC = "healthledger:test.Silent.Noted.v1"


def test_a_users_stream_whose_founding_event_names_no_user_is_refused() -> None:
    with pytest.raises(TypeError, match="must name the user"):

        class Nameless(Audited):
            TOPIC = "healthledger:test.Nameless"

            class Event(Audited.Event):
                pass

            USER_STREAM = UserStream("nameless")

            class Created(Event, Aggregate.Created):
                TOPIC = "healthledger:test.Nameless.Created.v1"
                ANNOUNCES = ()
                team_id: UUID


def test_a_stream_no_user_owns_hands_nothing_over_and_announces_team_level_types() -> None:
    with pytest.raises(TypeError, match="only an event of a user's stream hands it over"):

        class Handing(Audited):
            TOPIC = "healthledger:test.Handing"

            class Event(Audited.Event):
                pass

            USER_STREAM = None

            class Created(Event, Aggregate.Created):
                TOPIC = "healthledger:test.Handing.Created.v1"
                HANDS_STREAM_TO = "user_id"
                user_id: UUID

    # What a stream no user owns announces is a team-level type, and each is mapped.
    for event in audited_events():
        aggregate = next(a for a in audited_aggregates() if event in events_of(a))
        if aggregate.USER_STREAM is None and event.ANNOUNCES:
            assert (TEAM_EVENT_TYPES[event],) == event.ANNOUNCES
    assert set(TEAM_EVENT_TYPES) == {EventDestination.Disabled}


def test_a_read_model_place_is_named_as_erasure_removes_names_it() -> None:
    with pytest.raises(ValueError, match="read_model:"):
        UserStream("misnamed", read_models=("connections",))


def test_a_declared_aggregate_records_under_its_context() -> None:
    from datetime import UTC, datetime

    from healthledger.domain.context import CommandContext
    from healthledger.domain.teams.teams import Organization

    ctx = CommandContext(actor="system:cli", request_id="req-1")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    org = Organization.found(ctx, now, "Acme")
    org.rename(ctx, now, "Acme 2")
    events = audited(org.collect_events())
    assert [(e.actor, e.request_id) for e in events] == [("system:cli", "req-1")] * 2
    assert isinstance(events[1], Organization.Renamed) and events[1].name == "Acme 2"
