"""Domain tests: aggregates and rules, no I/O."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ClientUserIdInUse,
    GracePeriodEnded,
    UserNotDeleted,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.users.user import (
    ACTIVE,
    CLAIM_NAMESPACE,
    ERASED,
    PENDING_ERASURE,
    ClientUserIdClaim,
    User,
    client_user_id_problem,
    ingestion_bounds_problem,
    time_zone_problem,
)

from tests.unit.stored_form import assert_replays

CTX = CommandContext(actor="team_api_key:k", request_id="req-1")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(days=7)


def new_user(**overrides: object) -> User:
    fields: dict = {
        "user_id": uuid.uuid4(),
        "team_id": uuid.uuid4(),
        "sealed_client_user_id": "v1.sealed-client-1",
        "claim_id": uuid.uuid4(),
        "sealed_fallback_time_zone": "v1.sealed-zone",
        "sealed_birth_date": None,
        "ingestion_start": None,
        "ingestion_end": None,
    }
    fields.update(overrides)
    return User.register(CTX, T0, **fields)


def test_created_user_is_active_and_records_actor_and_request() -> None:
    user = new_user()
    assert user.status == ACTIVE
    assert user.sealed_fallback_time_zone == ("v1.sealed-zone", "manual", T0)
    assert user.fallback_time_zone is None
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
        user.erase(CTX, T0, checked={})
    user.delete(CTX, T0, T0 + GRACE)
    with pytest.raises(UserNotDeleted):
        user.erase(CTX, T0 + GRACE - timedelta(microseconds=1), checked={})
    user.erase(CTX, T0 + GRACE, checked={"user_data_key": 1, "snapshots": 0})
    erased = user.collect_events()[-1]
    assert isinstance(erased, User.Erased)
    # `removed` is what `checked` found rows in.
    assert erased.removed == ["user_data_key"]
    assert erased.checked == {"user_data_key": 1, "snapshots": 0}
    assert user.status == ERASED
    assert user.sealed_demographics is None and user.sealed_birth_date is None
    with pytest.raises(UserNotFound):
        user.require_live()
    with pytest.raises(UserNotFound):
        user.undo_deletion(CTX, T0 + GRACE)


def test_replay_from_the_stored_events_rebuilds_the_same_state() -> None:
    user = new_user(sealed_birth_date="v1.birth")
    user.change_settings(
        CTX,
        T0 + timedelta(hours=1),
        {"ingestion_start": date(2024, 1, 1), "sealed_fallback_time_zone": None},
    )
    new_claim = uuid.uuid4()
    user.change_client_user_id(CTX, T0, "v1.sealed-client-2", new_claim)
    user.record_demographics(CTX, T0, "v1.demo", ["first_name"])
    user.delete(CTX, T0, T0 + GRACE)
    user.undo_deletion(CTX, T0 + timedelta(days=1))
    user.delete(CTX, T0 + timedelta(days=2), T0 + timedelta(days=2) + GRACE)
    user.erase(CTX, T0 + timedelta(days=2) + GRACE, checked={"user_data_key": 1})
    events = assert_replays(user)
    assert [type(e).__name__ for e in events] == [
        "Created",
        "SettingsChanged",
        "ClientUserIdChanged",
        "DemographicsRecorded",
        "Deleted",
        "DeletionUndone",
        "Deleted",
        "Erased",
    ]
    assert user.client_user_id is None and user.sealed_fallback_time_zone is None
    assert (user.sealed_client_user_id, user.claim_id) == ("v1.sealed-client-2", new_claim)
    assert user.ingestion_start == date(2024, 1, 1)
    assert user.erased_at == T0 + timedelta(days=2) + GRACE


def test_an_erased_user_is_never_snapshotted() -> None:
    user = new_user()
    assert user.may_be_snapshotted
    user.delete(CTX, T0, T0 + GRACE)
    assert user.may_be_snapshotted
    user.erase(CTX, T0 + GRACE, checked={})
    assert not user.may_be_snapshotted


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
    claim = ClientUserIdClaim.start(CTX, T0, team_id, "ab" * 32, a)
    assert claim.id == ClientUserIdClaim.id_for_digest("ab" * 32)
    assert ClientUserIdClaim.id_for_digest("ba" * 32) != claim.id
    assert (claim.digest, claim.client_user_id) == ("ab" * 32, None)
    with pytest.raises(ClientUserIdInUse):
        claim.claim(CTX, T0, b)
    claim.release(CTX, T0, b)  # not the holder: nothing happens
    assert claim.holder == a
    claim.release(CTX, T0, a)
    claim.claim(CTX, T0, b)
    assert claim.holder == b
    events = assert_replays(claim)
    assert [type(e).__name__ for e in events] == ["Created", "Released", "Claimed"]


def test_a_claim_id_is_the_uuid5_of_team_and_client_user_id() -> None:
    # Claim ids must never change: uniqueness rests on them (the stored-bytes tests hold
    # one to the id today's databases hold).
    team_id = uuid.UUID("11111111-2222-4333-8444-000000000001")
    assert ClientUserIdClaim.id_for(team_id, "client-1") == uuid.uuid5(
        CLAIM_NAMESPACE, f"{team_id}\x1fclient-1"
    )
    assert ClientUserIdClaim.id_for(team_id, "client-1") != ClientUserIdClaim.id_for(
        team_id, "client-2"
    )


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


def test_time_zone_and_bounds_rules() -> None:
    assert time_zone_problem("Europe/Berlin") is None
    assert time_zone_problem("UTC") is None
    assert time_zone_problem("Mars/Olympus") is not None
    assert ingestion_bounds_problem(date(2024, 2, 1), date(2024, 1, 1)) is not None
    assert ingestion_bounds_problem(date(2024, 1, 1), date(2024, 1, 1)) is None
    assert ingestion_bounds_problem(None, date(2024, 1, 1)) is None
