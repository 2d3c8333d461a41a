"""The stream ids of a user's connections and feeds, as the service finds them (keyed by
the user's data key since issue 29: no test derives them from the user and the provider
alone; see domain/connections/stream_ids.py)."""

from __future__ import annotations

from uuid import UUID

from healthledger.adapters.composition import Service


def stream_of_connection(service: Service, user_id: UUID | str, provider: str) -> UUID:
    """The id of the user's connection of `provider` (or the one a connect would take)."""
    return service.pulls.streams.connection_id(UUID(str(user_id)), provider)


def stream_of_feed(service: Service, user_id: UUID | str, provider: str, resource: str) -> UUID:
    """The id of the feed of `resource` of the user's connection of `provider`."""
    user = UUID(str(user_id))
    connection_id = service.pulls.streams.connection_id(user, provider)
    return service.pulls.streams.feed_id(connection_id, user, resource)
