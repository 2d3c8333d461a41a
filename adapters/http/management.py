"""Management API routes (spec section 5, endpoint 13; gaps.md Management API).

Who may do what: an org key (org_admin) everything in its organization; a team key
(team_admin) only its bound teams, never organization-level resources or actions (403);
another organization's or an unbound team's resources do not exist (404).
"""

import re
from datetime import datetime
from typing import Annotated, Any, Literal, Self
from uuid import UUID

from fastapi import APIRouter, Query
from healthledger.adapters.compliance.time_travel import reads_as_of
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import ManagementAsOf
from healthledger.adapters.http.auth import ManagementApiCaller, ManagementCaller
from healthledger.adapters.http.cursors import InvalidCursor
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.oauth_callback import oauth_redirect_uri
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService, Cursors
from healthledger.adapters.persistence.queries.directory import TeamQueries
from healthledger.domain.errors import NothingToUpdate, OrganizationNotFound, TeamNotFound
from healthledger.domain.free_text import FreeText
from healthledger.domain.teams.management_keys import ROLES
from healthledger.domain.teams.teams import CLOSED_BETA_FEATURES, EnvironmentSettings
from pydantic import BaseModel, ConfigDict, Field, model_validator

Environment = Literal["sandbox", "production"]
Region = Literal["us", "eu"]
Feature = Literal["demographics", "portal_url", "aggregate_query"]

# Spec endpoint 13: letters (accented Latin included), digits, spaces and ( ) , / : ' | & _ -
# and the typographic apostrophe; at most 80 characters.
SEARCH_QUERY = re.compile(
    r"^[A-Za-z0-9\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u024F (),/:'|&_\-\u2019]*$"
)
_Name = Field(min_length=1, max_length=255)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OrganizationPatch(_Body):
    name: FreeText = _Name


class TeamSettings(_Body):
    """The settings per environment, as a team's answer holds them under `settings`."""

    sandbox: EnvironmentSettings | None = None
    production: EnvironmentSettings | None = None


class _TeamSettingsBody(_Body):
    """A team's settings, at the top level (the spec's form) or under `settings` (the
    form every team answer has, so that an answer can be sent back): each environment
    in one place only."""

    sandbox: EnvironmentSettings | None = None
    production: EnvironmentSettings | None = None
    settings: TeamSettings | None = None

    @model_validator(mode="after")
    def _each_environment_once(self) -> Self:
        if self.settings is not None:
            for env in ("sandbox", "production"):
                if getattr(self, env) is not None and getattr(self.settings, env) is not None:
                    raise ValueError(
                        f"{env} is given twice, at the top level and under settings: "
                        "give it in one place"
                    )
        return self

    def environments(self) -> dict[str, EnvironmentSettings]:
        """The settings given, per environment, from either place."""
        nested = self.settings or TeamSettings()
        given = {
            "sandbox": self.sandbox or nested.sandbox,
            "production": self.production or nested.production,
        }
        return {env: value for env, value in given.items() if value is not None}


class TeamCreate(_TeamSettingsBody):
    name: FreeText = _Name
    region: Region


class TeamPatch(_TeamSettingsBody):
    name: FreeText | None = Field(default=None, min_length=1, max_length=255)


class TeamRoleBinding(_Body):
    team_id: UUID


class ManagementKeyCreate(_Body):
    label: FreeText = _Name
    role: Literal["org_admin", "team_admin"]
    team_role_bindings: list[TeamRoleBinding] = Field(default_factory=list, max_length=100)


# The body's roles are the domain's: a role added there must be added here too.
assert set(ROLES) == {"org_admin", "team_admin"}


class ManagementKeyPatch(_Body):
    label: FreeText | None = Field(default=None, min_length=1, max_length=255)
    team_role_bindings: list[TeamRoleBinding] | None = Field(default=None, max_length=100)


class TeamApiKeyCreate(_Body):
    team_id: UUID


class CredentialsSet(_Body):
    client_id: FreeText = Field(min_length=1, max_length=512)
    client_secret: FreeText = Field(min_length=1, max_length=4096)


_TEAM_EXAMPLE: dict[str, Any] = {
    "id": "5f0c6a3e-2b1d-4c8e-9a7f-3d2e1c0b9a87",
    "name": "Sleep study",
    "created_on": "2026-03-01T12:00:00+00:00",
    "region": "us",
    "org_id": "0b1e2d3c-4f5a-4b6c-8d7e-9f0a1b2c3d4e",
    "settings": {
        "sandbox": {"logo_url": None, "brand_information": None},
        "production": {
            "logo_url": "https://example.com/logo.png",
            "brand_information": {
                "company_name": "Example Health",
                "company_website": "https://example.com",
                "support_email": "support@example.com",
                "support_contact": None,
                "company_address": None,
                "brand_color": "#2f5fd0",
            },
        },
    },
    "features": ["portal_url"],
}


class Team(BaseModel):
    """Spec 2.12, plus the settings and closed-beta switches of the team."""

    # Examples for the OpenAPI document only (tests/integration/test_openapi_documents.py
    # wants one on every named response schema); they change no response.
    model_config = ConfigDict(json_schema_extra={"examples": [_TEAM_EXAMPLE]})
    id: UUID
    name: str
    created_on: datetime
    region: Region
    org_id: UUID
    settings: dict[str, Any]
    features: list[str]


class TeamPage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"teams": [_TEAM_EXAMPLE], "next_cursor": None}]}
    )
    teams: list[Team]
    next_cursor: str | None


def reachable_team(
    queries: TeamQueries, caller: ManagementCaller, org_id: UUID, team_id: UUID
) -> dict[str, Any]:
    """The team, if the caller's key reaches it: another organization's or an unbound
    team is as unknown as a missing one (404). Every team-scoped route starts here."""
    caller.require_org(org_id)
    caller.require_team(team_id)
    team = queries.team(team_id)
    if team is None or team["org_id"] != org_id:
        raise TeamNotFound()
    return team


router = APIRouter(prefix="/v1/org/{org_id}", tags=["management"], route_class=LedgerRoute)
# The errors each kind of operation answers: every one 401 (the key), 404 (another
# organization, an unbound or missing team) and 422 (parameters, body); 403 where an
# org key is required; 409 for changes (a concurrent write, a state that forbids it);
# 400 for an empty patch, or a cursor the listing did not issue.
READS = error_responses(401, 404, 422)
LISTINGS = error_responses(400, 401, 404, 422)
CHANGES = error_responses(401, 404, 409, 422)
PATCHES = error_responses(400, 401, 404, 409, 422)
ORG_READS = error_responses(401, 403, 404, 422)
ORG_CHANGES = error_responses(401, 403, 404, 409, 422)
ORG_PATCHES = error_responses(400, 401, 403, 404, 409, 422)

# -- the organization ---------------------------------------------------------------


@router.get("", responses=ORG_READS)
def get_organization(
    service: CurrentService, org_id: UUID, caller: ManagementApiCaller, as_of: ManagementAsOf
) -> Any:
    """The organization (with `as_of`: its name as then, from the log)."""
    caller.require_org(org_id)
    caller.require_org_admin()
    if as_of is not None:
        return reads_as_of(service, as_of).organization(org_id)
    org = service.team_queries.organization(org_id)
    if org is None:
        raise OrganizationNotFound()
    return org


@router.patch("", responses=ORG_CHANGES)
def patch_organization(
    service: CurrentService, org_id: UUID, body: OrganizationPatch, caller: ManagementApiCaller
) -> Any:
    caller.require_org(org_id)
    caller.require_org_admin()
    service.teams.rename_organization(caller.ctx, org_id, body.name)
    return service.team_queries.organization(org_id)


# -- teams ----------------------------------------------------------------------------


@router.get("/team", response_model=TeamPage, responses=LISTINGS)
def list_teams(
    service: CurrentService,
    cursors: Cursors,
    org_id: UUID,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
    region: Annotated[list[Region] | None, Query()] = None,
    search_query: Annotated[str | None, Query(max_length=80, pattern=SEARCH_QUERY.pattern)] = None,
    next_cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> Any:
    """Endpoint 13. A team key sees only the teams it is bound to (now). With `as_of`:
    the teams alive then, as they were, from the log (a team deleted since included)."""
    caller.require_org(org_id)
    regions = sorted(set(region or ()))
    scope = f"teams:{org_id}:{caller.key_id}:{','.join(regions)}:{search_query or ''}:{limit}"
    after = None
    if next_cursor:
        position = cursors.decode(next_cursor, scope)
        try:
            after = (datetime.fromisoformat(position["c"]), UUID(position["t"]))
        except (KeyError, TypeError, ValueError):
            raise InvalidCursor() from None
    only = None if caller.is_org_admin else caller.team_ids
    queries = service.team_queries if as_of is None else reads_as_of(service, as_of)
    teams, more = queries.teams_page(
        org_id, regions=regions, search=search_query, after=after, limit=limit, only=only
    )
    cursor = None
    if more and teams:
        last = teams[-1]
        cursor = cursors.encode({"c": last["created_on"].isoformat(), "t": str(last["id"])}, scope)
    return {"teams": teams, "next_cursor": cursor}


@router.post("/team", response_model=Team, responses=ORG_CHANGES)
def create_team(
    service: CurrentService, org_id: UUID, body: TeamCreate, caller: ManagementApiCaller
) -> Any:
    """Team names need not be unique (the spec is silent; the id is the identity)."""
    caller.require_org(org_id)
    caller.require_org_admin()
    team_id = service.teams.create_team(
        caller.ctx, org_id, body.name, body.region, body.environments()
    )
    return service.team_queries.team(team_id)


@router.get("/team/{team_id}", response_model=Team, responses=READS)
def get_team(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
) -> Any:
    """The team (with `as_of`: as it was then, from the log; one not created yet or
    deleted by then is a 404, one deleted since is answered as it was)."""
    return team_then_or_now(service, caller, org_id, team_id, as_of)


def team_then_or_now(
    service: Service,
    caller: ManagementCaller,
    org_id: UUID,
    team_id: UUID,
    as_of: datetime | None,
) -> dict[str, Any]:
    """The team the caller reaches, as it is now or (with `as_of`) as it was then."""
    if as_of is None:
        return reachable_team(service.team_queries, caller, org_id, team_id)
    caller.require_org(org_id)
    caller.require_team(team_id)
    return reads_as_of(service, as_of).team(org_id, team_id)


@router.patch("/team/{team_id}", response_model=Team, responses=PATCHES)
def patch_team(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    body: TeamPatch,
    caller: ManagementApiCaller,
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    # Empty: nothing given, or nothing but an empty `settings`.
    if not body.model_fields_set - {"settings"} and not body.environments():
        raise NothingToUpdate()
    service.teams.update_team(
        caller.ctx, org_id, team_id, name=body.name, settings=body.environments()
    )
    return service.team_queries.team(team_id)


@router.delete("/team/{team_id}", responses=ORG_CHANGES)
def delete_team(
    service: CurrentService, org_id: UUID, team_id: UUID, caller: ManagementApiCaller
) -> Any:
    """Its users are deleted through their lifecycle (grace period, then erasure)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    caller.require_org_admin()
    deleted = service.teams.delete_team(caller.ctx, org_id, team_id)
    return {"success": True, "deleted_users": deleted}


# -- closed-beta switches -------------------------------------------------------------


@router.get("/team/{team_id}/features", responses=READS)
def get_features(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
) -> Any:
    """The team's closed-beta switches (with `as_of`: those enabled then, from the log;
    `available` is what this release offers)."""
    team = team_then_or_now(service, caller, org_id, team_id, as_of)
    return {"enabled": team["features"], "available": list(CLOSED_BETA_FEATURES)}


@router.put("/team/{team_id}/features/{feature}", responses=ORG_CHANGES)
def enable_feature(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    feature: Feature,
    caller: ManagementApiCaller,
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    caller.require_org_admin()
    service.teams.set_feature(caller.ctx, team_id, feature, True, org_id)
    return {"enabled": reachable_team(service.team_queries, caller, org_id, team_id)["features"]}


@router.delete("/team/{team_id}/features/{feature}", responses=ORG_CHANGES)
def disable_feature(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    feature: Feature,
    caller: ManagementApiCaller,
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    caller.require_org_admin()
    service.teams.set_feature(caller.ctx, team_id, feature, False, org_id)
    return {"enabled": reachable_team(service.team_queries, caller, org_id, team_id)["features"]}


# -- management keys ------------------------------------------------------------------


@router.get("/management_key", responses=ORG_READS)
def list_management_keys(
    service: CurrentService, org_id: UUID, caller: ManagementApiCaller, as_of: ManagementAsOf
) -> Any:
    """The organization's keys, never their text (with `as_of`: those issued and not
    revoked then, from the log)."""
    caller.require_org(org_id)
    caller.require_org_admin()
    if as_of is not None:
        return {"management_keys": reads_as_of(service, as_of).management_keys(org_id)}
    return {"management_keys": service.team_queries.management_keys(org_id)}


@router.post("/management_key", responses=ORG_CHANGES)
def create_management_key(
    service: CurrentService, org_id: UUID, body: ManagementKeyCreate, caller: ManagementApiCaller
) -> Any:
    """The key text is in this response only; keep it, it is stored only as a hash."""
    caller.require_org(org_id)
    caller.require_org_admin()
    issued = service.teams.issue_management_key(
        caller.ctx,
        org_id,
        role=body.role,
        team_ids=[b.team_id for b in body.team_role_bindings],
        label=body.label,
    )
    return {**service.team_queries.management_key_view(issued.key_id), "key": issued.plain}


@router.patch("/management_key/{key_id}", responses=ORG_PATCHES)
def patch_management_key(
    service: CurrentService,
    org_id: UUID,
    key_id: UUID,
    body: ManagementKeyPatch,
    caller: ManagementApiCaller,
) -> Any:
    caller.require_org(org_id)
    caller.require_org_admin()
    if not body.model_fields_set:
        raise NothingToUpdate()
    bindings = body.team_role_bindings
    service.teams.update_management_key(
        caller.ctx,
        org_id,
        key_id,
        label=body.label,
        team_ids=None if bindings is None else [b.team_id for b in bindings],
    )
    return service.team_queries.management_key_view(key_id)


@router.delete("/management_key/{key_id}", responses=ORG_CHANGES)
def revoke_management_key(
    service: CurrentService, org_id: UUID, key_id: UUID, caller: ManagementApiCaller
) -> Any:
    caller.require_org(org_id)
    caller.require_org_admin()
    service.teams.revoke_management_key(caller.ctx, org_id, key_id)
    return {"success": True}


# -- team API keys ----------------------------------------------------------------------


@router.get("/team_api_keys/{env}/{region}", responses=READS)
def list_team_api_keys(
    service: CurrentService,
    org_id: UUID,
    env: Environment,
    region: Region,
    team_id: UUID,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
) -> Any:
    """The team's keys of the environment, never their text (with `as_of`: those issued
    and not revoked then, from the log; the team must be reachable now)."""
    team = reachable_team(service.team_queries, caller, org_id, team_id)
    if team["region"] != region:
        return {"team_api_keys": []}
    if as_of is not None:
        return {"team_api_keys": reads_as_of(service, as_of).team_api_keys(team_id, env)}
    return {"team_api_keys": service.team_queries.team_api_keys(team_id, env)}


@router.post("/team_api_keys/{env}/{region}", responses=CHANGES)
def create_team_api_key(
    service: CurrentService,
    org_id: UUID,
    env: Environment,
    region: Region,
    body: TeamApiKeyCreate,
    caller: ManagementApiCaller,
) -> Any:
    """The key text is in this response only; keep it, it is stored only as a hash."""
    reachable_team(service.team_queries, caller, org_id, body.team_id)
    issued = service.teams.issue_team_api_key(caller.ctx, body.team_id, env, region, org_id)
    return {
        "id": issued.key_id,
        "team_id": body.team_id,
        "environment": env,
        "region": region,
        "key": issued.plain,
    }


@router.delete("/team_api_keys/{env}/{region}/{key_id}", responses=CHANGES)
def revoke_team_api_key(
    service: CurrentService,
    org_id: UUID,
    env: Environment,
    region: Region,
    key_id: UUID,
    team_id: UUID,
    caller: ManagementApiCaller,
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    service.teams.revoke_team_api_key(caller.ctx, key_id, team_id, env, region)
    return {"success": True}


# -- custom provider credentials ------------------------------------------------------


@router.get("/team_custom_credentials/{team_id}", responses=READS)
def list_credentials(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
) -> Any:
    """The team's custom credentials, never their secrets (with `as_of`: as they were
    then, from the log; the team must be reachable now)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    if as_of is not None:
        return {"credentials": reads_as_of(service, as_of).credentials(team_id)}
    return {"credentials": service.team_queries.credentials(team_id)}


@router.post("/team_custom_credentials/{team_id}/{provider}/prepare", responses=CHANGES)
def prepare_credentials(
    service: CurrentService, org_id: UUID, team_id: UUID, provider: str, caller: ManagementApiCaller
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    creds = service.teams.prepare_credentials(caller.ctx, team_id, provider, org_id)
    return {
        "provider": provider,
        "status": creds.status,  # "set" stays set: preparing again changes nothing
        # Register this in the provider's developer console before setting the pair.
        "redirect_uri": oauth_redirect_uri(service.settings.public_base_url, provider),
    }


@router.put("/team_custom_credentials/{team_id}/{provider}", responses=CHANGES)
def set_credentials(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    provider: str,
    body: CredentialsSet,
    caller: ManagementApiCaller,
) -> Any:
    """The client secret is write-only: stored sealed, never returned."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    service.teams.set_credentials(
        caller.ctx, team_id, provider, body.client_id, body.client_secret, org_id
    )
    listed = {c["provider"]: c for c in service.team_queries.credentials(team_id)}
    return listed[provider]


@router.delete("/team_custom_credentials/{team_id}/{provider}", responses=CHANGES)
def delete_credentials(
    service: CurrentService, org_id: UUID, team_id: UUID, provider: str, caller: ManagementApiCaller
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    service.teams.delete_credentials(caller.ctx, team_id, provider, org_id)
    return {"success": True}
