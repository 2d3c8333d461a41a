"""Team API authentication: the `x-service-api-key` header, checked against a hash."""

from dataclasses import dataclass
from uuid import UUID

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader
from healthledger.adapters.persistence.queries import TeamQueries
from healthledger.domain.context import CommandContext, team_api_key_actor
from healthledger.domain.teams import key_matches, team_api_key_id

TEAM_API_KEY_HEADER = "x-service-api-key"

team_api_key_scheme = APIKeyHeader(
    name=TEAM_API_KEY_HEADER,
    auto_error=False,
    description="The team API key (shown once when it was created).",
)


@dataclass(frozen=True)
class TeamCaller:
    team_id: UUID
    key_id: UUID
    ctx: CommandContext


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail)


def team_caller_dependency(team_queries: TeamQueries):  # type: ignore[no-untyped-def]
    def team_caller(
        request: Request, api_key: str | None = Security(team_api_key_scheme)
    ) -> TeamCaller:
        if not api_key:
            raise _unauthorized(
                f"Missing API key: send the team API key in the {TEAM_API_KEY_HEADER} header."
            )
        key_id = team_api_key_id(api_key)
        if key_id is None:
            raise _unauthorized("Invalid API key: the team API expects a team API key.")
        record = team_queries.api_key(key_id)
        # Unknown, revoked and wrong-secret keys get the same answer.
        if record is None or record.revoked or not key_matches(api_key, record.key_hash):
            raise _unauthorized("Invalid API key.")
        ctx = CommandContext(
            actor=team_api_key_actor(record.key_id), request_id=request.state.request_id
        )
        return TeamCaller(team_id=record.team_id, key_id=record.key_id, ctx=ctx)

    return team_caller
