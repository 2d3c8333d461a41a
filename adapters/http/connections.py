"""Team API routes for provider connections (spec 2.2, endpoint 2; gaps.md Provider
connections) and the demo connection of ours (a simulated device, no outside world)."""

from typing import Any
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.operations import users as operations
from healthledger.adapters.operations.schemas import (
    DemoConnected,
    DemoConnectRequest,
    Success,
    UserProviders,
)

# Each route declares its answer's model, so that the OpenAPI document describes it
# (the official client's models are checked against it: test_official_client.py).
router = APIRouter(tags=["connections"], route_class=LedgerRoute)


@router.post(
    "/v2/link/connect/demo",
    response_model=DemoConnected,
    responses=error_responses(401, 404, 409, 422, described=USER_NOT_FOUND),
)
def connect_demo(service: CurrentService, body: DemoConnectRequest, caller: TeamApiCaller) -> Any:
    """Connect a simulated device that yields realistic, deterministic data (ours)."""
    # The rules (a known demo provider, failures of resources it offers) are in
    # user_operations.py, shared with the embedded facade.
    return operations.connect_demo(
        service, caller.ctx, caller.team_id, body.user_id, body.provider, body.demo_failures
    )


@router.get(
    "/v2/user/providers/{user_id:uuid}",
    response_model=UserProviders,
    responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
)
def user_providers(
    service: CurrentService, user_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """Spec 2.2: the user's connections (deregistered ones are not listed)."""
    return operations.user_providers(service, caller.team_id, user_id, as_of=as_of)


@router.delete(
    "/v2/user/{user_id:uuid}/{provider}",
    response_model=Success,
    responses=error_responses(401, 404, 409, 422, described=USER_NOT_FOUND),
)
def deregister(service: CurrentService, user_id: UUID, provider: str, caller: TeamApiCaller) -> Any:
    return operations.deregister(service, caller.ctx, caller.team_id, user_id, provider)
