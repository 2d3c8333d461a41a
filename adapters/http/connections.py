"""Team API routes for provider connections (spec 2.2, endpoint 2; gaps.md Provider
connections) and the demo connection of ours (a simulated device, no outside world)."""

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends
from healthledger.adapters.composition import Service
from healthledger.adapters.http.auth import TeamCaller, team_caller_dependency
from healthledger.domain.errors import InvalidRequest
from pydantic import BaseModel, ConfigDict

_NOT_FOUND = {404: {"description": "Unknown user, another team's user, or scheduled for deletion"}}


class DemoConnectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: UUID
    provider: str


def connections_router(service: Service) -> APIRouter:
    router = APIRouter(tags=["connections"])
    Caller = Annotated[TeamCaller, Depends(team_caller_dependency(service.team_queries))]
    catalog = service.catalog

    def known(provider: str, location: str) -> Any:
        entry = catalog.get(provider)
        if entry is None:
            raise InvalidRequest("Unknown provider slug.", "provider", location)
        return entry

    @router.post("/v2/link/connect/demo", responses=_NOT_FOUND)
    def connect_demo(body: DemoConnectRequest, caller: Caller) -> Any:
        """Connect a simulated device that yields realistic, deterministic data (ours)."""
        entry = known(body.provider, "body")
        if not entry.demo:
            raise InvalidRequest(
                "This provider has no demo device; see the catalog for the demo ones.",
                "provider",
            )
        service.connections.connect_demo(
            caller.ctx, caller.team_id, body.user_id, entry.slug, entry.supported_resources
        )
        return {"success": True, "detail": f"Connected a demo {entry.name} device."}

    @router.get("/v2/user/providers/{user_id:uuid}", responses=_NOT_FOUND)
    def user_providers(user_id: UUID, caller: Caller) -> Any:
        """Spec 2.2: the user's connections (deregistered ones are not listed)."""
        service.users.load_live(caller.team_id, user_id)
        return {"providers": service.connection_queries.providers_of(user_id)}

    @router.delete("/v2/user/{user_id:uuid}/{provider}", responses=_NOT_FOUND)
    def deregister(user_id: UUID, provider: str, caller: Caller) -> Any:
        known(provider, "path")
        service.connections.deregister(caller.ctx, caller.team_id, user_id, provider)
        return {"success": True}

    return router
