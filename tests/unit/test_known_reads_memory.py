"""What a process keeps of the stored days it read (ADR 0043), without a database: kept
only while listening, never a read that raced a change, forgotten per user by the
notification that names the user (all users by any other payload), aged out, and bounded
in bytes; on SQLite, given only while the database's data version is the one it was read
at."""

from __future__ import annotations

from datetime import UTC, date, datetime
from uuid import UUID, uuid4

import pytest
from healthledger.adapters.persistence.health_data import known_reads
from healthledger.adapters.persistence.health_data.known_reads import KnownReads
from healthledger.domain.connections.health_data import StoredDay
from healthledger.domain.connections.summary_ids import SummaryIds

NOW = datetime(2026, 3, 2, tzinfo=UTC)
USER = UUID("0f8b3c52-6a1e-4d7f-9b20-3c5e8a1d2f47")


def day(text: bytes = b"[1,2,3]") -> StoredDay:
    return StoredDay("oura", "heartrate", date(2026, 3, 2), text, NOW, NOW, SummaryIds(USER, None))


def asked(user_id: UUID) -> tuple[object, ...]:
    return ("team", user_id, "heartrate", "2026-03-02")


def read_and_keep(known: KnownReads, user_id: UUID, text: bytes = b"[1,2,3]") -> None:
    _, reading = known.get(asked(user_id))
    known.keep(asked(user_id), user_id, [day(text)], reading)


def test_nothing_is_kept_or_answered_until_the_listener_listens() -> None:
    known, user = KnownReads(), uuid4()
    read_and_keep(known, user)
    known.set_listening(True)
    assert known.get(asked(user))[0] is None
    read_and_keep(known, user)
    assert known.get(asked(user))[0] == [day()]
    assert known.hits == 1
    # Listening stops (the connection failed): nothing kept counts any more.
    known.set_listening(False)
    assert known.get(asked(user))[0] is None


def test_a_read_that_raced_a_change_is_not_kept() -> None:
    known, user = KnownReads(), uuid4()
    known.set_listening(True)
    _, reading = known.get(asked(user))
    known.heard(str(user))  # committed while the read ran: it may predate it
    known.keep(asked(user), user, [day()], reading)
    assert known.get(asked(user))[0] is None


def test_a_read_that_raced_only_other_users_changes_is_kept() -> None:
    """On a busy database some user's data changes all the time (and on a test server,
    another schema's): that must not keep every read from being kept."""
    known, user = KnownReads(), uuid4()
    known.set_listening(True)
    _, reading = known.get(asked(user))
    for _ in range(3):
        known.heard(str(uuid4()))
    known.keep(asked(user), user, [day()], reading)
    assert known.get(asked(user))[0] == [day()]
    # A change of everyone's (a TRUNCATE) overtakes any read in flight.
    _, reading = known.get(asked(user))
    known.heard("")
    known.keep(asked(user), user, [day()], reading)
    assert known.get(asked(user))[0] is None


def test_a_forgetting_no_longer_remembered_still_overtakes_the_reads_it_raced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(known_reads, "FORGETTINGS_KEPT", 2)
    known, user = KnownReads(), uuid4()
    known.set_listening(True)
    _, reading = known.get(asked(user))
    known.heard(str(user))
    for _ in range(3):  # the user's forgetting is pushed out by later ones
        known.heard(str(uuid4()))
    known.keep(asked(user), user, [day()], reading)
    assert known.get(asked(user))[0] is None
    # A read that began after them all is kept.
    read_and_keep(known, user)
    assert known.get(asked(user))[0] == [day()]


def test_a_notification_forgets_its_user_only_and_any_other_payload_every_user() -> None:
    known, user, other = KnownReads(), uuid4(), uuid4()
    known.set_listening(True)
    read_and_keep(known, user)
    read_and_keep(known, other)
    known.heard(str(user))
    assert known.get(asked(user))[0] is None and not known.holds(user)
    assert known.get(asked(other))[0] == [day()]
    known.heard("")  # a TRUNCATE
    assert known.get(asked(other))[0] is None and not known.holds(other)


def test_entries_age_out_and_the_bytes_kept_are_bounded() -> None:
    now = [0.0]
    known = KnownReads(max_bytes=20, max_age=60.0, clock=lambda: now[0])
    known.set_listening(True)
    first, second, third = uuid4(), uuid4(), uuid4()
    read_and_keep(known, first, b"[0123456789]")  # 12 bytes
    read_and_keep(known, second, b"[01234567]")  # 10: over 20, the oldest goes
    assert known.get(asked(first))[0] is None and not known.holds(first)
    assert known.get(asked(second))[0] == [day(b"[01234567]")]
    read_and_keep(known, third, b"[" + b"0" * 30 + b"]")  # larger than all: not kept
    assert known.get(asked(third))[0] is None
    now[0] = 61.0
    assert known.get(asked(second))[0] is None


def test_with_a_data_version_an_answer_is_given_only_while_nothing_was_committed() -> None:
    version = [7]
    known, user, other = KnownReads(version=lambda: version[0]), uuid4(), uuid4()
    assert known.listening  # nothing to hear: the version says it
    read_and_keep(known, user)
    read_and_keep(known, other)
    assert known.get(asked(user))[0] == [day()]
    version[0] = 8  # anything committed, by any connection
    assert known.get(asked(user))[0] is None
    assert not known.holds(user) and not known.holds(other)  # all forgotten at once
    # A read that began before a commit is kept with the version it began at: stale at
    # once, never given.
    _, reading = known.get(asked(user))
    version[0] = 9
    known.keep(asked(user), user, [day()], reading)
    assert known.get(asked(user))[0] is None
