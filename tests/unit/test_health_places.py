"""A user's provider and resource names as keyed digests (`health_data/places.py`, ADR
0047): a digest is the user's own, rows are named back from the catalog, a kept copy holds
no key, and a process's kept digests leave by age, count and erasure."""

from __future__ import annotations

import os
from datetime import date
from types import SimpleNamespace
from uuid import UUID

import pytest
from healthledger.adapters.persistence.health_data.places import (
    PlaceDigests,
    Places,
    is_keyed,
    known_providers,
    known_resources,
    provider_digest,
    resource_digest,
)
from healthledger.adapters.persistence.keys.key_store import UserCipher

USER = UUID(int=7)


def cipher() -> UserCipher:
    return UserCipher(USER, os.urandom(32))


def test_a_digest_is_keyed_by_the_user_and_tells_provider_from_resource() -> None:
    one, other = cipher(), cipher()
    libre = provider_digest(one.digest, "freestyle_libre")
    assert is_keyed(libre) and not is_keyed("freestyle_libre")
    assert libre == provider_digest(one.digest, "freestyle_libre")
    assert libre != provider_digest(other.digest, "freestyle_libre")
    # The same word as a provider and as a resource: two digests.
    assert provider_digest(one.digest, "glucose") != resource_digest(one.digest, "glucose")
    # No name of the catalog looks keyed (the start tells old rows by it).
    assert not any(is_keyed(name) for name in (*known_providers(), *known_resources()))
    assert {"freestyle_libre", "oura"} <= set(known_providers())
    assert {"glucose", "blood_pressure", "heartrate"} <= set(known_resources())


def test_rows_are_named_back_and_a_row_of_no_known_name_is_left_out() -> None:
    key = cipher()
    places = Places(key.digest)
    period = date(2026, 3, 1)
    row = SimpleNamespace(
        provider=provider_digest(key.digest, "freestyle_libre"),
        resource=resource_digest(key.digest, "glucose"),
        period=period,
        version=2,
        sealed=b"x",
    )
    stranger = SimpleNamespace(
        provider=provider_digest(key.digest, "no_such_maker"),
        resource=row.resource,
        period=period,
        version=1,
        sealed=b"y",
    )
    (named,) = places.named([row, stranger])
    assert (named.provider, named.resource, named.period, named.version, named.sealed) == (
        "freestyle_libre",
        "glucose",
        period,
        2,
        b"x",
    )
    # Another user's key names nothing of these rows.
    assert Places(cipher().digest).named([row]) == []
    # A name computed forward is named back too.
    assert places.provider("no_such_maker") == stranger.provider
    assert places.provider_of(stranger.provider) == "no_such_maker"


def test_a_kept_copy_holds_every_known_digest_and_no_key() -> None:
    key = cipher()
    made = Places(key.digest)
    made.resource("a_resource_of_a_test")
    frozen = made.frozen()
    assert frozen.knows(provider="oura", resource="heartrate")
    assert frozen.knows(resource="a_resource_of_a_test")
    assert not frozen.knows(provider="no_such_maker")
    assert frozen.resource("heartrate") == resource_digest(key.digest, "heartrate")
    with pytest.raises(LookupError):
        frozen.provider("no_such_maker")
    assert frozen._digest is None  # what a process keeps: no key


def test_kept_digests_leave_by_age_count_and_erasure() -> None:
    now = [0.0]
    kept = PlaceDigests(max_users=2, max_age=60.0, clock=lambda: now[0])
    users = [UUID(int=n) for n in range(3)]
    for user in users:
        kept.keep(user, Places(cipher().digest).frozen())
    assert kept.get(users[0]) is None  # pushed out by the third
    assert kept.get(users[1]) is not None and kept.get(users[2]) is not None
    kept.forget([users[1]])
    assert kept.get(users[1]) is None and kept.get(users[2]) is not None
    now[0] = 61.0
    assert kept.get(users[2]) is None
