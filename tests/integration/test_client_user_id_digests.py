"""The client_user_id out of the log in clear, on real SQLite and PostgreSQL: new events
seal it with the user's key, claims are named by the team's keyed digest, the users read
model holds it in clear for lookups (and loses it at erasure), and a team whose users
were created before keeps their uniqueness guarantees: its old claims (named by the clear
value, written here in the stored form the previous code wrote) are still found.

See domain/users/client_user_ids.py and docs/adr/0017-client-user-id-digest.md."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent
from freezegun import freeze_time
from healthledger.adapters.compliance.audit import history
from healthledger.adapters.compliance.time_travel import state_as_of
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import snapshots, stored_events, users
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ClientUserIdInUse,
    ClientUserIdTaken,
    UserNotFound,
)
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.teams.client_user_id_secrets import ClientUserIdSecrets
from healthledger.domain.teams.directory import DEFAULT_ORG_ID
from healthledger.domain.teams.teams import Team as TeamAggregate
from healthledger.domain.users.client_user_ids import DIGESTS, client_user_id_digest
from healthledger.domain.users.user import ClientUserIdClaim, User
from sqlalchemy import select

from tests.conftest import Team
from tests.recorded import loaded

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# What teams put in client_user_id whatever the spec asks: a value that names a person.
PERSONAL = "crm-jane-doe-1984"
MOVED = "crm-jane-doe-1984-b"


def claim(service: Service, claim_id: UUID) -> ClientUserIdClaim:
    found = service.ledger.find(claim_id)
    assert isinstance(found, ClientUserIdClaim)
    return found


def team_aggregate(service: Service, team_id: UUID) -> TeamAggregate:
    found = service.ledger.find(team_id)
    assert isinstance(found, TeamAggregate)
    return found


def secret_events(service: Service, team_id: UUID) -> list[Any]:
    return [
        e
        for e in service.ledger.events.get(team_id)
        if isinstance(e, TeamAggregate.ClientUserIdSecretCreated)
    ]


def all_rows(service: Service, table: Any) -> list[Any]:
    with service.db.read() as conn:
        return list(conn.execute(select(table)).all())


def raw_states(service: Service, *originator_ids: UUID) -> list[bytes]:
    """The stored bytes of every event row of these streams (all rows when none named), in
    the log's order."""
    query = select(stored_events.c.state).order_by(stored_events.c.notification_id)
    if originator_ids:
        query = query.where(stored_events.c.originator_id.in_(originator_ids))
    with service.db.read() as conn:
        return [bytes(state) for (state,) in conn.execute(query)]


def resolved_id(service: Service, team_id: UUID, value: str) -> UUID:
    return UUID(str(service.user_queries.resolve(team_id, value)["user_id"]))


# -- new users ----------------------------------------------------------------------------


def test_a_new_user_holds_its_client_user_id_sealed_and_its_claim_by_the_digest(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id=PERSONAL)
    digest = service.client_user_id_digest(team.team_id, PERSONAL)
    assert user.claim_id == ClientUserIdClaim.id_for_digest(digest)
    held = claim(service, user.claim_id)
    assert (held.holder, held.digest, held.client_user_id) == (user.id, digest, None)
    assert service.ledger.find(ClientUserIdClaim.id_for(team.team_id, PERSONAL)) is None
    # Neither stream holds the value in clear; the user's opens to it with its key.
    states = raw_states(service, user.id, user.claim_id)
    assert len(states) == 2 and not any(PERSONAL.encode() in s for s in states)
    (created,) = service.ledger.events.get(user.id)
    assert isinstance(created, User.Created) and created.client_user_id is None
    assert created.sealed_client_user_id is not None
    assert service.key_store.open(user.id, created.sealed_client_user_id) == PERSONAL
    # The read model holds it in clear for lookups and answers.
    assert resolved_id(service, team.team_id, PERSONAL) == user.id
    # The bootstrapped team got its secret with its creation: no old claim to look for.
    (secret,) = secret_events(service, team.team_id)
    assert secret.legacy_claims is False
    opened = service.key_store.open(team.team_id, secret.sealed_secret)
    assert isinstance(opened, dict) and set(opened) == {"client_user_id_secret"}


def test_the_digest_is_the_teams_hmac_and_differs_between_teams(
    service: Service, team: Team, other_team: Team, ctx: CommandContext
) -> None:
    a = service.users.create_user(ctx, team.team_id, client_user_id=PERSONAL)
    b = service.users.create_user(ctx, other_team.team_id, client_user_id=PERSONAL)
    secret = service.users.client_user_ids.secrets.secret_of(ctx, team.team_id).secret
    assert len(secret) == 32
    digest = service.client_user_id_digest(team.team_id, PERSONAL)
    assert digest == client_user_id_digest(secret, PERSONAL)
    assert digest != service.client_user_id_digest(other_team.team_id, PERSONAL)
    assert a.claim_id != b.claim_id
    # A second process computes the same digest from the recorded secret.
    other = build_service(service.settings)
    try:
        assert other.client_user_id_digest(team.team_id, PERSONAL) == digest
        assert other.client_user_id_digest_of(a) == digest
    finally:
        other.close()


def test_change_delete_undo_and_erase_keep_uniqueness_and_leave_the_value_nowhere(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    with freeze_time(T0) as frozen:
        user = service.users.create_user(ctx, team.team_id, client_user_id=PERSONAL)
        first_claim = user.claim_id
        service.users.update_user(ctx, team.team_id, user.id, {"client_user_id": MOVED})
        moved = service.users.load(team.team_id, user.id)
        assert moved.claim_id == ClientUserIdClaim.id_for_digest(
            service.client_user_id_digest(team.team_id, MOVED)
        )
        assert claim(service, first_claim).holder is None
        assert claim(service, moved.claim_id).holder == user.id
        changed = list(service.ledger.events.get(user.id))[-1]
        assert isinstance(changed, User.ClientUserIdChanged)
        assert (changed.old_client_user_id, changed.new_client_user_id) == (None, None)
        assert resolved_id(service, team.team_id, MOVED) == user.id
        with pytest.raises(UserNotFound):
            service.user_queries.resolve(team.team_id, PERSONAL)
        # The same value again changes nothing.
        service.users.update_user(ctx, team.team_id, user.id, {"client_user_id": MOVED})
        assert service.users.load(team.team_id, user.id).version == moved.version

        # The freed value is anyone's; the held one is nobody else's.
        other = service.users.create_user(ctx, team.team_id, client_user_id=PERSONAL)
        assert other.claim_id == first_claim
        # Its first attempt lost to the existing claim (rolled back with the key it
        # stored); the second stored the key with the events: it opens from the table.
        assert other.sealed_client_user_id is not None and not service.key_store.new_keys
        assert service.key_store.open(other.id, other.sealed_client_user_id) == PERSONAL
        with pytest.raises(ClientUserIdInUse):
            service.users.update_user(ctx, team.team_id, other.id, {"client_user_id": MOVED})
        with pytest.raises(ClientUserIdTaken):
            service.users.create_user(ctx, team.team_id, client_user_id=MOVED)
        assert not service.key_store.new_keys  # the refused user's key is gone too

        # Deleted: its value is free; taken meanwhile, its undo is refused.
        service.users.delete_user(ctx, team.team_id, user.id)
        assert claim(service, moved.claim_id).holder is None
        taker = service.users.create_user(ctx, team.team_id, client_user_id=MOVED)
        with pytest.raises(ClientUserIdInUse):
            service.users.undo_deletion(ctx, team.team_id, user.id)
        service.users.delete_user(ctx, team.team_id, taker.id)
        service.users.undo_deletion(ctx, team.team_id, user.id)
        assert claim(service, moved.claim_id).holder == user.id
        service.users.delete_user(ctx, team.team_id, user.id)

        frozen.tick(timedelta(days=8))
        assert service.users.erase_user(ctx, user.id)

    # Erased: its row is gone, and no event row of the log, nor any snapshot, holds
    # either value it had in clear (the user's and its claims' rows included).
    assert service.ledger.find(user.id) is not None
    own = raw_states(service, user.id, first_claim, moved.claim_id)
    assert len(own) >= 10
    for value in (PERSONAL, MOVED):
        assert not any(value.encode() in state for state in raw_states(service))
        assert not any(value.encode() in bytes(row.state) for row in all_rows(service, snapshots))
    assert service.user_queries.live_user_ids(team.team_id) == [other.id]
    # What a deletion report shows: the digest a team holding the value can check.
    erased = service.users.load(team.team_id, user.id)
    assert service.client_user_id_digest_of(erased) == service.client_user_id_digest(
        team.team_id, MOVED
    )


def test_the_audit_shows_the_sealed_client_user_id_as_a_placeholder_that_is_true(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    with freeze_time(T0) as frozen:
        user = service.users.create_user(ctx, team.team_id, client_user_id=PERSONAL)
        frozen.tick(timedelta(minutes=1))
        live = state_as_of(service, user.id, T0 + timedelta(seconds=30))
        assert live is not None and live["client_user_id"] == SEALED_PLACEHOLDER
        service.users.delete_user(ctx, team.team_id, user.id)
        frozen.tick(timedelta(days=8))
        service.users.erase_user(ctx, user.id)
    gone = state_as_of(service, user.id, T0 + timedelta(seconds=30))
    assert gone is not None and gone["client_user_id"] == ERASED_PLACEHOLDER
    # The history: the sealed value as erased, the claim by its digest, the value nowhere.
    entries = history(service, user.id)
    (created,) = [e for e in entries if e.event == "User.Created"]
    assert created.changes["sealed_client_user_id"] == ERASED_PLACEHOLDER
    digest = service.client_user_id_digest(team.team_id, PERSONAL)
    assert any(e.changes.get("digest") == digest for e in entries)
    assert not any(PERSONAL in entry.line() for entry in entries)


def test_a_rebuild_gives_the_same_users_rows_and_no_row_of_an_erased_user(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    with freeze_time(T0) as frozen:
        kept = [
            service.users.create_user(ctx, team.team_id, client_user_id=f"keep-{i}")
            for i in range(3)
        ]
        service.users.update_user(ctx, team.team_id, kept[0].id, {"client_user_id": "moved-0"})
        legacy = write_legacy_team(service, "legacy-rebuilt")
        # The start seals and digests the rows of users written before (test above).
        build_service(service.settings).close()
        gone = service.users.create_user(ctx, team.team_id, client_user_id="gone")
        service.users.delete_user(ctx, team.team_id, gone.id)
        frozen.tick(timedelta(days=8))
        service.users.erase_user(ctx, gone.id)
    before = sorted(all_rows(service, users))
    assert {opened(service, row) for row in before} == {
        "moved-0",
        "keep-1",
        "keep-2",
        "legacy-rebuilt",
    }
    service.read_models.rebuild(service.recorder, service.ledger.mapper)
    after = sorted(all_rows(service, users))
    # The same rows, but that a value its events hold in clear (the legacy user's) is
    # sealed again by the rebuild: another nonce, the same value.
    assert [without_sealed(row) for row in after] == [without_sealed(row) for row in before]
    assert [opened(service, row) for row in after] == [opened(service, row) for row in before]
    assert [row.sealed_client_user_id for row in after if row.user_id != legacy.user_id] == [
        row.sealed_client_user_id for row in before if row.user_id != legacy.user_id
    ]
    assert legacy.user_id in {row.user_id for row in before}


def opened(service: Service, row: Any) -> Any:
    """A users row's client_user_id, opened with the user's key."""
    return service.key_store.open(row.user_id, row.sealed_client_user_id)


def without_sealed(row: Any) -> dict[str, Any]:
    return {k: v for k, v in row._mapping.items() if k != "sealed_client_user_id"}


# -- a team with users created before ----------------------------------------------------


class Legacy:
    """A team and one live user as the code before digests stored them."""

    def __init__(self, team_id: UUID, user_id: UUID, value: str) -> None:
        self.team_id, self.user_id, self.value = team_id, user_id, value
        self.claim_id = ClientUserIdClaim.id_for(team_id, value)


def _when(moment: datetime) -> str:
    return '{"_type_":"datetime_iso","_data_":"' + moment.isoformat() + '"}'


def _uuid(value: UUID) -> str:
    return '{"_type_":"uuid_hex","_data_":"' + value.hex + '"}'


def write_legacy_team(service: Service, *values: str) -> Legacy:
    """A team without a client_user_id secret and one user per value, each with its
    claim named by the clear value: their events in the stored form the code before
    digests wrote (Team.Created v1, User.Created v2, ClientUserIdClaim.Created v1),
    inserted and projected as that code's saves were. Returns the first user."""
    team_id = uuid.uuid4()
    now = datetime.now(UTC)
    by = '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa","request_id":"req-old",'
    rows = [
        StoredEvent(
            team_id,
            1,
            "healthledger:Team.Created.v1",
            (
                '{"timestamp":'
                + _when(now)
                + ',"originator_topic":"healthledger:Team",'
                + by
                + '"org_id":'
                + _uuid(DEFAULT_ORG_ID)
                + ',"name":"Old team","region":"eu"}'
            ).encode(),
        )
    ]
    first: Legacy | None = None
    for value in values:
        user_id = uuid.uuid4()
        legacy = Legacy(team_id, user_id, value)
        first = first or legacy
        rows += [
            StoredEvent(
                user_id,
                1,
                "healthledger:User.Created.v1",
                (
                    '{"timestamp":'
                    + _when(now)
                    + ',"originator_topic":"healthledger:User",'
                    + by
                    + '"team_id":'
                    + _uuid(team_id)
                    + ',"client_user_id":"'
                    + value
                    + '","fallback_time_zone":null,"sealed_birth_date":null,'
                    '"ingestion_start":null,"ingestion_end":null,"environment":"sandbox",'
                    '"class_version":2}'
                ).encode(),
            ),
            StoredEvent(
                legacy.claim_id,
                1,
                "healthledger:ClientUserIdClaim.Created.v1",
                (
                    '{"timestamp":' + _when(now) + ","
                    '"originator_topic":"healthledger:ClientUserIdClaim",'
                    + by
                    + '"team_id":'
                    + _uuid(team_id)
                    + ',"client_user_id":"'
                    + value
                    + '","user_id":'
                    + _uuid(user_id)
                    + "}"
                ).encode(),
            ),
        ]
    mapper = service.ledger.mapper
    service.recorder.insert_events(rows, aggregate_events=[loaded(mapper, r) for r in rows])
    assert first is not None
    return first


@pytest.fixture
def legacy(service: Service, team: Team) -> Legacy:
    return write_legacy_team(service, "old-1")


def test_an_old_user_keeps_its_claim_and_its_value_stays_unique_across_old_and_new_claims(
    service: Service, legacy: Legacy, ctx: CommandContext
) -> None:
    old_user = service.users.load(legacy.team_id, legacy.user_id)
    assert (old_user.client_user_id, old_user.claim_id) == ("old-1", legacy.claim_id)
    # Its users row has no digest yet (the team has no secret; a projection never records
    # one): the service's start gives it one, recording the team's secret, as it does for
    # a database written before digests.
    assert secret_events(service, legacy.team_id) == []
    build_service(service.settings).close()
    (secret,) = secret_events(service, legacy.team_id)
    assert secret.legacy_claims is True and secret.actor == CommandContext.system(DIGESTS).actor
    assert resolved_id(service, legacy.team_id, "old-1") == legacy.user_id

    # A new user cannot take the old user's value: its old claim is found.
    with pytest.raises(ClientUserIdTaken) as taken:
        service.users.create_user(ctx, legacy.team_id, client_user_id="old-1")
    assert taken.value.user_id == legacy.user_id
    assert len(secret_events(service, legacy.team_id)) == 1
    assert (
        service.ledger.find(
            ClientUserIdClaim.id_for_digest(service.client_user_id_digest(legacy.team_id, "old-1"))
        )
        is None
    )

    new_user = service.users.create_user(ctx, legacy.team_id, client_user_id="new-1")
    assert claim(service, new_user.claim_id).digest is not None
    # Neither can move onto the other's value, whichever kind of claim holds it.
    with pytest.raises(ClientUserIdInUse):
        service.users.update_user(ctx, legacy.team_id, legacy.user_id, {"client_user_id": "new-1"})
    with pytest.raises(ClientUserIdInUse):
        service.users.update_user(ctx, legacy.team_id, new_user.id, {"client_user_id": "old-1"})
    # Patching the old user to its own value changes nothing.
    service.users.update_user(ctx, legacy.team_id, legacy.user_id, {"client_user_id": "old-1"})
    assert service.users.load(legacy.team_id, legacy.user_id).version == 1

    # Deleted, its value goes to a new user through the old claim, and its undo is refused.
    service.users.delete_user(ctx, legacy.team_id, legacy.user_id)
    assert claim(service, legacy.claim_id).holder is None
    successor = service.users.create_user(ctx, legacy.team_id, client_user_id="old-1")
    assert successor.claim_id == legacy.claim_id
    assert claim(service, legacy.claim_id).holder == successor.id
    with pytest.raises(ClientUserIdInUse):
        service.users.undo_deletion(ctx, legacy.team_id, legacy.user_id)
    # The old claim's new events name no value: only its first (stored before) does.
    old_claim_states = raw_states(service, legacy.claim_id)
    assert [b"old-1" in state for state in old_claim_states] == [True, False, False]
    assert resolved_id(service, legacy.team_id, "old-1") == successor.id


def test_an_old_user_moved_to_a_new_value_frees_its_old_claim(
    service: Service, legacy: Legacy, ctx: CommandContext
) -> None:
    service.users.update_user(ctx, legacy.team_id, legacy.user_id, {"client_user_id": "fresh"})
    moved = service.users.load(legacy.team_id, legacy.user_id)
    assert moved.client_user_id is None and moved.sealed_client_user_id is not None
    assert claim(service, moved.claim_id).digest == service.client_user_id_digest(
        legacy.team_id, "fresh"
    )
    assert claim(service, legacy.claim_id).holder is None
    assert resolved_id(service, legacy.team_id, "fresh") == legacy.user_id
    taker = service.users.create_user(ctx, legacy.team_id, client_user_id="old-1")
    assert taker.claim_id == legacy.claim_id
    # Back to the old value is refused now (another holds it), to its new one is a no-op.
    with pytest.raises(ClientUserIdInUse):
        service.users.update_user(ctx, legacy.team_id, legacy.user_id, {"client_user_id": "old-1"})
    # The old user's digest, for a report: its claim now names "fresh" by digest.
    assert service.client_user_id_digest_of(moved) == service.client_user_id_digest(
        legacy.team_id, "fresh"
    )
    # The taker holds the old claim, stored with the value in clear: its digest is computed.
    assert service.client_user_id_digest_of(taker) == service.client_user_id_digest(
        legacy.team_id, "old-1"
    )


# -- the team's secret under concurrency ------------------------------------------------


@pytest.fixture
def two_services(settings: Settings, service: Service) -> Iterator[tuple[Service, Service]]:
    other = build_service(settings)  # a second process on the same database
    try:
        yield service, other
    finally:
        other.close()


def test_two_processes_creating_a_teams_secret_record_one_and_both_use_it(
    two_services: tuple[Service, Service], legacy: Legacy, ctx: CommandContext
) -> None:
    first, second = two_services
    # Both read the team before either records a secret.
    seen_by_first = team_aggregate(first, legacy.team_id)
    seen_by_second = team_aggregate(second, legacy.team_id)
    assert seen_by_first.sealed_client_user_id_secret is None
    first_secrets = first.users.client_user_ids.secrets
    second_secrets = second.users.client_user_ids.secrets
    assert isinstance(first_secrets, ClientUserIdSecrets)
    assert isinstance(second_secrets, ClientUserIdSecrets)
    first_secrets.create_secret(ctx, seen_by_first)
    with pytest.raises(IntegrityError):
        second_secrets.create_secret(ctx, seen_by_second)
    assert len(secret_events(first, legacy.team_id)) == 1
    # The loser reads the team again and uses the winner's secret.
    assert second.users.client_user_ids.secrets.secret_of(ctx, legacy.team_id) == (
        first.users.client_user_ids.secrets.secret_of(ctx, legacy.team_id)
    )
    made = second.users.create_user(ctx, legacy.team_id, client_user_id="after-race")
    assert made.claim_id == ClientUserIdClaim.id_for_digest(
        first.client_user_id_digest(legacy.team_id, "after-race")
    )


def test_concurrent_first_creates_in_an_old_team_make_one_secret_and_one_holder(
    two_services: tuple[Service, Service], legacy: Legacy, ctx: CommandContext
) -> None:
    first, second = two_services
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def create(svc: Service) -> None:
        barrier.wait()
        try:
            svc.users.create_user(ctx, legacy.team_id, client_user_id="raced")
            outcomes.append("created")
        except ClientUserIdTaken:
            outcomes.append("taken")

    threads = [threading.Thread(target=create, args=(s,)) for s in [first, second] * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created"] + ["taken"] * 7
    assert len(secret_events(first, legacy.team_id)) == 1
    assert first.client_user_id_digest(legacy.team_id, "x") == second.client_user_id_digest(
        legacy.team_id, "x"
    )


def test_a_create_after_another_process_rotated_the_master_key_stores_a_key_that_opens(
    two_services: tuple[Service, Service],
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second = two_services
    before = first.users.create_user(ctx, team.team_id, client_user_id="before-rotation")
    assert second.key_store.rotate_master_key() is not None
    refused: list[str] = []
    refusal = first.key_store.refused

    def noting_refusals() -> IntegrityError:
        error = refusal()
        refused.append(str(error))
        return error

    monkeypatch.setattr(first.key_store, "refused", noting_refusals)
    # The first process still holds the old master key: the new user's key, wrapped by
    # it, is refused with the user's events (on PostgreSQL by a check on the server,
    # which fails the COMMIT); the create tries again with the new one.
    after = first.users.create_user(ctx, team.team_id, client_user_id="after-rotation")
    assert refused == ["the master key was rotated: store the new key again"]
    assert not first.key_store.new_keys
    for service in (first, second):
        for user, value in ((before, "before-rotation"), (after, "after-rotation")):
            assert user.sealed_client_user_id is not None
            assert service.key_store.open(user.id, user.sealed_client_user_id) == value
            assert resolved_id(service, team.team_id, value) == user.id
