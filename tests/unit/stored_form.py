"""Domain events in their stored form, as eventsourcing's stock mapper writes them: what
the unit tests hold our events to, and replay aggregates from."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, DomainEventProtocol
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Mapper,
    StoredEvent,
    UUIDAsHex,
)
from healthledger.adapters.persistence.eventstore.transcoder import DateAsISO

from tests.recorded import loaded


def stock_transcoder() -> JSONTranscoder:
    """eventsourcing's JSON transcoder with the transcodings the ledger registers."""
    transcoder = JSONTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO(), DateAsISO()):
        transcoder.register(transcoding)
    return transcoder


MAPPER: Mapper[UUID] = Mapper(stock_transcoder())


def stored(event: DomainEventProtocol[UUID]) -> StoredEvent:
    return MAPPER.to_stored_event(event)


def replayed(events: Iterable[DomainEventProtocol[UUID]]) -> Any:
    """The aggregate that `events` make, each one stored and loaded back first."""
    aggregate: Any = None
    for event in events:
        aggregate = loaded(MAPPER, stored(event)).mutate(aggregate)
    return aggregate


def assert_replays(aggregate: Aggregate, earlier: Iterable[Any] = ()) -> list[Any]:
    """Collect the aggregate's pending events and check that replaying them, after the
    `earlier` ones already collected, through their stored form rebuilds it equal
    (same class, same attributes). Returns the events collected."""
    events = list(aggregate.collect_events())
    assert replayed([*earlier, *events]) == aggregate
    return events
