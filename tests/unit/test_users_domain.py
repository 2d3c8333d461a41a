"""Domain tests: aggregates and rules, no I/O."""

from __future__ import annotations

import copy
import random
import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from eventsourcing.domain import Aggregate, CanInitAggregate
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ClientUserIdInUse,
    GracePeriodEnded,
    UserNotDeleted,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.users.user import (
    _PHONE_SHAPED,
    ACTIVE,
    ERASED,
    PENDING_ERASURE,
    ClientUserIdClaim,
    User,
    _phone_shaped,
    client_user_id_problem,
    ingestion_bounds_problem,
    time_zone_problem,
)

CTX = CommandContext(actor="team_api_key:k", request_id="req-1")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(days=7)


def new_user(**overrides: object) -> User:
    fields: dict = {
        "user_id": uuid.uuid4(),
        "team_id": uuid.uuid4(),
        "client_user_id": "client-1",
        "fallback_time_zone": "Europe/Berlin",
        "sealed_birth_date": None,
        "ingestion_start": None,
        "ingestion_end": None,
    }
    fields.update(overrides)
    return User.register(CTX, T0, **fields)


def test_created_user_is_active_and_records_actor_and_request() -> None:
    user = new_user()
    assert user.status == ACTIVE
    assert user.fallback_time_zone == ("Europe/Berlin", "manual", T0)
    (event,) = user.collect_events()
    assert isinstance(event, User.Created)
    assert (event.actor, event.request_id) == ("team_api_key:k", "req-1")
    assert type(event).TOPIC == "healthledger:User.Created.v1"


def test_delete_then_undo_inside_grace_returns_to_active() -> None:
    user = new_user()
    user.delete(CTX, T0, T0 + GRACE)
    assert user.status == PENDING_ERASURE
    assert user.erasure_due_at == T0 + GRACE
    with pytest.raises(UserScheduledForDeletion):
        user.delete(CTX, T0, T0 + GRACE)
    user.undo_deletion(CTX, T0 + GRACE - timedelta(seconds=1))
    assert user.status == ACTIVE
    assert user.erasure_due_at is None


def test_undo_refused_after_grace_and_on_active_user() -> None:
    user = new_user()
    with pytest.raises(UserNotDeleted):
        user.undo_deletion(CTX, T0)
    user.delete(CTX, T0, T0 + GRACE)
    with pytest.raises(GracePeriodEnded):
        user.undo_deletion(CTX, T0 + GRACE)


def test_erase_only_when_due_and_then_everything_is_gone() -> None:
    user = new_user(sealed_birth_date="v1.sealed")
    user.record_demographics(CTX, T0, "v1.demo", ["first_name"])
    with pytest.raises(UserNotDeleted):
        user.erase(CTX, T0, removed=[])
    user.delete(CTX, T0, T0 + GRACE)
    with pytest.raises(UserNotDeleted):
        user.erase(CTX, T0 + GRACE - timedelta(microseconds=1), removed=[])
    user.erase(CTX, T0 + GRACE, removed=["user_data_key"])
    assert user.status == ERASED
    assert user.sealed_demographics is None and user.sealed_birth_date is None
    with pytest.raises(UserNotFound):
        user.require_live()
    with pytest.raises(UserNotFound):
        user.undo_deletion(CTX, T0 + GRACE)


def test_replay_rebuilds_the_same_state() -> None:
    user = new_user()
    user.change_settings(CTX, T0, {"ingestion_start": date(2024, 1, 1)})
    user.delete(CTX, T0, T0 + GRACE)
    events = user.collect_events()
    replayed = None
    for event in events:
        replayed = event.mutate(replayed)
    assert replayed is not None
    assert replayed.__dict__ == user.__dict__


def test_a_deep_copy_from_the_cache_is_independent_of_the_cached_aggregate() -> None:
    cached = new_user()
    cached.collect_events()
    clone = copy.deepcopy(cached)
    assert type(clone) is User and clone is not cached
    assert clone.__dict__ == cached.__dict__
    clone.delete(CTX, T0, T0 + GRACE)  # a command on the copy changes only the copy
    assert clone.status == PENDING_ERASURE and len(clone.collect_events()) == 1
    assert cached.status == ACTIVE and cached.version == 1 and cached.collect_events() == []


def test_claim_id_is_derived_and_claims_are_exclusive() -> None:
    team_id = uuid.uuid4()
    a, b = uuid.uuid4(), uuid.uuid4()
    claim = ClientUserIdClaim.start(CTX, T0, team_id, "x", a)
    assert claim.id == ClientUserIdClaim.id_for(team_id, "x")
    assert ClientUserIdClaim.id_for(uuid.uuid4(), "x") != claim.id
    with pytest.raises(ClientUserIdInUse):
        claim.claim(CTX, T0, b)
    claim.release(CTX, T0, b)  # not the holder: nothing happens
    assert claim.holder == a
    claim.release(CTX, T0, a)
    claim.claim(CTX, T0, b)
    assert claim.holder == b
    assert [type(e).__name__ for e in claim.collect_events()] == ["Created", "Released", "Claimed"]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "x" * 256,
        "jane@example.com",
        "id-jane.doe@mail.co.uk",
        "+1 555 123 4567",
        "(555) 123-4567",
        "+4915112345678",
        "555-123-4567",
    ],
)
def test_client_user_id_rejects_personal_data_and_bad_lengths(value: str) -> None:
    assert client_user_id_problem(value) is not None


@pytest.mark.parametrize(
    "value", ["user-42", "1234567890", "x" * 255, "a1b2c3", "550e8400-e29b-41d4-a716-446655440000"]
)
def test_client_user_id_accepts_ordinary_ids(value: str) -> None:
    assert client_user_id_problem(value) is None


def test_the_phone_shape_is_the_patterns_for_every_value() -> None:
    # ASCII values are looked at without the regular expression; they must match where
    # it matches: digits, ASCII and other whitespace, the punctuation, a "+" (only first
    # counts), letters, other digits (Arabic-Indic), a trailing newline.
    rng = random.Random(13)
    alphabet = "0123456789 +().-/\t\n\x0b\x0c\r\x1c\x1f\x85\u00a0\u2003x@#_٣"
    values = ["+", "++1", "1\n", "+\n", "٣٣٣", " ", "\x1c"]
    values += [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12))) for _ in range(20000)
    ]
    for value in values:
        assert _phone_shaped(value) == (_PHONE_SHAPED.match(value) is not None), repr(value)


def test_time_zone_and_bounds_rules() -> None:
    assert time_zone_problem("Europe/Berlin") is None
    assert time_zone_problem("UTC") is None
    assert time_zone_problem("Mars/Olympus") is not None
    assert ingestion_bounds_problem(date(2024, 2, 1), date(2024, 1, 1)) is not None
    assert ingestion_bounds_problem(date(2024, 1, 1), date(2024, 1, 1)) is None
    assert ingestion_bounds_problem(None, date(2024, 1, 1)) is None


@pytest.mark.parametrize(
    ("time_zone", "birth_date", "start", "end"),
    [(None, None, None, None), ("Europe/Paris", "sealed", date(2026, 1, 1), date(2026, 2, 1))],
)
def test_users_and_claims_are_founded_as_eventsourcing_founds_them(
    time_zone: str | None, birth_date: str | None, start: date | None, end: date | None
) -> None:
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    team_id, user_id = uuid.uuid4(), uuid.uuid4()
    made = [
        (
            User,
            dict(
                id=user_id,
                timestamp=now,
                actor=CTX.actor,
                request_id=CTX.request_id,
                team_id=team_id,
                client_user_id="u-1",
                fallback_time_zone=time_zone,
                sealed_birth_date=birth_date,
                ingestion_start=start,
                ingestion_end=end,
            ),
        ),
        (
            ClientUserIdClaim,
            dict(
                id=ClientUserIdClaim.id_for(team_id, "u-1"),
                timestamp=now,
                actor=CTX.actor,
                request_id=CTX.request_id,
                team_id=team_id,
                client_user_id="u-1",
                user_id=user_id,
            ),
        ),
    ]
    for cls, fields in made:
        ours = cls._create(cls.Created, **fields)
        theirs = Aggregate._create.__func__(cls, cls.Created, **fields)  # type: ignore[attr-defined]
        # Same type, same state, same pending Created event (dataclass equality).
        assert ours == theirs and len(ours.pending_events) == 1
        # And on a replay: the Created event founds the same aggregate as eventsourcing's.
        event = ours.pending_events[0]
        assert event.mutate(None) == CanInitAggregate.mutate(event, None)
