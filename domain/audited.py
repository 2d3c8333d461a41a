"""The ledger's aggregates: each event records who caused it and under which request (the
audit trail), and declares what the adapters that follow the log derive their tables from.

An aggregate declares, once, whether its stream belongs to a user (`USER_STREAM`): the
user's audit lists it, and the user's erasure empties its read models. An event declares
the public webhook events it announces (`ANNOUNCES`), whether it hands its stream to a
further user (`HANDS_STREAM_TO`) and whether it destroys its originator's data key
(`SHREDS_KEY`). `Audited.__init_subclass__` refuses an aggregate that leaves out what it
must declare, when its module is imported, so an event cannot be added and forgotten.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, ClassVar, Self

from eventsourcing.domain import Aggregate
from healthledger.domain.context import CommandContext

# Where a read model's place is named in lifecycle.ERASURE_REMOVES: "read_model:<table>".
READ_MODEL_PLACE = "read_model:"


@dataclass(frozen=True)
class UserStream:
    """An aggregate whose stream belongs to one user."""

    # What the user's audit lists the stream as (the stream_owners table's kind).
    kind: str
    # The field of the founding (Created) event that names the user; a user's own stream
    # is the user (`originator_id`). The founding event names the team in `team_id`.
    owner: str = "user_id"
    # The places of lifecycle.ERASURE_REMOVES (`read_model:<table>`) that hold what its
    # events project about the user: the user's erasure empties them, and so does a
    # rebuild's projection of the user's Erased event.
    read_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for place in self.read_models:
            if not place.startswith(READ_MODEL_PLACE):
                raise ValueError(f"a read model's place is named {READ_MODEL_PLACE}<table>")


class Audited(Aggregate):
    """An aggregate whose events carry the actor and the request id of the command that
    recorded them. A concrete one (with a pinned TOPIC) declares `USER_STREAM`: a
    `UserStream`, or None when no user owns it (an organization, a team, a key)."""

    USER_STREAM: ClassVar[UserStream | None]

    class Event(Aggregate.Event):
        actor: str
        request_id: str

        # The public webhook event types it announces (domain/webhooks/announcements.py
        # says when); a `stem.*` entry stands for those whose name depends on the stream
        # (a resource's data events). An event of a user's stream declares it, empty for
        # none: what announces is decided where the event is added.
        ANNOUNCES: ClassVar[tuple[str, ...]] = ()
        # The field naming a further user who owns the stream from this event on (a
        # claim of a client_user_id taken by another user); None: no hand-over.
        HANDS_STREAM_TO: ClassVar[str | None] = None
        # Whether it destroys its originator's data key for good (a user's erasure, a
        # team's deletion): done where it is recorded, never again on a rebuild.
        SHREDS_KEY: ClassVar[bool] = False
        # The topic of the version that replaced it (an old version, recorded no more,
        # whose stored records the service's start redacts into that version: ADR 0028);
        # None: a current version.
        SUPERSEDED_BY: ClassVar[str | None] = None
        # Fields the domain reads in clear that the stored record holds only sealed with
        # the stream owner's data key, together under `sealed_facts` (the persistence
        # adapter seals and opens them: ADR 0032), each with what it reads as once the
        # key is gone; the event must name its owner in `user_id`.
        SEALED_FACTS: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    @classmethod
    def new(cls, ctx: CommandContext, now: datetime, **fields: Any) -> Self:
        """A new aggregate, its Created event recorded under `ctx` at `now`."""
        # Each concrete aggregate's __init__ takes its Created event's fields, which the
        # base's signature cannot name.
        construct: Callable[..., Self] = cls
        return construct(timestamp=now, actor=ctx.actor, request_id=ctx.request_id, **fields)

    def record(
        self, ctx: CommandContext, now: datetime, event_class: type[Audited.Event], **fields: Any
    ) -> None:
        """Record an event of this aggregate under `ctx` at `now` (and apply it)."""
        self.trigger_event(
            event_class, timestamp=now, actor=ctx.actor, request_id=ctx.request_id, **fields
        )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "TOPIC" in vars(cls):
            check_declarations(cls)


def events_of(aggregate: type[Aggregate]) -> tuple[type[Audited.Event], ...]:
    """The event classes an aggregate declares (its `Event` base left out), each once: a
    founding event with its own name (`Issued`) is also the aggregate's `Created`."""
    found: dict[type, None] = {}
    for name, value in vars(aggregate).items():
        if name != "Event" and isinstance(value, type) and issubclass(value, Audited.Event):
            found[value] = None
    return tuple(found)


def _declares(event_class: type, name: str) -> bool:
    """Whether the event class (or a base of its own aggregate's) declares `name`, rather
    than leaving it to the default of `Audited.Event`."""
    declaring = next(cls for cls in event_class.__mro__ if name in vars(cls))
    return declaring is not Audited.Event


def _fields(event_class: type) -> set[str]:
    # eventsourcing's events are dataclasses: their fields, inherited ones included.
    return {field.name for field in dataclasses.fields(event_class)}


def check_declarations(aggregate: type[Audited]) -> None:
    """Raise TypeError if `aggregate` or one of its events leaves out a declaration it
    needs, or declares one it cannot hold."""
    name = aggregate.__qualname__
    if "USER_STREAM" not in vars(aggregate):
        raise TypeError(f"{name} must declare USER_STREAM (a UserStream, or None)")
    stream = aggregate.USER_STREAM
    events = events_of(aggregate)
    if stream is not None:
        founding = _fields(aggregate.Created)
        if stream.owner not in founding or "team_id" not in founding:
            raise TypeError(
                f"{name}.Created must name the user ({stream.owner}) and the team (team_id)"
            )
    for event in events:
        label = f"{name}.{event.__name__}"
        if stream is not None and not _declares(event, "ANNOUNCES"):
            raise TypeError(f"{label} must declare ANNOUNCES (the webhook event types, or ())")
        # An event of a stream no user owns may announce a team-level type (a team's
        # event destination disabled: domain/webhooks/announcements.py), never hand over.
        if stream is None and event.HANDS_STREAM_TO:
            raise TypeError(f"{label}: only an event of a user's stream hands it over")
        if event.HANDS_STREAM_TO is not None and event.HANDS_STREAM_TO not in _fields(event):
            raise TypeError(f"{label} hands its stream to a field it does not have")
        if event.SEALED_FACTS and not {"user_id", *event.SEALED_FACTS} <= _fields(event):
            raise TypeError(f"{label} seals facts it does not have, or names no user_id")


def _concrete(base: type[Audited]) -> Iterator[type[Audited]]:
    for sub in base.__subclasses__():
        if "TOPIC" in vars(sub):
            yield sub
        yield from _concrete(sub)


@functools.cache
def audited_aggregates() -> tuple[type[Audited], ...]:
    """Every aggregate of the ledger, every domain module imported first: what the
    adapters derive their tables from (by topic, so their order is stable)."""
    import healthledger.domain

    for module in pkgutil.walk_packages(
        healthledger.domain.__path__, f"{healthledger.domain.__name__}."
    ):
        importlib.import_module(module.name)
    return tuple(sorted(set(_concrete(Audited)), key=topic_of))


def topic_of(cls: type) -> str:
    """The topic a class pins (what the log stores for its events)."""
    return str(vars(cls)["TOPIC"])


def audited_events() -> tuple[type[Audited.Event], ...]:
    """Every event class of every aggregate of the ledger."""
    return tuple(event for aggregate in audited_aggregates() for event in events_of(aggregate))
