"""Read models: projections of the event log into the SQL tables the API reads, one
module per context (`users`, `teams`, `connections`, `webhooks`), one entry point
(`read_models.ReadModels`), and the write-time erasure effects (`erasure`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import Connection

# What writes an event's rows in the transaction that stores it.
Handler = Callable[[Connection, Any], None]
# The read models' handlers, by the event class each projects.
Handlers = Mapping[type, Handler]
DeclaredHandler = TypeVar("DeclaredHandler", bound=Callable[..., None])

# Every context's handlers, declared with `@handles` as its module is imported
# (`read_models` imports them all).
_DECLARED: dict[type, Handler] = {}


def handles(*event_classes: type) -> Callable[[DeclaredHandler], DeclaredHandler]:
    """Declare the decorated function the projection of events of these classes: one
    handler per class, so a second one is an error at import, not a silent override."""

    def declare(handler: DeclaredHandler) -> DeclaredHandler:
        for event_class in event_classes:
            if _DECLARED.setdefault(event_class, handler) is not handler:
                raise RuntimeError(f"{event_class.__qualname__} has two projection handlers")
        return handler

    return declare


def declared_handlers() -> dict[type, Handler]:
    """The handlers declared so far, by event class."""
    return dict(_DECLARED)
