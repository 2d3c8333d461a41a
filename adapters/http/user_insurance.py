"""A user's health insurance (`user.create_insurance` and `user.get_latest_insurance` of
the official clients): this deployment bills lab orders to the team and holds no
insurer's contract (domain/labs/billing.py), so it keeps no insurance for a user. Both
answer the lab methods' 400 saying so, once the user is known to be the team's (another
team's user, or one deleted, is a 404 as everywhere); nothing sent is stored."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.labs.billing import InsuranceNotBilled

router = APIRouter(route_class=LedgerRoute, tags=["users"])

_RESPONSES = error_responses(
    400,
    401,
    404,
    422,
    described={
        400: "This deployment does not bill insurance (the detail says so).",
        **USER_NOT_FOUND,
    },
)


@router.post("/v2/user/{user_id:uuid}/insurance", responses=_RESPONSES)
def create_insurance(service: CurrentService, caller: TeamApiCaller, user_id: UUID) -> Any:
    """Refused: no insurance is kept (the body is not read, so none of it is stored)."""
    service.users.load_live(caller.team_id, user_id)
    raise InsuranceNotBilled()


@router.get(
    "/v2/user/{user_id:uuid}/insurance/latest",
    responses=_RESPONSES,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
)
def get_latest_insurance(service: CurrentService, caller: TeamApiCaller, user_id: UUID) -> Any:
    """Refused: no insurance is kept."""
    service.users.load_live(caller.team_id, user_id)
    raise InsuranceNotBilled()
