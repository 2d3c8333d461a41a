"""A connection's and a feed's stream ids (issue 29 §1, ADR 0045): keyed by the user's
data key for new streams, the old uuid5 ids still found, nothing testable without the key."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.connections.stream_ids import (
    StreamIds,
    keyed_connection_id,
    keyed_feed_id,
    legacy_connection_id,
    legacy_feed_id,
)

from tests.unit.in_memory import CTX, World
from tests.unit.vaults import DigestKeys

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
USER = UUID("00000000-0000-4000-8000-000000000001")
SLUGS = ("freestyle_libre", "dexcom", "oura", "whoop", "garmin", "fitbit", "withings")
RESOURCES = ("glucose", "sleep", "heartrate", "workouts", "weight", "blood_pressure")


def test_the_old_ids_are_the_uuid5s_streams_were_stored_under() -> None:
    # Pinned: the values the service derived before keyed ids, which stored streams keep.
    assert legacy_connection_id(USER, "freestyle_libre") == UUID(
        "abfc68c3-040f-58b8-8d00-f6bc93d48109"
    )
    assert legacy_feed_id(UUID("abfc68c3-040f-58b8-8d00-f6bc93d48109"), "glucose") == UUID(
        "b9d50aea-960b-5633-950c-89e5bb93954b"
    )


def test_a_keyed_id_is_stable_under_one_key_and_unrelated_under_another() -> None:
    keys = DigestKeys()
    digest = keys.users_digest(USER)
    other = DigestKeys().users_digest(USER)
    assert digest is not None and other is not None
    keyed = keyed_connection_id(digest, "freestyle_libre")
    assert keyed == keyed_connection_id(digest, "freestyle_libre")
    assert keyed.version == 4  # not told apart from a random id
    assert keyed != keyed_connection_id(other, "freestyle_libre")
    ids = {keyed_connection_id(digest, slug) for slug in SLUGS}
    assert len(ids) == len(SLUGS)
    # Whoever has the user's id but not the key finds nothing by trying the slugs.
    guesses = {legacy_connection_id(USER, slug) for slug in SLUGS}
    assert not ids & guesses
    feeds = {keyed_feed_id(digest, keyed, resource) for resource in RESOURCES}
    assert len(feeds) == len(RESOURCES)
    assert not feeds & {legacy_feed_id(keyed, resource) for resource in RESOURCES}


def connect(world: World, connection_id: UUID, user_id: UUID, provider: str) -> Connection:
    connection = Connection.connect_new(
        CTX,
        T0,
        id=connection_id,
        user_id=user_id,
        team_id=user_id,
        provider=provider,
        sealed_external_user_id=None,
        resource_availability={},
        demo=True,
    )
    world.save(connection)
    return connection


def test_a_lookup_finds_the_keyed_stream_else_the_old_one_else_names_the_keyed_id() -> None:
    world, keys = World(), DigestKeys()
    streams = StreamIds(world.ledger, keys)
    digest = keys.users_digest(USER)
    assert digest is not None
    # Nothing yet: a new connection takes the keyed id.
    keyed = keyed_connection_id(digest, "oura")
    assert streams.connection_id(USER, "oura") == keyed
    connect(world, keyed, USER, "oura")
    assert streams.connection_id(USER, "oura") == keyed
    # A connection made before keyed ids keeps its stream, found by (user, provider).
    old = legacy_connection_id(USER, "freestyle_libre")
    connect(world, old, USER, "freestyle_libre")
    assert streams.connection_id(USER, "freestyle_libre") == old
    # Its feeds: the old one is found, a new one takes a keyed id under it.
    old_feed = ResourceFeed.open(
        CTX,
        T0,
        id=legacy_feed_id(old, "glucose"),
        connection_id=old,
        user_id=USER,
        team_id=USER,
        provider="freestyle_libre",
        resource="glucose",
    )
    world.save(old_feed)
    assert streams.feed_id(old, USER, "glucose") == old_feed.id
    assert streams.feed_id(old, USER, "sleep") == keyed_feed_id(digest, old, "sleep")
    # Once the key is gone, no keyed id can be derived: the keyed stream is not found,
    # the old one still is, and where there is none no guessable id is named.
    keys.erase(USER)
    assert streams.connection_id(USER, "oura") != keyed
    assert world.ledger.find(streams.connection_id(USER, "oura")) is None
    assert streams.connection_id(USER, "freestyle_libre") == old
    assert streams.feed_id(old, USER, "glucose") == old_feed.id
    named = {streams.connection_id(USER, "whoop") for _ in range(3)}
    assert len(named) == 3 and legacy_connection_id(USER, "whoop") not in named
    assert streams.feed_id(old, USER, "sleep") != legacy_feed_id(old, "sleep")
