"""Team API routes for users (spec endpoints 1, 3, 11 and gaps.md Users)."""

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from healthledger.adapters.composition import Service
from healthledger.adapters.http.auth import TeamCaller, team_caller_dependency
from healthledger.adapters.http.errors import USER_NOT_FOUND, FeatureNotEnabled, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.schemas import (
    CreateUserRequest,
    DemographicsPatch,
    DemographicsResponse,
    ResolvedUser,
    Success,
    UpdateUserRequest,
    UserList,
)
from healthledger.domain.errors import LedgerError
from pydantic import ValidationError


class UndoParametersError(LedgerError):
    def __init__(self) -> None:
        super().__init__("Send exactly one of the query parameters user_id or client_user_id.")


def users_router(service: Service) -> APIRouter:
    router = APIRouter(tags=["users"], route_class=LedgerRoute)
    Caller = Annotated[TeamCaller, Depends(team_caller_dependency(service.team_queries))]

    def require_feature(caller: TeamCaller, feature: str) -> None:
        if feature not in service.team_queries.features(caller.team_id):
            raise FeatureNotEnabled(feature)

    @router.post(
        "/v2/user", response_model=ResolvedUser, responses=error_responses(400, 401, 409, 422)
    )
    def create_user(body: CreateUserRequest, caller: Caller) -> Any:
        """Create a user. A client_user_id already held is a 400 carrying the holder's id."""
        user = service.users.create_user(
            caller.ctx,
            caller.team_id,
            client_user_id=body.client_user_id,
            fallback_time_zone=body.fallback_time_zone,
            fallback_birth_date=body.fallback_birth_date,
            ingestion_start=body.ingestion_start,
            ingestion_end=body.ingestion_end,
        )
        return service.user_queries.resolved_user(caller.team_id, user.id, new=True)

    @router.get("/v2/user", response_model=UserList, responses=error_responses(401, 422))
    def list_users(
        caller: Caller,
        offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
    ) -> Any:
        users, total = service.user_queries.list_users(caller.team_id, offset, limit)
        return {"users": users, "total": total, "offset": offset, "limit": limit}

    # `:path` so that a client_user_id holding a slash can be resolved too.
    @router.get(
        "/v2/user/resolve/{client_user_id:path}",
        response_model=ResolvedUser,
        responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
    )
    def resolve_user(client_user_id: str, caller: Caller) -> Any:
        return service.user_queries.resolve(caller.team_id, client_user_id)

    @router.post(
        "/v2/user/undo_delete",
        response_model=Success,
        responses=error_responses(400, 401, 404, 409, 422, described=USER_NOT_FOUND),
    )
    def undo_delete(
        caller: Caller,
        user_id: UUID | None = None,
        client_user_id: Annotated[str | None, Query(max_length=255)] = None,
    ) -> Any:
        """Restore a deleted user inside its grace period (exactly one of the parameters)."""
        if (user_id is None) == (client_user_id is None):
            raise UndoParametersError()
        if user_id is None:
            assert client_user_id is not None
            user_id = service.user_queries.pending_user_id(caller.team_id, client_user_id)
        service.users.undo_deletion(caller.ctx, caller.team_id, user_id)
        return {"success": True}

    @router.get(
        "/v2/user/{user_id:uuid}",
        response_model=ResolvedUser,
        responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
    )
    def get_user(user_id: UUID, caller: Caller) -> Any:
        return service.user_queries.resolved_user(caller.team_id, user_id)

    @router.patch(
        "/v2/user/{user_id:uuid}",
        status_code=204,
        responses=error_responses(400, 401, 404, 409, 422, described=USER_NOT_FOUND),
    )
    def update_user(user_id: UUID, body: UpdateUserRequest, caller: Caller) -> Response:
        changes = {name: getattr(body, name) for name in body.model_fields_set}
        service.users.update_user(caller.ctx, caller.team_id, user_id, changes)
        return Response(status_code=204)

    @router.delete(
        "/v2/user/{user_id:uuid}",
        response_model=Success,
        responses=error_responses(401, 404, 409, 422, described=USER_NOT_FOUND),
    )
    def delete_user(user_id: UUID, caller: Caller) -> Any:
        """Start the grace period: the user is erased when it ends unless undone."""
        service.users.delete_user(caller.ctx, caller.team_id, user_id)
        return {"success": True}

    @router.patch(
        "/v2/user/{user_id:uuid}/info",
        response_model=DemographicsResponse,
        responses=error_responses(400, 401, 403, 404, 409, 422, described=USER_NOT_FOUND),
    )
    def patch_demographics(user_id: UUID, body: DemographicsPatch, caller: Caller) -> Any:
        """Closed beta. Set demographics (spec 2.1), merged into what is recorded."""
        require_feature(caller, "demographics")
        fields = body.model_dump(mode="json", include=body.model_fields_set)
        try:
            return service.users.record_demographics(caller.ctx, caller.team_id, user_id, fields)
        except ValidationError as exc:
            # The merged object is checked in the domain; report it like a body error.
            raise RequestValidationError(
                [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
            ) from None

    @router.get(
        "/v2/user/{user_id:uuid}/info/latest",
        response_model=DemographicsResponse,
        responses=error_responses(401, 403, 404, 422, described=USER_NOT_FOUND),
    )
    def latest_demographics(user_id: UUID, caller: Caller) -> Any:
        """Closed beta. The user's demographics (spec 2.1)."""
        require_feature(caller, "demographics")
        # As recorded (checked against the model when it was): answered without checking
        # it again, so that values recorded before a rule was added (control characters
        # in free text) still read back.
        return JSONResponse(service.user_queries.demographics(caller.team_id, user_id))

    return router
