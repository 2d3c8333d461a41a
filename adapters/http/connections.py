"""Team API routes for provider connections (spec 2.2, endpoint 2; gaps.md Provider
connections) and the demo connection of ours (a simulated device, no outside world)."""

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends
from healthledger.adapters.http import user_operations as operations
from healthledger.adapters.http.as_of import AsOf
from healthledger.adapters.http.auth import TeamCaller, team_caller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.schemas import DemoConnected, Success, UserProviders
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.connections.providers import (
    CONNECTION_ERROR_TYPES,
    NON_RETRIABLE,
    RETRIABLE_CODES,
    UNEXPECTED,
)
from pydantic import BaseModel, ConfigDict, Field

# Codes a demo device can be asked to fail with: the pull error codes a provider can
# cause (retry_quota_exhausted is an outcome, not a cause) and the connection error types.
INJECTABLE_CODES = sorted(RETRIABLE_CODES | {NON_RETRIABLE, UNEXPECTED} | CONNECTION_ERROR_TYPES)


class DemoFailure(BaseModel):
    """Ours: fail the resource's pull with `code`, on the first `times` attempts (null:
    on every attempt)."""

    model_config = ConfigDict(extra="forbid")
    # The Literal is built from the catalog's codes at import (one list, not two), which
    # pydantic reads at run time and a static checker cannot.
    code: Literal[tuple(INJECTABLE_CODES)]  # type: ignore[valid-type]
    times: Annotated[int, Field(ge=1, le=100)] | None = None


class DemoConnectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: UUID
    provider: str
    # Ours: resource -> the failure its pulls should meet (see docs/connections.md).
    demo_failures: Annotated[dict[str, DemoFailure], Field(max_length=100)] | None = None


def connections_router() -> APIRouter:
    # Each route declares its answer's model, so that the OpenAPI document describes it
    # (the official client's models are checked against it: test_official_client.py).
    router = APIRouter(tags=["connections"], route_class=LedgerRoute)
    Caller = Annotated[TeamCaller, Depends(team_caller)]

    @router.post(
        "/v2/link/connect/demo",
        response_model=DemoConnected,
        responses=error_responses(401, 404, 409, 422, described=USER_NOT_FOUND),
    )
    def connect_demo(service: CurrentService, body: DemoConnectRequest, caller: Caller) -> Any:
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
        service: CurrentService, user_id: UUID, caller: Caller, as_of: AsOf = None
    ) -> Any:
        """Spec 2.2: the user's connections (deregistered ones are not listed)."""
        return operations.user_providers(service, caller.team_id, user_id, as_of=as_of)

    @router.delete(
        "/v2/user/{user_id:uuid}/{provider}",
        response_model=Success,
        responses=error_responses(401, 404, 409, 422, described=USER_NOT_FOUND),
    )
    def deregister(service: CurrentService, user_id: UUID, provider: str, caller: Caller) -> Any:
        return operations.deregister(service, caller.ctx, caller.team_id, user_id, provider)

    return router
