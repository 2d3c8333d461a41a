"""The client_user_id out of the log in clear: the team's keyed digest, the claim it
names, the user's change of client_user_id (version 2, sealed) and its stored version 1,
and the team's secret event. No I/O: the use cases run on real databases in
tests/integration/test_client_user_id_digests.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from eventsourcing.persistence import StoredEvent
from healthledger.domain.context import CommandContext
from healthledger.domain.teams.client_user_id_secrets import SECRET_BYTES
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.client_user_ids import client_user_id_digest
from healthledger.domain.users.user import ClientUserIdClaim, User

from tests.unit.stored_form import MAPPER, assert_replays, replayed, stored

T = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
CTX = CommandContext(
    actor="team_api_key:00000000-0000-4000-8000-0000000000aa", request_id="req-golden"
)
TEAM = uuid.UUID("00000000-0000-0000-0000-000000000001")
USER = uuid.UUID("00000000-0000-0000-0000-000000000002")
SECRET = bytes(range(32))

# What the code before digests stored for a user created with "client-1" and then moved
# to "client-2" (written by that code through eventsourcing's stock mapper).
CREATED_V2 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"originator_topic":"healthledger:User",'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa","request_id":"req-golden",'
    '"team_id":{"_type_":"uuid_hex","_data_":"00000000000000000000000000000001"},'
    '"client_user_id":"client-1","fallback_time_zone":null,"sealed_birth_date":null,'
    '"ingestion_start":null,"ingestion_end":null,"environment":"sandbox","class_version":2}'
)
CHANGED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00.123456+00:00"},'
    '"actor":"team_api_key:00000000-0000-4000-8000-0000000000aa","request_id":"req-golden",'
    '"old_client_user_id":"client-1","new_client_user_id":"client-2"}'
)


def test_the_digest_is_hmac_sha256_of_the_utf8_value_under_the_team_secret() -> None:
    # Checked against `openssl dgst -sha256 -mac HMAC -macopt hexkey:000102...1f`.
    assert client_user_id_digest(SECRET, "client-1") == (
        "68dd798ddd1178d18a2a954692738f4fb10cec83baf5f4094d01cf0f31a0fbcc"
    )
    other_team = bytes(reversed(SECRET))
    assert client_user_id_digest(other_team, "client-1") != client_user_id_digest(
        SECRET, "client-1"
    )
    assert client_user_id_digest(SECRET, "client-2") != client_user_id_digest(SECRET, "client-1")
    # Non-ASCII values are digested as their UTF-8 bytes (what a team computes too).
    assert client_user_id_digest(SECRET, "jürgen") == client_user_id_digest(SECRET, "jürgen")
    assert len(client_user_id_digest(SECRET, "x")) == 64


def test_a_claim_is_named_by_the_digest_never_by_the_value() -> None:
    digest = client_user_id_digest(SECRET, "client-1")
    claim = ClientUserIdClaim.start(CTX, T, TEAM, digest, USER)
    assert claim.id == ClientUserIdClaim.id_for_digest(digest)
    assert claim.id != ClientUserIdClaim.id_for(TEAM, "client-1")
    (event,) = assert_replays(claim)
    assert b"client-1" not in stored(event).state
    assert isinstance(event, ClientUserIdClaim.Created) and event.digest == digest


def test_a_change_of_client_user_id_is_sealed_and_names_the_new_claim() -> None:
    user = User.register(
        CTX,
        T,
        user_id=USER,
        team_id=TEAM,
        sealed_client_user_id="v1.sealed-1",
        claim_id=uuid.uuid4(),
        sealed_fallback_time_zone=None,
        sealed_birth_date=None,
        ingestion_start=None,
        ingestion_end=None,
    )
    created = user.collect_events()
    new_claim = ClientUserIdClaim.id_for_digest(client_user_id_digest(SECRET, "client-2"))
    user.change_client_user_id(CTX, T, "v1.sealed-2", new_claim)
    (event,) = assert_replays(user, created)
    assert isinstance(event, User.ClientUserIdChanged)
    assert type(event).PERSONAL_FIELDS == ("sealed_new_client_user_id",)
    assert (event.old_client_user_id, event.new_client_user_id) == (None, None)
    record = stored(event)
    assert record.topic == "healthledger:User.ClientUserIdChanged.v1"
    assert record.state.endswith(
        b'"sealed_new_client_user_id":"v1.sealed-2","new_claim_id":{"_type_":"uuid_hex",'
        b'"_data_":"' + new_claim.hex.encode() + b'"},"class_version":2}'
    )
    assert (user.sealed_client_user_id, user.claim_id, user.client_user_id) == (
        "v1.sealed-2",
        new_claim,
        None,
    )


def test_a_change_stored_before_moves_to_the_claim_of_its_clear_value() -> None:
    records = [
        StoredEvent(USER, 1, "healthledger:User.Created.v1", CREATED_V2.encode()),
        StoredEvent(USER, 2, "healthledger:User.ClientUserIdChanged.v1", CHANGED_V1.encode()),
    ]
    events = [MAPPER.to_domain_event(record) for record in records]
    changed = events[1]
    assert isinstance(changed, User.ClientUserIdChanged)
    assert (changed.new_client_user_id, changed.sealed_new_client_user_id) == ("client-2", None)
    assert changed.new_claim_id is None
    user = replayed(events)
    assert isinstance(user, User) and user.version == 2
    assert user.client_user_id == "client-2" and user.sealed_client_user_id is None
    assert user.claim_id == ClientUserIdClaim.id_for(TEAM, "client-2")


def test_a_team_records_its_client_user_id_secret_once_and_sealed() -> None:
    team = Team.create(CTX, T, uuid.uuid4(), "Team A", "eu")
    created = team.collect_events()
    assert team.sealed_client_user_id_secret is None
    team.create_client_user_id_secret(CTX, T, "v1.sealed-secret", legacy_claims=False)
    with pytest.raises(ValueError, match="already"):
        team.create_client_user_id_secret(CTX, T, "v1.other", legacy_claims=True)
    (event,) = assert_replays(team, created)
    assert isinstance(event, Team.ClientUserIdSecretCreated)
    assert type(event).PERSONAL_FIELDS == ("sealed_secret",)
    assert (team.sealed_client_user_id_secret, team.client_user_id_legacy_claims) == (
        "v1.sealed-secret",
        False,
    )
    # A team without one keeps the attribute dict it always had (what snapshots store).
    fresh = Team.create(CTX, T, uuid.uuid4(), "Team B", "eu")
    assert "sealed_client_user_id_secret" not in vars(fresh)
    assert SECRET_BYTES == 32
