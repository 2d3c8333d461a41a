"""The user lifecycle's rules through its use cases, on the ledger over eventsourcing's
in-memory infrastructure with a clock the test moves (tests/unit/in_memory.py): a
client_user_id is held by one live user of a team at a time (its claim named by the
team's keyed digest), a deletion releases it and an undo takes it back or is refused (and
the refusal recorded), and the grace period decides when an undo is too late and when an
erasure is due. The same rules on real databases, with concurrency, are in
tests/integration/test_lifecycle.py and test_client_user_id_digests.py."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest
from healthledger.domain.errors import (
    ClientUserIdInUse,
    ClientUserIdTaken,
    GracePeriodEnded,
    InvalidRequest,
    NothingToUpdate,
    TeamNotFound,
    UserNotDeleted,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.teams.client_user_id_secrets import ClientUserIdSecrets
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.client_user_ids import client_user_id_digest
from healthledger.domain.users.user import ACTIVE, ERASED, PENDING_ERASURE, ClientUserIdClaim, User

from tests.unit.in_memory import CTX, GRACE, SWEEP, World

ONE_SECOND = timedelta(seconds=1)


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def team(world: World) -> UUID:
    return world.team()


def claim_of(world: World, user: User) -> ClientUserIdClaim:
    claim = world.find(user.claim_id)
    assert isinstance(claim, ClientUserIdClaim)
    return claim


def user_events(world: World, user_id: UUID) -> list[type]:
    return [type(event) for event in world.ledger.events.get(user_id)]


def refusals(world: World, user_id: UUID) -> list[str]:
    return [
        event.reason
        for event in world.ledger.events.get(user_id)
        if isinstance(event, User.DeletionUndoRefused)
    ]


# -- claims of client_user_ids --------------------------------------------------------------


def test_a_user_holds_its_client_user_id_sealed_and_its_claim_by_the_teams_digest(
    world: World, team: UUID
) -> None:
    user = world.users.create_user(CTX, team, client_user_id="patient-4711")
    assert user.status == ACTIVE and user.sealed_client_user_id is not None
    assert world.vault.open(user.id, user.sealed_client_user_id) == "patient-4711"
    digest = world.users.client_user_ids.digest(CTX, team, "patient-4711")
    claim = claim_of(world, user)
    # The claim is named by the digest under the team's own secret, never by the value.
    assert claim.id == ClientUserIdClaim.id_for_digest(digest) == user.claim_id
    assert (claim.digest, claim.holder, claim.team_id) == (digest, user.id, team)
    team_aggregate = world.find(team)
    assert isinstance(team_aggregate, Team)
    sealed_secret = team_aggregate.sealed_client_user_id_secret
    assert sealed_secret is not None
    opened = world.vault.open(team, sealed_secret)
    assert isinstance(opened, dict)
    # The value is in no stored event, the user's (sealed) or the claim's (digested).
    stored = [event for save in world.recorder.saves for event in save]
    assert all(b"patient-4711" not in event.state for event in stored)
    assert world.users.client_user_ids.digest_of_user(CTX, user) == digest


def test_a_taken_client_user_id_is_refused_with_its_holder_and_leaves_no_key_behind(
    world: World, team: UUID
) -> None:
    first = world.users.create_user(CTX, team, client_user_id="dup")
    keys_before = set(world.vault.values)
    with pytest.raises(ClientUserIdTaken) as raised:
        world.users.create_user(CTX, team, client_user_id="dup")
    assert (raised.value.user_id, raised.value.created_on) == (first.id, first.created_on)
    # The refused user's data key was dropped, not orphaned.
    assert set(world.vault.values) == keys_before


def test_the_same_client_user_id_in_two_teams_is_two_users_with_two_claims(
    world: World, team: UUID
) -> None:
    other = world.team()
    a = world.users.create_user(CTX, team, client_user_id="shared")
    b = world.users.create_user(CTX, other, client_user_id="shared")
    assert a.id != b.id and a.claim_id != b.claim_id
    # Each team digests under its own secret.
    ids = world.users.client_user_ids
    assert ids.digest(CTX, team, "shared") != ids.digest(CTX, other, "shared")


def test_a_client_user_id_with_personal_data_or_no_team_is_refused(
    world: World, team: UUID
) -> None:
    for refused in ("", "alice@example.org"):
        with pytest.raises(InvalidRequest):
            world.users.create_user(CTX, team, client_user_id=refused)
    with pytest.raises(TeamNotFound):
        world.users.create_user(CTX, UUID(int=7), client_user_id="x")
    assert world.recorder.saves[-1][0].originator_id == team  # nothing saved since the team


def test_a_team_without_a_secret_gets_one_on_first_need_and_keeps_it(world: World) -> None:
    team = Team.create(CTX, world.clock(), UUID(int=1), "Old team", "eu")
    world.save(team)
    ids = world.users.client_user_ids
    first = ids.digest(CTX, team.id, "bob")
    secrets = ids.secrets
    assert isinstance(secrets, ClientUserIdSecrets)
    secrets.known.clear()  # another process, which has not opened it: it reads the same one
    assert ids.digest(CTX, team.id, "bob") == first
    recorded = [
        e for e in world.ledger.events.get(team.id) if isinstance(e, Team.ClientUserIdSecretCreated)
    ]
    assert len(recorded) == 1
    # Made on first need, for a team that may hold claims made before digests.
    assert recorded[0].legacy_claims is True
    secret = world.vault.open(team.id, recorded[0].sealed_secret)
    assert isinstance(secret, dict)


def test_a_change_of_client_user_id_moves_the_claim_and_frees_the_old_value(
    world: World, team: UUID
) -> None:
    user = world.users.create_user(CTX, team, client_user_id="before")
    old_claim_id = user.claim_id
    world.users.update_user(CTX, team, user.id, {"client_user_id": "after"})
    moved = world.users.load_live(team, user.id)
    assert moved.sealed_client_user_id is not None
    assert world.vault.open(user.id, moved.sealed_client_user_id) == "after"
    assert claim_of(world, moved).holder == user.id
    old = world.find(old_claim_id)
    assert isinstance(old, ClientUserIdClaim) and old.holder is None
    # The freed value is another user's to take, and takes the same claim again.
    other = world.users.create_user(CTX, team, client_user_id="before")
    assert other.claim_id == old_claim_id


def test_a_change_to_a_held_client_user_id_is_refused_and_changes_nothing(
    world: World, team: UUID
) -> None:
    holder = world.users.create_user(CTX, team, client_user_id="held")
    user = world.users.create_user(CTX, team, client_user_id="mine")
    events_before = user_events(world, user.id)
    with pytest.raises(ClientUserIdInUse):
        world.users.update_user(CTX, team, user.id, {"client_user_id": "held"})
    assert user_events(world, user.id) == events_before
    assert claim_of(world, world.users.load(team, holder.id)).holder == holder.id
    assert claim_of(world, world.users.load(team, user.id)).holder == user.id


def test_a_change_to_the_same_client_user_id_moves_no_claim(world: World, team: UUID) -> None:
    user = world.users.create_user(CTX, team, client_user_id="same")
    saves = len(world.recorder.saves)
    changes = {"client_user_id": "same", "fallback_time_zone": "UTC"}
    world.users.update_user(CTX, team, user.id, changes)
    assert len(world.recorder.saves) == saves + 1
    assert world.recorder.last_topics() == ["User.SettingsChanged"]
    with pytest.raises(NothingToUpdate):
        world.users.update_user(CTX, team, user.id, {})


# -- deletion, undo and its refusals --------------------------------------------------------


def test_a_deletion_releases_the_client_user_id_and_an_undo_in_the_grace_period_takes_it_back(
    world: World, team: UUID
) -> None:
    user = world.users.create_user(CTX, team, client_user_id="c-1")
    world.users.delete_user(CTX, team, user.id)
    deleted = world.users.load(team, user.id)
    assert deleted.status == PENDING_ERASURE
    assert deleted.erasure_due_at == world.clock() + GRACE
    assert claim_of(world, deleted).holder is None
    with pytest.raises(UserScheduledForDeletion):
        world.users.load_live(team, user.id)

    world.clock.advance(GRACE - ONE_SECOND)  # the last second of the grace period
    world.users.undo_deletion(CTX, team, user.id)
    undone = world.users.load_live(team, user.id)
    assert (undone.status, undone.erasure_due_at) == (ACTIVE, None)
    assert claim_of(world, undone).holder == user.id
    assert refusals(world, user.id) == []


def test_an_undo_is_refused_and_recorded_when_another_user_took_the_client_user_id(
    world: World, team: UUID
) -> None:
    user = world.users.create_user(CTX, team, client_user_id="c-1")
    world.users.delete_user(CTX, team, user.id)
    taker = world.users.create_user(CTX, team, client_user_id="c-1")
    assert taker.claim_id == user.claim_id
    with pytest.raises(ClientUserIdInUse):
        world.users.undo_deletion(CTX, team, user.id)
    # The user stays deleted, the claim with its new holder; the refusal is on record.
    assert world.users.load(team, user.id).status == PENDING_ERASURE
    assert claim_of(world, taker).holder == taker.id
    assert refusals(world, user.id) == ["client_user_id_in_use"]


def test_an_undo_after_the_grace_period_is_refused_and_recorded(world: World, team: UUID) -> None:
    user = world.users.create_user(CTX, team, client_user_id="c-1")
    world.users.delete_user(CTX, team, user.id)
    world.clock.advance(GRACE)
    with pytest.raises(GracePeriodEnded):
        world.users.undo_deletion(CTX, team, user.id)
    assert world.users.load(team, user.id).status == PENDING_ERASURE
    assert refusals(world, user.id) == ["grace_period_ended"]


def test_an_undo_of_an_erased_user_is_refused_as_not_found_and_recorded(
    world: World, team: UUID
) -> None:
    user = world.users.create_user(CTX, team, client_user_id="c-1")
    world.users.delete_user(CTX, team, user.id)
    world.clock.advance(GRACE)
    assert world.users.erase_user(SWEEP, user.id) is True
    with pytest.raises(UserNotFound):
        world.users.undo_deletion(CTX, team, user.id)
    assert refusals(world, user.id) == ["erased"]


def test_an_undo_of_an_active_user_is_refused_and_not_recorded(world: World, team: UUID) -> None:
    user = world.users.create_user(CTX, team, client_user_id="c-1")
    events_before = user_events(world, user.id)
    with pytest.raises(UserNotDeleted):
        world.users.undo_deletion(CTX, team, user.id)
    # Nothing to undo concerns no deletion: a live user's stream does not grow.
    assert user_events(world, user.id) == events_before


def test_another_teams_user_does_not_exist(world: World, team: UUID) -> None:
    user = world.users.create_user(CTX, team, client_user_id="c-1")
    other = world.team()
    with pytest.raises(UserNotFound):
        world.users.load(other, user.id)
    with pytest.raises(UserNotFound):
        world.users.delete_user(CTX, other, user.id)
    with pytest.raises(UserNotFound):
        world.users.update_user(CTX, other, user.id, {"fallback_time_zone": "UTC"})
    assert world.users.load_live(team, user.id).status == ACTIVE


# -- the grace period and the erasure -------------------------------------------------------


def test_an_erasure_waits_for_the_end_of_the_grace_period_and_happens_once(
    world: World, team: UUID
) -> None:
    user = world.users.create_user(CTX, team, client_user_id="c-1")
    world.users.delete_user(CTX, team, user.id)
    world.clock.advance(GRACE - ONE_SECOND)
    assert world.users.erase_user(SWEEP, user.id) is False
    assert world.users.load(team, user.id).status == PENDING_ERASURE
    world.clock.advance(ONE_SECOND)
    assert world.users.erase_user(SWEEP, user.id) is True
    erased = world.users.load(team, user.id)
    assert erased.status == ERASED
    assert user_events(world, user.id)[-1] is User.Erased
    # Idempotent: nothing left to do, nothing recorded.
    saves = len(world.recorder.saves)
    assert world.users.erase_user(SWEEP, user.id) is False
    assert len(world.recorder.saves) == saves
    # An erased user is gone for every use case; its released value is free for good.
    with pytest.raises(UserNotFound):
        world.users.load_live(team, user.id)
    assert world.users.create_user(CTX, team, client_user_id="c-1").claim_id == user.claim_id


def test_an_active_user_or_an_undone_deletion_is_never_erased(world: World, team: UUID) -> None:
    active = world.users.create_user(CTX, team, client_user_id="active")
    undone = world.users.create_user(CTX, team, client_user_id="undone")
    world.users.delete_user(CTX, team, undone.id)
    world.users.undo_deletion(CTX, team, undone.id)
    world.clock.advance(GRACE * 2)
    assert world.users.erase_users(SWEEP, [active.id, undone.id]) == 0
    assert world.users.load_live(team, active.id).status == ACTIVE
    assert world.users.load_live(team, undone.id).status == ACTIVE


def test_a_batch_erases_only_its_due_users_in_one_save(world: World, team: UUID) -> None:
    early = world.users.create_user(CTX, team, client_user_id="early")
    late = world.users.create_user(CTX, team, client_user_id="late")
    world.users.delete_user(CTX, team, early.id)
    world.clock.advance(timedelta(days=1))
    world.users.delete_user(CTX, team, late.id)
    world.clock.advance(GRACE - timedelta(days=1))  # early's grace period is over, not late's
    saves = len(world.recorder.saves)
    assert world.users.erase_users(SWEEP, [early.id, late.id]) == 1
    assert len(world.recorder.saves) == saves + 1
    assert world.users.load(team, early.id).status == ERASED
    assert world.users.load(team, late.id).status == PENDING_ERASURE


def test_the_grace_period_is_the_lifecycles_setting(world: World, team: UUID) -> None:
    world.users.grace_period = timedelta(hours=1)
    user = world.users.create_user(CTX, team, client_user_id="c-1")
    world.users.delete_user(CTX, team, user.id)
    assert world.users.load(team, user.id).erasure_due_at == world.clock() + timedelta(hours=1)
    world.clock.advance(timedelta(hours=1))
    assert world.users.erase_user(SWEEP, user.id) is True


def test_the_client_user_id_digest_is_the_teams_hmac(world: World, team: UUID) -> None:
    secret = world.users.client_user_ids.secrets.secret_of(CTX, team)
    assert secret.legacy_claims is False
    assert world.users.client_user_ids.digest(CTX, team, "v") == client_user_id_digest(
        secret.secret, "v"
    )
