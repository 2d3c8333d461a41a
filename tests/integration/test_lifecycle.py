"""Application tests on real databases: the lifecycle commands and their rules."""

from __future__ import annotations

import threading
from datetime import date, timedelta

import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import pending_erasures, stored_events, users
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ClientUserIdInUse,
    ClientUserIdTaken,
    NothingToUpdate,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.users.user import ClientUserIdClaim, User
from sqlalchemy import func, select

from tests.conftest import Team


def count(service: Service, table) -> int:  # type: ignore[no-untyped-def]
    with service.db.read() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def test_create_writes_events_and_read_model_in_one_go(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    before = count(service, stored_events)
    user = service.users.create_user(ctx, team.team_id, client_user_id="c-1")
    assert count(service, stored_events) == before + 2  # claim created + user created
    resolved = service.user_queries.resolved_user(team.team_id, user.id)
    assert resolved["client_user_id"] == "c-1"
    (created,) = service.ledger.events.get(user.id)
    assert isinstance(created, User.Created)
    assert created.actor == "test:actor" and created.request_id == "req-test"


def test_duplicate_client_user_id_reports_the_holder(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    first = service.users.create_user(ctx, team.team_id, client_user_id="dup")
    with pytest.raises(ClientUserIdTaken) as raised:
        service.users.create_user(ctx, team.team_id, client_user_id="dup")
    assert raised.value.user_id == first.id
    assert raised.value.created_on == first.created_on


def test_same_client_user_id_in_two_teams_is_two_users(
    service: Service, team: Team, other_team: Team, ctx: CommandContext
) -> None:
    a = service.users.create_user(ctx, team.team_id, client_user_id="shared")
    b = service.users.create_user(ctx, other_team.team_id, client_user_id="shared")
    assert a.id != b.id


def test_concurrent_creates_of_one_client_user_id_make_exactly_one_user(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    # A second service on the same database stands in for a second server process.
    other = build_service(settings)
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def create(svc: Service) -> None:
        barrier.wait()
        try:
            svc.users.create_user(ctx, team.team_id, client_user_id="race")
            outcomes.append("created")
        except ClientUserIdTaken:
            outcomes.append("taken")

    threads = [threading.Thread(target=create, args=(s,)) for s in [service, other] * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    other.close()
    assert sorted(outcomes) == ["created"] + ["taken"] * 7
    # The users rows hold the team's digest of the value, never the value.
    digest = service.client_user_id_digest(team.team_id, "race")
    with service.db.read() as conn:
        holders = conn.execute(
            select(func.count()).select_from(users).where(users.c.client_user_id_digest == digest)
        ).scalar_one()
    assert holders == 1


def test_delete_releases_the_client_user_id_and_undo_reclaims_it(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id="cu")
    service.users.delete_user(ctx, team.team_id, user.id)
    claim = service.ledger.find(user.claim_id)
    assert isinstance(claim, ClientUserIdClaim) and claim.holder is None
    with pytest.raises(UserScheduledForDeletion):
        service.user_queries.resolved_user(team.team_id, user.id)
    assert count(service, pending_erasures) == 1
    service.users.undo_deletion(ctx, team.team_id, user.id)
    assert service.user_queries.resolved_user(team.team_id, user.id)["user_id"] == user.id
    assert count(service, pending_erasures) == 0
    claim = service.ledger.find(claim.id)
    assert isinstance(claim, ClientUserIdClaim) and claim.holder == user.id


def test_undo_refused_when_another_live_user_took_the_id(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    old = service.users.create_user(ctx, team.team_id, client_user_id="cu")
    service.users.delete_user(ctx, team.team_id, old.id)
    new = service.users.create_user(ctx, team.team_id, client_user_id="cu")
    with pytest.raises(ClientUserIdInUse):
        service.users.undo_deletion(ctx, team.team_id, old.id)
    # Nothing changed: the old user is still pending, the new one still holds the id.
    with pytest.raises(UserScheduledForDeletion):
        service.user_queries.resolved_user(team.team_id, old.id)
    assert service.user_queries.resolve(team.team_id, "cu")["user_id"] == new.id


def test_update_moves_the_claim_and_refuses_a_taken_id(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    a = service.users.create_user(ctx, team.team_id, client_user_id="a")
    service.users.create_user(ctx, team.team_id, client_user_id="b")
    with pytest.raises(ClientUserIdInUse):
        service.users.update_user(ctx, team.team_id, a.id, {"client_user_id": "b"})
    service.users.update_user(
        ctx,
        team.team_id,
        a.id,
        {"client_user_id": "a2", "ingestion_start": date(2024, 1, 1), "fallback_time_zone": "UTC"},
    )
    resolved = service.user_queries.resolve(team.team_id, "a2")
    assert resolved["user_id"] == a.id
    assert resolved["ingestion_start"] == date(2024, 1, 1)
    assert resolved["fallback_time_zone"]["id"] == "UTC"
    # The old id is free again.
    service.users.create_user(ctx, team.team_id, client_user_id="a")
    with pytest.raises(NothingToUpdate):
        service.users.update_user(ctx, team.team_id, a.id, {})


def test_other_teams_users_do_not_exist(
    service: Service, team: Team, other_team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id="mine")
    for attempt in (
        lambda: service.users.delete_user(ctx, other_team.team_id, user.id),
        lambda: service.users.undo_deletion(ctx, other_team.team_id, user.id),
        lambda: service.user_queries.resolved_user(other_team.team_id, user.id),
        lambda: service.user_queries.resolve(other_team.team_id, "mine"),
    ):
        with pytest.raises(UserNotFound):
            attempt()


def test_birth_date_is_sealed_in_the_log(service: Service, team: Team, ctx: CommandContext) -> None:
    user = service.users.create_user(
        ctx, team.team_id, client_user_id="bd", fallback_birth_date=date(1984, 5, 6)
    )
    with service.db.read() as conn:
        states = conn.execute(
            select(stored_events.c.state).where(stored_events.c.originator_id == user.id)
        ).scalars()
        raw = b"".join(bytes(s) for s in states)
    # The date as it would be stored in clear: a bare "1984" turns up by chance in the
    # record's hex ids and its timestamp's microseconds (one run in a few hundred).
    assert b"1984-05-06" not in raw
    resolved = service.user_queries.resolved_user(team.team_id, user.id)
    assert resolved["fallback_birth_date"]["value"] == "1984-05-06"


def test_grace_period_is_a_setting(settings: Settings, team: Team, ctx: CommandContext) -> None:
    short = build_service(settings.model_copy(update={"grace_period": timedelta(hours=1)}))
    try:
        user = short.users.create_user(ctx, team.team_id, client_user_id="g")
        deleted = short.users.delete_user(ctx, team.team_id, user.id)
        assert deleted.erasure_due_at is not None and deleted.deleted_at is not None
        assert deleted.erasure_due_at - deleted.deleted_at == timedelta(hours=1)
    finally:
        short.close()


def test_snapshots_are_taken_for_long_lived_users(
    settings: Settings, team: Team, ctx: CommandContext
) -> None:
    svc = build_service(settings.model_copy(update={"user_snapshot_interval": 3}))
    try:
        user = svc.users.create_user(ctx, team.team_id, client_user_id="s")
        for zone in ("UTC", "Europe/Paris", "Asia/Tokyo"):
            svc.users.update_user(ctx, team.team_id, user.id, {"fallback_time_zone": zone})
        assert svc.ledger.snapshots is not None
        assert list(svc.ledger.snapshots.get(user.id))
        latest = svc.users.load(team.team_id, user.id).sealed_fallback_time_zone
        assert latest is not None and svc.key_store.open(user.id, latest[0]) == "Asia/Tokyo"
    finally:
        svc.close()


def test_the_aggregate_cache_sees_what_another_process_wrote(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id="cached")
    assert service.ledger.repository.cache is not None
    other = build_service(settings)  # a second process on the same database
    try:
        other.users.delete_user(ctx, team.team_id, user.id)
        with pytest.raises(UserScheduledForDeletion):
            service.users.delete_user(ctx, team.team_id, user.id)
        service.users.undo_deletion(ctx, team.team_id, user.id)
        assert other.users.load(team.team_id, user.id).status == "active"
    finally:
        other.close()


def test_a_failed_save_leaves_the_cached_aggregate_untouched(
    service: Service, team: Team, ctx: CommandContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventsourcing.persistence import IntegrityError
    from healthledger.domain.errors import ConcurrentChange

    user = service.users.create_user(ctx, team.team_id, client_user_id="fragile")

    def conflicting_save(*aggregates: object, **kwargs: object) -> None:
        raise IntegrityError("simulated version conflict")

    monkeypatch.setattr(service.ledger, "save", conflicting_save)
    with pytest.raises(ConcurrentChange):
        service.users.delete_user(ctx, team.team_id, user.id)
    monkeypatch.undo()
    cached = service.users.load(team.team_id, user.id)
    assert cached.status == "active" and cached.version == 1
    assert not cached.pending_events


def test_the_notification_log_can_be_followed_and_tracked(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    """The outbox contract: a subscription yields new events in order, woken by this
    process's writes; tracking records a follower's position."""
    from eventsourcing.persistence import Tracking

    start = service.recorder.max_notification_id()
    with service.recorder.subscribe(gt=start) as subscription:
        user = service.users.create_user(ctx, team.team_id, client_user_id="followed")
        seen = [next(subscription), next(subscription)]
    assert [n.id for n in seen] == [start + 1, start + 2]  # type: ignore[operator]
    assert {n.originator_id for n in seen} == {user.id, user.claim_id}
    assert service.recorder.max_tracking_id("follower") is None
    service.recorder.insert_tracking(Tracking("follower", seen[-1].id))
    assert service.recorder.max_tracking_id("follower") == seen[-1].id
