"""Team API routes for users (spec endpoints 1, 3, 11 and gaps.md Users)."""

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from healthledger.adapters.compliance.time_travel import reads_as_of
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.deletion_requests import (
    DeletionReason,
    DeletionTicket,
    deletion_reason,
    deletion_ticket,
)
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.sign_in_tokens import SignInTokens
from healthledger.adapters.operations import users as operations
from healthledger.adapters.operations.schemas import (
    CreateUserRequest,
    DemographicsAnswer,
    DemographicsPatch,
    ResolvedUser,
    Success,
    UpdateUserRequest,
    UserList,
)
from healthledger.domain.personal_data import demographics_answer
from pydantic import BaseModel, ConfigDict, ValidationError

# The operations themselves are in adapters/operations/users.py (the embedded facade calls
# them too); these routes add HTTP: auth, parameters, status codes.
router = APIRouter(tags=["users"], route_class=LedgerRoute)


@router.post("/v2/user", response_model=ResolvedUser, responses=error_responses(400, 401, 409, 422))
def create_user(service: CurrentService, body: CreateUserRequest, caller: TeamApiCaller) -> Any:
    """Create a user. A client_user_id already held is a 400 carrying the holder's id."""
    return operations.create_user(service, caller.ctx, caller.team_id, body)


@router.get("/v2/user", response_model=UserList, responses=error_responses(401, 422))
def list_users(
    service: CurrentService,
    caller: TeamApiCaller,
    as_of: TeamAsOf,
    offset: Annotated[int, Query(ge=0, le=operations.MAX_USER_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=operations.MAX_USER_LIMIT)] = 100,
) -> Any:
    if as_of is not None:
        users, total = reads_as_of(service, as_of).list_users(caller.team_id, offset, limit)
        return {"users": users, "total": total, "offset": offset, "limit": limit}
    return operations.user_page(service, caller.team_id, offset, limit)


# `:path` so that a client_user_id holding a slash can be resolved too.
@router.get(
    "/v2/user/resolve/{client_user_id:path}",
    response_model=ResolvedUser,
    responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
)
def resolve_user(
    service: CurrentService, client_user_id: str, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    if as_of is not None:
        return reads_as_of(service, as_of).resolve(caller.team_id, client_user_id)
    return operations.resolved_by_client_user_id(service, caller.team_id, client_user_id)


@router.post(
    "/v2/user/undo_delete",
    response_model=Success,
    responses=error_responses(400, 401, 404, 409, 422, described=USER_NOT_FOUND),
)
def undo_delete(
    service: CurrentService,
    caller: TeamApiCaller,
    user_id: UUID | None = None,
    client_user_id: Annotated[str | None, Query(max_length=255)] = None,
) -> Any:
    """Restore a deleted user inside its grace period (exactly one of the parameters)."""
    return operations.undo_delete(service, caller.ctx, caller.team_id, user_id, client_user_id)


@router.get(
    "/v2/user/{user_id:uuid}",
    response_model=ResolvedUser,
    responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
)
def get_user(service: CurrentService, user_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf) -> Any:
    return operations.resolved_user(service, caller.team_id, user_id, as_of=as_of)


@router.patch(
    "/v2/user/{user_id:uuid}",
    status_code=204,
    responses=error_responses(400, 401, 404, 409, 422, described=USER_NOT_FOUND),
)
def update_user(
    service: CurrentService, user_id: UUID, body: UpdateUserRequest, caller: TeamApiCaller
) -> Response:
    operations.update_user(service, caller.ctx, caller.team_id, user_id, body)
    return Response(status_code=204)


@router.delete(
    "/v2/user/{user_id:uuid}",
    response_model=Success,
    responses=error_responses(401, 404, 409, 422, described=USER_NOT_FOUND),
)
def delete_user(
    service: CurrentService,
    user_id: UUID,
    caller: TeamApiCaller,
    reason: DeletionReason = None,
    ticket: DeletionTicket = None,
) -> Any:
    """Start the grace period: the user is erased when it ends unless undone. Why, if
    you say (`X-Deletion-Reason`, `X-Deletion-Ticket`), is recorded on the deletion and
    shown in its report."""
    return operations.delete_user(
        service,
        caller.ctx,
        caller.team_id,
        user_id,
        reason=deletion_reason(reason),
        ticket=deletion_ticket(ticket),
    )


@router.patch(
    "/v2/user/{user_id:uuid}/info",
    response_model=DemographicsAnswer,
    responses=error_responses(400, 401, 403, 404, 409, 422, described=USER_NOT_FOUND),
)
def patch_demographics(
    service: CurrentService, user_id: UUID, body: DemographicsPatch, caller: TeamApiCaller
) -> Any:
    """Closed beta. Set demographics (spec 2.1), merged into what is recorded."""
    try:
        merged = operations.record_demographics(service, caller.ctx, caller.team_id, user_id, body)
        # Addresses in the spec's spelling and the official client's
        # (docs/compatibility.md), as the facade answers them too.
        return JSONResponse(demographics_answer(merged.model_dump(mode="json")))
    except ValidationError as exc:
        # The merged object is checked in the domain; report it like a body error.
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        ) from None


@router.get(
    "/v2/user/{user_id:uuid}/info/latest",
    response_model=DemographicsAnswer,
    responses=error_responses(401, 403, 404, 422, described=USER_NOT_FOUND),
)
def latest_demographics(
    service: CurrentService, user_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """Closed beta. The user's demographics (spec 2.1)."""
    # As recorded (checked against the model when it was): answered without checking
    # it again, so that values recorded before a rule was added (control characters
    # in free text) still read back.
    # Addresses in both spellings, the spec's and the official client's.
    if as_of is not None:
        recorded = reads_as_of(service, as_of).demographics(caller.team_id, user_id)
    else:
        recorded = operations.recorded_demographics(service, caller.team_id, user_id)
    return JSONResponse(demographics_answer(recorded))


class SignInTokenAnswer(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "user_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
                    "sign_in_token": "eyJzIjoic2RrLXNpZ24taW4tdjEiLCJwIjp7InQi...",
                    "expires_at": "2026-03-01T13:00:00Z",
                }
            ]
        }
    )
    user_id: UUID
    sign_in_token: str
    expires_at: datetime


@router.post(
    "/v2/user/{user_id:uuid}/sign_in_token",
    response_model=SignInTokenAnswer,
    responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
)
def sign_in_token(service: CurrentService, user_id: UUID, caller: TeamApiCaller) -> Any:
    """A sign-in token for the mobile SDK on the user's phone (sign_in_tokens.py): sent as
    `Authorization: Bearer`, it uploads that user's data (the Apple Health import) and
    reads those uploads' status, for an hour, and nothing else."""
    service.users.load_live(caller.team_id, user_id)
    tokens = SignInTokens(service.cursor_secret)
    grant = tokens.issue(caller.team_id, user_id, caller.environment, service.clock())
    return {"user_id": user_id, "sign_in_token": tokens.sign(grant), "expires_at": grant.expires_at}
