"""Who caused a change and under which request: recorded on every event (the audit trail)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

SCHEDULER = "system:scheduler"
BOOTSTRAP = "system:bootstrap"
OPERATOR_CLI = "system:cli"


@dataclass(frozen=True)
class CommandContext:
    """The actor (``team_api_key:<id>``, ``system:scheduler``...) and the request id."""

    actor: str
    request_id: str

    @classmethod
    def system(cls, actor: str, request_id: str | None = None) -> CommandContext:
        return cls(actor=actor, request_id=request_id or f"job-{uuid.uuid4()}")


def team_api_key_actor(key_id: uuid.UUID) -> str:
    return f"team_api_key:{key_id}"


def link_token_actor(token_id: uuid.UUID) -> str:
    """The person holding a link: what they do through the link page is recorded as theirs."""
    return f"link_token:{token_id}"
