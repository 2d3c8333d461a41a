"""The makers' own payloads as received (issue 34, `*.get_raw`; docs/data.md#raw-payloads).

A fetch maps what a maker answered into our days (`ProviderAdapter.fetch`); what the maker
answered before that mapping is kept too, per pull: every JSON answer a fetch read, in the
order it was read, under the resource the fetch was for and the window of days it asked
for. The pull engine opens a `RawCapture` around a chunk's fetches and hands what it
captured to the store with the chunk's days, so it is written in the same transaction.

The capture is a context variable rather than a parameter of `fetch`: the readers record
where they read (`MakerSession.get`, the demo devices' generator), whatever path led
there, and an adapter that does not record anything is simply kept without raw payloads.
A read a maker's reader shares between the resources of a pull (`RecentReads`) is read
once: the answers it was made of are kept with it and counted for every resource it
serves (`answers_of`, `served`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

# The resources whose raw payloads are kept: those the official clients read raw
# (`sleep.get_raw`, `activity.get_raw`, `workouts.get_raw`, `body.get_raw`,
# `profile.get_raw`). A timeseries' answers (a day's heart rate, pages of samples) are
# not kept: nothing reads them raw, and sealing them would slow every pull.
RAW_RESOURCES = frozenset({"sleep", "activity", "workouts", "body", "profile"})

# The capture of the fetch running in this context (None: nothing is kept).
_CURRENT: ContextVar[RawCapture | None] = ContextVar("raw_capture", default=None)


@dataclass(frozen=True)
class RawAnswer:
    """One answer of a maker: what was asked (the endpoint's path and query, or a demo
    device's generator and day) and the JSON it answered."""

    request: str
    answer: Any


@dataclass(frozen=True)
class RawPull:
    """What one fetch of a resource received for the days first..last (inclusive)."""

    first: date
    last: date
    fetched_at: datetime
    answers: Sequence[RawAnswer]


@dataclass
class RawCapture:
    """The answers read while it is current, by the resource being fetched."""

    resource: str | None = None
    by_resource: dict[str, list[RawAnswer]] = field(default_factory=dict)
    # The answers read since a shared read began (`answers_of`), per read.
    _since: list[list[RawAnswer]] = field(default_factory=list)
    # Per resource, the answers' JSON objects kept (by identity): an answer served again
    # from a shared read is kept once.
    _held: dict[str, set[int]] = field(default_factory=dict)

    def record(self, answer: RawAnswer) -> None:
        if self.resource is not None and self.resource in RAW_RESOURCES:
            held = self._held.setdefault(self.resource, set())
            if id(answer.answer) not in held:
                held.add(id(answer.answer))
                self.by_resource.setdefault(self.resource, []).append(answer)
        for read in self._since:
            read.append(answer)

    def pulls(
        self, first: date, last: date, fetched_at: datetime, resources: Sequence[str]
    ) -> dict[str, RawPull]:
        """The pull of each of `resources` that received an answer."""
        return {
            resource: RawPull(first, last, fetched_at, tuple(self.by_resource[resource]))
            for resource in resources
            if self.by_resource.get(resource)
        }


@contextmanager
def capturing() -> Iterator[RawCapture]:
    """A capture current for the block (the previous one, if any, afterwards)."""
    capture = RawCapture()
    token = _CURRENT.set(capture)
    try:
        yield capture
    finally:
        _CURRENT.reset(token)


@contextmanager
def fetching(resource: str) -> Iterator[None]:
    """The answers read in the block are `resource`'s (when a capture is current)."""
    capture = _CURRENT.get()
    if capture is None:
        yield
        return
    before, capture.resource = capture.resource, resource
    try:
        yield
    finally:
        capture.resource = before


def record(request: str, answer: Any) -> None:
    """A maker answered `answer` to `request`: kept when a capture is current."""
    capture = _CURRENT.get()
    if capture is not None:
        capture.record(RawAnswer(request, answer))


@contextmanager
def answers_of() -> Iterator[list[RawAnswer]]:
    """The answers recorded in the block (a read to be shared: `served` counts them again
    for each resource it serves later)."""
    found: list[RawAnswer] = []
    capture = _CURRENT.get()
    if capture is None:
        yield found
        return
    capture._since.append(found)
    try:
        yield found
    finally:
        capture._since.remove(found)


def served(answers: Sequence[RawAnswer]) -> None:
    """A shared read made of `answers` served the resource being fetched now."""
    capture = _CURRENT.get()
    if capture is not None:
        for answer in answers:
            capture.record(answer)
