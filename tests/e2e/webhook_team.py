"""The bootstrapped team of a service the webhook tests build, its endpoints and its
connected users: what the delivery tests and the mirror's lifecycle tests (a receiver
fed by real deliveries) set up before they dispatch."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import teams
from healthledger.domain.context import CommandContext
from sqlalchemy import select

# Who creates the endpoints and connections (and, by default, the users).
CTX = CommandContext(actor="test:actor", request_id="req-webhooks")


def the_team(svc: Service) -> UUID:
    with svc.db.read() as conn:
        return conn.execute(select(teams.c.team_id)).scalar_one()


def endpoint(svc: Service, url: str, **fields: Any) -> tuple[UUID, str]:
    team = the_team(svc)
    created = svc.webhooks.create(CTX, team, "sandbox", url=url, **fields)
    return created.id, svc.webhooks.secrets(team, "sandbox", created.id).current


def connected_user(
    svc: Service, provider: str = "freestyle_libre", ctx: CommandContext = CTX, **extra: Any
) -> UUID:
    team = the_team(svc)
    user = svc.users.create_user(ctx, team, client_user_id=f"hook-{provider}-{len(extra)}")
    entry = svc.catalog[provider]
    svc.connections.connect_demo(CTX, team, user.id, provider, entry.supported_resources, **extra)
    svc.jobs.run_due_pulls()
    return user.id
