"""Aggregates known current, without a database (ADR 0011, ADR 0020): what a process
knows of the log's head on PostgreSQL (`postgres.KnownHead`: the epoch its kept
aggregates are current in stays only while every row linked onto the chain is its own),
and a kept object that changes while it is copied is never handed out."""

from __future__ import annotations

from typing import Any

from healthledger.adapters.persistence.engine.postgres import KnownHead
from healthledger.adapters.persistence.eventstore.repository import KnownCurrentRepository


def test_the_epoch_stays_while_only_this_process_links_rows() -> None:
    known = KnownHead()
    epoch = known.reading(10)  # the first reading: everything up to 10 is known now
    assert known.wrote(10, 12) == epoch  # onto the head it knew
    assert known.reading(12) == epoch
    assert known.wrote(12, 13) == epoch
    assert known.reading(13) == epoch


def test_a_row_linked_by_another_process_starts_a_new_epoch() -> None:
    known = KnownHead()
    epoch = known.reading(10)
    # Found by a reading: another process linked row 11.
    later = known.reading(11)
    assert later != epoch
    assert known.reading(11) == later  # and from there on it is known again
    # Found by a write: the head it linked onto is not the one it knew.
    assert known.wrote(12, 14) not in (epoch, later)


def test_reports_out_of_order_only_start_new_epochs() -> None:
    # Two threads' commits reported the other way round: never the same epoch for a
    # head the process did not know all of.
    known = KnownHead()
    epoch = known.reading(10)
    second = known.wrote(12, 14)  # the later commit reports first: 11-12 unknown
    assert second != epoch
    first = known.wrote(10, 12)  # then the earlier one
    assert first != second
    assert known.reading(14) not in (epoch, second, first)


class Kept:
    """An aggregate's stand-in whose saver's thread changes it in the middle of a copy:
    its version first, as an event does."""

    def __init__(self, version: int, change_while_copied: str | None = None) -> None:
        self.version = version
        self.change_while_copied = change_while_copied
        self.count = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> Kept:
        copied = Kept(self.version)
        if self.change_while_copied == "version":
            self.version += 1
        elif self.change_while_copied == "size":
            raise RuntimeError("dictionary changed size during iteration")
        copied.count = self.count
        return copied


def test_a_kept_object_unchanged_is_handed_out_as_a_copy() -> None:
    kept = Kept(3)
    copied = KnownCurrentRepository.unchanged_copy(kept, 3)
    assert isinstance(copied, Kept) and copied is not kept and copied.version == 3


def test_a_kept_object_changed_before_or_while_it_is_copied_is_not_handed_out() -> None:
    assert KnownCurrentRepository.unchanged_copy(Kept(4), 3) is None
    assert KnownCurrentRepository.unchanged_copy(Kept(3, "version"), 3) is None
    assert KnownCurrentRepository.unchanged_copy(Kept(3, "size"), 3) is None
