"""A user's summary and device ids (ADR 0057): keyed by the user's data key for a key of
the keyed-ids format (every user created since), the uuid5s as before for an older key
up to the cut-over day (revision 0050) and keyed from it on; the format travels inside
the key's material, and no other is taken."""

from __future__ import annotations

from datetime import date, timedelta
from uuid import UUID

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from healthledger.adapters.persistence.keys.key_store import UserCipher, new_data_key
from healthledger.domain.connections.summary_ids import legacy_device_id, legacy_summary_id

USER = UUID("0f8b3c52-6a1e-4d7f-9b20-3c5e8a1d2f47")
OTHER = UUID("7c9e2d41-5b3a-4f8e-a1c6-2d4b8e0f9a13")
DAY = date(2026, 3, 2)
D = DAY.isoformat()


def test_a_key_made_before_keyed_ids_keeps_the_uuid5s_it_was_answered_with() -> None:
    ids = UserCipher(USER, AESGCM.generate_key(bit_length=256)).summary_ids
    assert not ids.keyed
    assert ids.summary("oura", "sleep", DAY, D) == legacy_summary_id(USER, "oura", "sleep", D)
    assert ids.device("freestyle_libre") == legacy_device_id(USER, "freestyle_libre")
    # The old ids, exactly as the code before keyed ids derived them (a customer holds
    # them): computed by that code.
    assert str(ids.summary("oura", "sleep", DAY, D)) == "629e21b3-22bd-5a7b-bd78-3d81ec241b6b"
    assert str(ids.device("freestyle_libre")) == "f3cbdc4a-ef9d-5db0-b364-341ad7bf9811"


def test_an_older_key_takes_keyed_ids_for_the_days_from_the_cut_over_on() -> None:
    key = AESGCM.generate_key(bit_length=256)
    cut_over = DAY + timedelta(days=7)
    ids = UserCipher(USER, key, cut_over).summary_ids
    assert not ids.keyed
    before = cut_over - timedelta(days=1)
    # Up to the cut-over: the ids it was answered; its devices' too (never stored).
    assert ids.summary("oura", "sleep", before, before.isoformat()) == legacy_summary_id(
        USER, "oura", "sleep", before.isoformat()
    )
    assert ids.summary("oura", "workouts", before, "w-1") == legacy_summary_id(
        USER, "oura", "workouts", "w-1"
    )
    assert ids.device("oura") == legacy_device_id(USER, "oura")
    # From the cut-over on: keyed, as a new user's of the same key would be.
    new = UserCipher(USER, b"\x02" + key).summary_ids
    for day in (cut_over, cut_over + timedelta(days=300)):
        found = ids.summary("oura", "sleep", day, day.isoformat())
        assert found == new.summary("oura", "sleep", day, day.isoformat())
        assert found != legacy_summary_id(USER, "oura", "sleep", day.isoformat())
        # A session goes by the day it is stored under, not by its key.
        assert ids.summary("oura", "workouts", day, "w-1") == new.summary(
            "oura", "workouts", day, "w-1"
        )


def test_a_new_users_ids_are_keyed_stable_and_tell_nothing_of_the_names() -> None:
    key = new_data_key(keyed_ids=True)
    ids = UserCipher(USER, key).summary_ids
    assert ids.keyed
    sleep = ids.summary("oura", "sleep", DAY, D)
    # Stable: the same key (another process, a later read, any cut-over) derives the same.
    assert UserCipher(USER, key, DAY).summary_ids.summary("oura", "sleep", DAY, D) == sleep
    # Looks like a random id, and is none of the guessable ones.
    assert sleep.version == 4
    assert sleep != legacy_summary_id(USER, "oura", "sleep", D)
    assert ids.device("freestyle_libre") != legacy_device_id(USER, "freestyle_libre")
    # Each name counts, and no two kinds of id meet.
    made = {
        sleep,
        ids.summary("oura", "sleep", DAY, "2026-03-03"),
        ids.summary("oura", "activity", DAY, D),
        ids.summary("fitbit", "sleep", DAY, D),
        ids.device("oura"),
    }
    assert len(made) == 5
    # Another user's key: other ids for the same names.
    other = UserCipher(OTHER, new_data_key(keyed_ids=True)).summary_ids
    assert other.summary("oura", "sleep", DAY, D) != sleep


def test_the_formats_of_a_data_key() -> None:
    assert len(new_data_key(keyed_ids=True)) == 33
    assert len(new_data_key(keyed_ids=False)) == 32
    assert not UserCipher(USER, new_data_key(keyed_ids=False)).summary_ids.keyed
    # The key seals and opens whatever its format.
    for key in (new_data_key(keyed_ids=True), new_data_key(keyed_ids=False)):
        cipher = UserCipher(USER, key)
        assert cipher.open(cipher.seal({"a": 1})) == {"a": 1}
    # A format-2 key is its 32 bytes underneath: what it sealed opens with them alone.
    key = new_data_key(keyed_ids=True)
    assert UserCipher(USER, key[1:]).open(UserCipher(USER, key).seal("x")) == "x"
    for unknown in (b"\x01" + bytes(32), bytes(31), bytes(34)):
        with pytest.raises(ValueError, match="unknown format"):
            UserCipher(USER, unknown)
