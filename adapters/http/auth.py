"""Team API authentication: the `x-service-api-key` header (or `x-vital-api-key`, the one
the official client libraries send), checked against a hash."""

from dataclasses import dataclass
from typing import Annotated
from uuid import UUID

from fastapi import Depends, HTTPException, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.sign_in_tokens import SignInTokens
from healthledger.domain.context import CommandContext, team_api_key_actor
from healthledger.domain.keys import MANAGEMENT_KEY, key_matches, parse_key, team_api_key_id
from healthledger.domain.teams.management_keys import ORG_ADMIN

TEAM_API_KEY_HEADER = "x-service-api-key"
# The header the official clients (`vital`, `junction-api-sdk`, `@tryvital/vital-node`)
# send the team key in, generated from the production API's definition: accepted as well,
# same key and rules, so that a customer's client works with its base_url changed alone.
OFFICIAL_CLIENT_KEY_HEADER = "x-vital-api-key"

# Each scheme has its own name in the OpenAPI document (the default, the class name, is
# the same for all: the second scheme of a document would replace the first).
team_api_key_scheme = APIKeyHeader(
    name=TEAM_API_KEY_HEADER,
    scheme_name="TeamApiKey",
    auto_error=False,
    description="The team API key (shown once when it was created).",
)
official_client_key_scheme = APIKeyHeader(
    name=OFFICIAL_CLIENT_KEY_HEADER,
    scheme_name="OfficialClientApiKey",
    auto_error=False,
    description=(
        f"The team API key, in the header the official client libraries send (same keys "
        f"and rules as {TEAM_API_KEY_HEADER})."
    ),
)


@dataclass(frozen=True)
class TeamCaller:
    team_id: UUID
    key_id: UUID
    ctx: CommandContext
    # The key's environment (sandbox or production) and region (the team's).
    environment: str
    region: str


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail)


async def team_caller(
    request: Request,
    service: CurrentService,
    service_key: str | None = Security(team_api_key_scheme),
    client_key: str | None = Security(official_client_key_scheme),
) -> TeamCaller:
    # Async: a key this process keeps (PostgreSQL, ADR 0042) is checked on the event loop,
    # without a hop to the thread pool and back; only a key read from the table takes one.
    if service_key and client_key and service_key != client_key:
        # Which of two keys was meant cannot be guessed; neither is echoed.
        raise _unauthorized(
            f"Two different API keys were sent ({TEAM_API_KEY_HEADER} and "
            f"{OFFICIAL_CLIENT_KEY_HEADER}): send the team API key in one of them."
        )
    api_key = service_key or client_key
    if not api_key:
        raise _unauthorized(
            f"Missing API key: send the team API key in the {TEAM_API_KEY_HEADER} header."
        )
    parsed = parse_key(api_key)
    if parsed is not None and parsed[0] == MANAGEMENT_KEY:
        raise _unauthorized(
            "This is a management key: the team API expects a team API key in the "
            f"{TEAM_API_KEY_HEADER} header."
        )
    key_id = team_api_key_id(api_key)
    if key_id is None:
        raise _unauthorized("Invalid API key: the team API expects a team API key.")
    queries = service.team_queries
    record = queries.kept_api_key(key_id) or await run_in_threadpool(queries.api_key, key_id)
    # Unknown, revoked and wrong-secret keys get the same answer.
    if record is None or record.revoked or not key_matches(api_key, record.key_hash):
        raise _unauthorized("Invalid API key.")
    ctx = CommandContext(
        actor=team_api_key_actor(record.key_id),
        request_id=request.state.request_id,
        environment=record.environment,
    )
    return TeamCaller(
        team_id=record.team_id,
        key_id=record.key_id,
        ctx=ctx,
        environment=record.environment,
        region=record.region,
    )


# What a team API route asks for: its caller, whose team API key the dependency checked.
TeamApiCaller = Annotated[TeamCaller, Depends(team_caller)]

sign_in_token_scheme = HTTPBearer(
    scheme_name="SdkSignInToken",
    auto_error=False,
    description="A mobile SDK's sign-in token (POST /v2/user/{user_id}/sign_in_token): "
    "one user's uploads only, for an hour.",
)


@dataclass(frozen=True)
class UploadCaller:
    """Who uploads a user's data: a team API key (any user of its team), or a mobile
    SDK's sign-in token (its one user: `user_id`)."""

    team_id: UUID
    ctx: CommandContext
    user_id: UUID | None

    def may_upload_for(self, user_id: UUID) -> bool:
        return self.user_id is None or self.user_id == user_id


async def upload_caller(
    request: Request,
    service: CurrentService,
    service_key: str | None = Security(team_api_key_scheme),
    client_key: str | None = Security(official_client_key_scheme),
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(sign_in_token_scheme)] = None,
) -> UploadCaller:
    """A team API key when one is sent (checked as everywhere), else a sign-in token in
    `Authorization: Bearer`: genuine and not expired (the user's being live is the
    route's check, a 404 like any user's)."""
    if service_key or client_key or bearer is None:
        caller = await team_caller(request, service, service_key, client_key)
        return UploadCaller(caller.team_id, caller.ctx, None)
    grant = SignInTokens(service.cursor_secret).open(bearer.credentials)
    if grant is None:
        raise _unauthorized("Invalid sign-in token.")
    if service.clock() >= grant.expires_at:
        raise _unauthorized("The sign-in token has expired: ask for a new one.")
    ctx = CommandContext(
        actor=f"sign_in_token:{grant.user_id}",
        request_id=request.state.request_id,
        environment=grant.environment,
    )
    return UploadCaller(grant.team_id, ctx, grant.user_id)


# An upload route's caller: a team key, or the user's own sign-in token.
UploadApiCaller = Annotated[UploadCaller, Depends(upload_caller)]


# -- the management API -------------------------------------------------------------------

MANAGEMENT_KEY_HEADER = "X-Management-Key"
LEGACY_MANAGEMENT_KEY_HEADER = "X-Service-Org-Key"

management_key_scheme = APIKeyHeader(
    name=MANAGEMENT_KEY_HEADER,
    scheme_name="ManagementKey",
    auto_error=False,
    description="A management key.",
)
legacy_management_key_scheme = APIKeyHeader(
    name=LEGACY_MANAGEMENT_KEY_HEADER,
    scheme_name="LegacyManagementKey",
    auto_error=False,
    description="Deprecated name of X-Management-Key (same keys).",
)


@dataclass(frozen=True)
class ManagementCaller:
    key_id: UUID
    org_id: UUID
    role: str
    team_ids: frozenset[UUID]
    ctx: CommandContext

    @property
    def is_org_admin(self) -> bool:
        return self.role == ORG_ADMIN

    def require_org(self, org_id: UUID) -> None:
        """Another organization's resources do not exist for this key."""
        if org_id != self.org_id:
            raise HTTPException(status_code=404, detail="Organization not found.")

    def require_org_admin(self) -> None:
        if not self.is_org_admin:
            raise HTTPException(
                status_code=403,
                detail="A team management key cannot reach organization-level resources "
                "or actions; use an org management key.",
            )

    def require_team(self, team_id: UUID) -> None:
        """An unbound team is as unknown to a team key as a missing one."""
        if not self.is_org_admin and team_id not in self.team_ids:
            raise HTTPException(status_code=404, detail="Team not found.")


def management_caller(
    request: Request,
    service: CurrentService,
    key: str | None = Security(management_key_scheme),
    legacy_key: str | None = Security(legacy_management_key_scheme),
) -> ManagementCaller:
    plain = key or legacy_key
    if not plain:
        raise _unauthorized(
            f"Missing management key: send it in the {MANAGEMENT_KEY_HEADER} header."
        )
    parsed = parse_key(plain)
    if parsed is not None and parsed[0] != MANAGEMENT_KEY:
        raise _unauthorized(
            "This is a team API key: the management API expects a management key in "
            f"the {MANAGEMENT_KEY_HEADER} header."
        )
    record = service.team_queries.management_key(parsed[1]) if parsed else None
    if record is None or record.revoked or not key_matches(plain, record.key_hash):
        raise _unauthorized("Invalid management key.")
    ctx = CommandContext(
        actor=f"management_key:{record.key_id}", request_id=request.state.request_id
    )
    return ManagementCaller(record.key_id, record.org_id, record.role, record.team_ids, ctx)


# What a management API route asks for: its caller, whose management key the dependency
# checked (its `require_*` methods check what the key may reach).
ManagementApiCaller = Annotated[ManagementCaller, Depends(management_caller)]
