"""Who caused a change and under which request: recorded on every event (the audit trail)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

SCHEDULER = "system:scheduler"
BOOTSTRAP = "system:bootstrap"
OPERATOR_CLI = "system:cli"
# The environment of what a caller without one (the CLI, an embedding app) creates.
DEFAULT_ENVIRONMENT = "sandbox"


@dataclass(frozen=True)
class CommandContext:
    """The actor (``team_api_key:<id>``, ``system:scheduler``...) and the request id, and
    for a team API key the environment it belongs to (what a user it creates belongs to:
    its webhooks go to that environment's endpoints)."""

    actor: str
    request_id: str
    environment: str | None = None

    @classmethod
    def system(cls, actor: str, request_id: str | None = None) -> CommandContext:
        return cls(actor=actor, request_id=request_id or f"job-{uuid.uuid4()}")


def team_api_key_actor(key_id: uuid.UUID) -> str:
    return f"team_api_key:{key_id}"


def link_token_actor(token_id: uuid.UUID) -> str:
    """The person holding a link: what they do through the link page is recorded as theirs."""
    return f"link_token:{token_id}"


class AttributedEvent(Protocol):
    """What every event of the ledger carries (each aggregate's `Event` declares the actor
    and the request id beside eventsourcing's fields): what changed, when, by whom."""

    originator_id: uuid.UUID
    originator_version: int
    timestamp: datetime
    actor: str
    request_id: str


def attributed(event: Any) -> AttributedEvent:
    """An event read back from the ledger, as the `AttributedEvent` it is. eventsourcing
    types what it reads as its bare event protocol (no timestamp, no actor); ours all
    carry them, which the stored-event tests hold for every aggregate."""
    return cast(AttributedEvent, event)
