"""Team API routes for provider connections (spec 2.2, endpoint 2; gaps.md Provider
connections) and the demo connection of ours (a simulated device, no outside world)."""

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.operations import users as operations
from healthledger.adapters.operations.refresh import MAX_TIMEOUT_SECONDS, refresh
from healthledger.adapters.operations.schemas import (
    DemoConnected,
    DemoConnectRequest,
    Success,
    UserProviders,
)
from pydantic import BaseModel, ConfigDict

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


class RefreshAnswer(BaseModel):
    """The client's UserRefreshSuccessResponse: the providers synced, still pulling (or
    left to the daily sync past the timeout), and failed."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "success": True,
                    "user_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
                    "refreshed_sources": ["oura"],
                    "in_progress_sources": ["whoop_v2"],
                    "failed_sources": [],
                }
            ]
        }
    )
    success: bool
    user_id: UUID
    refreshed_sources: list[str]
    in_progress_sources: list[str]
    failed_sources: list[str]


@router.post(
    "/v2/user/refresh/{user_id:uuid}",
    response_model=RefreshAnswer,
    responses=error_responses(401, 404, 422, 429, described=USER_NOT_FOUND),
)
def refresh_user(
    service: CurrentService,
    user_id: UUID,
    caller: TeamApiCaller,
    timeout: Annotated[float | None, Query(gt=0, le=MAX_TIMEOUT_SECONDS)] = None,
) -> Any:
    """Sync every live connection of the user now (refresh.py), within `timeout` seconds
    (30 by default); at most once a minute per user (else 429 with Retry-After)."""
    return refresh(service, caller.team_id, user_id, timeout)
