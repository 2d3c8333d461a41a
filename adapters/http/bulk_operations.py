"""Bulk operations of the link API (issue 34; domain/connections/bulk_operations.py): a
team asks for one operation over many users' connections of a provider, and follows it
as a tracked job (`GET /v2/link/bulk_op`): the historical pull triggered again
(`link.bulk_trigger_historical_pull`), connections imported with the makers' grants a
team held elsewhere (`link.bulk_import`), and those grants exported (`link.bulk_export`,
recorded as a job: the secrets leave)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from healthledger.adapters.compliance.time_travel import aggregate_as_of, aggregates_as_of
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService, Cursors
from healthledger.adapters.operations.users import known_provider
from healthledger.domain.connections.bulk_operations import (
    HISTORICAL_TRIGGER,
    IMPORT,
    MAX_ITEMS,
    PAUSE,
    BulkOperation,
    BulkOperationIndex,
    BulkOperations,
    index_id,
)
from healthledger.domain.connections.connection import Connection
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.free_text import FreeText
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

router = APIRouter(tags=["link"], route_class=LedgerRoute)

# The official clients' team_id parameter: the team is the key's, whatever it says.
TeamId = Annotated[Literal["infer_from_context"] | None, Query()]
MAX_PAGE = 100


class BulkOp(BaseModel):
    """The official clients' BulkOp, with the job's id and its failed users."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "0b7e6c1a-3f64-4e0b-9a51-1f0f4c8f2d11",
                    "type": "link_bulk_historical_trigger",
                    "status": "in_progress",
                    "provider": "oura",
                    "pending": 150,
                    "processed": 50,
                    "failed_user_ids": [],
                    "started_at": "2026-03-01T12:00:00Z",
                    "ended_at": None,
                }
            ]
        }
    )

    id: UUID
    type: str
    status: Literal["in_progress", "success", "failure", "aborted"]
    provider: str
    pending: int
    processed: int
    failed_user_ids: list[UUID] = Field(
        description="Users whose item failed: not the team's, not live, or not connected "
        "to the provider."
    )
    started_at: datetime
    ended_at: datetime | None


class BulkOps(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data": [
                        {
                            "id": "0b7e6c1a-3f64-4e0b-9a51-1f0f4c8f2d11",
                            "type": "link_bulk_historical_trigger",
                            "status": "in_progress",
                            "provider": "oura",
                            "pending": 150,
                            "processed": 50,
                            "failed_user_ids": [],
                            "started_at": "2026-03-01T12:00:00Z",
                            "ended_at": None,
                        }
                    ],
                    "next_cursor": None,
                }
            ]
        }
    )
    data: list[BulkOp]
    next_cursor: str | None


class HistoricalTrigger(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_ids: list[UUID] = Field(min_length=1, max_length=MAX_ITEMS)
    provider: Annotated[FreeText, Field(max_length=64)]
    wait_for_completion: bool = Field(
        default=True,
        description="Answer once every user is done; false: answer at once, the job "
        "goes on in the background (follow it with GET /v2/link/bulk_op).",
    )


class ConnectionRecipe(BaseModel):
    """The official clients' ConnectionRecipe: a user's grant at an OAuth maker."""

    model_config = ConfigDict(extra="forbid")
    user_id: UUID
    access_token: str = Field(min_length=1, max_length=4096)
    refresh_token: str = Field(max_length=4096)
    provider_id: str = Field(min_length=1, max_length=256)
    expires_at: int = Field(ge=0, le=2**31 - 1, description="Unix seconds.")
    oauth_scopes: list[Annotated[str, Field(max_length=256)]] | None = Field(
        default=None, max_length=100
    )


class BulkImport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: Annotated[FreeText, Field(max_length=64)]
    connections: list[ConnectionRecipe] = Field(min_length=1, max_length=MAX_ITEMS)
    wait_for_completion: bool = True


class BulkImported(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "user_ids_imported": ["3fa85f64-5717-4562-b3fc-2c963f66afa6"],
                    "user_ids_failed": [],
                }
            ]
        }
    )
    user_ids_imported: list[UUID]
    user_ids_failed: list[UUID]


class BulkExport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: Annotated[FreeText, Field(max_length=64)]
    user_ids: list[UUID] | None = Field(default=None, max_length=MAX_ITEMS)
    next_token: str | None = Field(default=None, max_length=512)


class BulkExported(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data": [
                        {
                            "user_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
                            "access_token": "at-...",
                            "refresh_token": "rt-...",
                            "provider_id": "OURA-1234",
                            "expires_at": 1772370000,
                            "oauth_scopes": ["daily", "heartrate"],
                        }
                    ],
                    "next_token": None,
                }
            ]
        }
    )
    data: list[ConnectionRecipe]
    next_token: str | None


EXPORT_PAGE = 100


def _operations(service: Service) -> BulkOperations:
    return service.bulk_operations


@router.get("/v2/link/bulk_op", response_model=BulkOps, responses=error_responses(400, 401, 422))
def list_bulk_ops(
    service: CurrentService,
    caller: TeamApiCaller,
    cursors: Cursors,
    as_of: TeamAsOf,
    team_id: TeamId = None,
    next_cursor: Annotated[str | None, Query(max_length=512)] = None,
    page_size: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
) -> Any:
    """The team's bulk operations, the newest first, with their progress (as they were
    at `as_of`, when given)."""
    scope = f"bulk_ops:{caller.team_id}"
    offset = 0 if next_cursor is None else int(cursors.decode(next_cursor, scope)["o"])
    if as_of is None:
        jobs = _operations(service).listed(caller.team_id)
    else:
        index = aggregate_as_of(service, index_id(caller.team_id), as_of)
        listed = [] if not isinstance(index, BulkOperationIndex) else index.operation_ids
        found = aggregates_as_of(service, listed, as_of)
        jobs = sorted(
            (job for job in found if isinstance(job, BulkOperation)),
            key=lambda job: job.created_on,
            reverse=True,
        )
    page = jobs[offset : offset + page_size]
    following = offset + page_size
    return {
        "data": [job.view() for job in page],
        "next_cursor": cursors.encode({"o": following}, scope) if following < len(jobs) else None,
    }


@router.post(
    "/v2/link/bulk_trigger_historical_pull",
    response_model=BulkOp,
    responses=error_responses(401, 409, 422),
)
async def bulk_trigger_historical_pull(
    service: CurrentService, caller: TeamApiCaller, body: HistoricalTrigger, team_id: TeamId = None
) -> Any:
    """Pull each user's history of `provider` again, as at its connection: a job over
    the users, 50 a transaction, resumed after a restart where it stopped."""
    entry = known_provider(service, body.provider, "body")
    operations = _operations(service)
    job = await run_in_threadpool(
        operations.request,
        caller.ctx,
        caller.team_id,
        caller.environment,
        HISTORICAL_TRIGGER,
        entry.slug,
        body.user_ids,
    )
    if body.wait_for_completion:
        ran = await run_in_threadpool(operations.run, job.id)
        job = ran or operations.find(caller.team_id, job.id)
    return job.view()


@router.post(
    "/v2/link/bulk_import", response_model=BulkImported, responses=error_responses(401, 409, 422)
)
async def bulk_import(
    service: CurrentService, caller: TeamApiCaller, body: BulkImport, team_id: TeamId = None
) -> Any:
    """Connect each user to an OAuth provider with the grant the team held elsewhere:
    the tokens are sealed with each user's key at once, kept with the connection as a
    sign-in's would be, and the history pulled. A user not the team's or not live, or a
    provider without an OAuth client here, fails; a user listed twice counts once."""
    entry = known_provider(service, body.provider, "body")
    if entry.auth_type not in ("oauth", "team_oauth"):
        raise InvalidRequest("Only an OAuth provider's grants can be imported.", "provider")
    recipes = {
        c.user_id: {
            "access_token": c.access_token,
            "refresh_token": c.refresh_token,
            "provider_id": c.provider_id,
            "expires_at": c.expires_at,
            "oauth_scopes": c.oauth_scopes,
        }
        for c in body.connections
    }
    operations = _operations(service)
    job = await run_in_threadpool(
        operations.request,
        caller.ctx,
        caller.team_id,
        caller.environment,
        IMPORT,
        entry.slug,
        list(recipes),
        recipes,
    )
    if body.wait_for_completion:
        ran = await run_in_threadpool(operations.run, job.id)
        job = ran or operations.find(caller.team_id, job.id)
    return {"user_ids_imported": job.done, "user_ids_failed": job.failed}


@router.post(
    "/v2/link/bulk_export", response_model=BulkExported, responses=error_responses(400, 401, 422)
)
async def bulk_export(
    service: CurrentService,
    caller: TeamApiCaller,
    cursors: Cursors,
    body: BulkExport,
    team_id: TeamId = None,
) -> Any:
    """The grants of the team's users' connections of an OAuth provider (`user_ids`, or
    every live user), 100 users a page: secrets, handed to the team to take its users
    elsewhere, so each page is recorded as a job naming whose grants left."""
    entry = known_provider(service, body.provider, "body")
    scope = f"bulk_export:{caller.team_id}:{entry.slug}"
    offset = 0 if body.next_token is None else int(cursors.decode(body.next_token, scope)["o"])
    users = (
        body.user_ids
        if body.user_ids is not None
        else await run_in_threadpool(service.user_queries.live_user_ids, caller.team_id)
    )
    page = users[offset : offset + EXPORT_PAGE]
    recipes = await run_in_threadpool(_recipes, service, caller.team_id, entry.slug, page)
    if recipes:
        await run_in_threadpool(
            _operations(service).record_export,
            caller.ctx,
            caller.team_id,
            caller.environment,
            entry.slug,
            [UUID(r["user_id"]) for r in recipes],
        )
    following = offset + EXPORT_PAGE
    return {
        "data": recipes,
        "next_token": cursors.encode({"o": following}, scope) if following < len(users) else None,
    }


def _recipes(
    service: Service, team_id: UUID, provider: str, user_ids: list[UUID]
) -> list[dict[str, Any]]:
    """The grants kept with these users' live connections of `provider` (their team's)."""
    found = []
    for user_id in user_ids:
        connection = service.ledger.find(service.pulls.streams.connection_id(user_id, provider))
        if not isinstance(connection, Connection) or connection.team_id != team_id:
            continue
        stored = service.provider_tokens.current(connection.id) if connection.is_live else None
        if stored is None:
            continue
        tokens = stored.tokens
        account = (
            None
            if connection.sealed_external_user_id is None
            else service.key_store.open(user_id, connection.sealed_external_user_id)
        )
        found.append(
            {
                "user_id": str(user_id),
                "access_token": tokens.access_token,
                "refresh_token": tokens.refresh_token or "",
                "provider_id": account if isinstance(account, str) else str(user_id),
                # A grant that does not expire: the clients' constant for it.
                "expires_at": int(tokens.expires_at.timestamp())
                if tokens.expires_at
                else 2**31 - 1,
                "oauth_scopes": tokens.scope.split() if tokens.scope else None,
            }
        )
    return found


class BulkPause(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_ids: list[UUID] = Field(min_length=1, max_length=MAX_ITEMS)
    provider: Annotated[FreeText, Field(max_length=64)]


@router.post("/v2/link/bulk_pause", response_model=BulkOp, responses=error_responses(401, 409, 422))
async def bulk_pause(
    service: CurrentService, caller: TeamApiCaller, body: BulkPause, team_id: TeamId = None
) -> Any:
    """Pause the ingestion of each user's connection of `provider`: nothing more is
    pulled or taken from the maker's notices, whatever the user's ingestion bounds say,
    until the person connects again. A job like the others; answered once done."""
    entry = known_provider(service, body.provider, "body")
    operations = _operations(service)
    job = await run_in_threadpool(
        operations.request,
        caller.ctx,
        caller.team_id,
        caller.environment,
        PAUSE,
        entry.slug,
        body.user_ids,
    )
    ran = await run_in_threadpool(operations.run, job.id)
    return (ran or operations.find(caller.team_id, job.id)).view()
