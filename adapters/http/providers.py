"""Team API route for the provider catalog (spec 2.6, endpoint 7 and rule 6; gaps.md
Provider catalog)."""

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Query
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.reference import SourceType, provider_catalog
from pydantic import BaseModel, ConfigDict, Field

PROVIDERS_PATH = "/v2/providers"


class ProviderCatalogEntry(BaseModel):
    """Spec 2.6. `auth_type` and `supported_resources` are plain strings because the spec
    marks both enumerations non-exhaustive: clients must tolerate new values."""

    # For the OpenAPI document only: an entry of adapters/reference/providers.json.
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "Oura",
                    "slug": "oura",
                    "description": "Smart ring that tracks sleep, readiness, activity, heart "
                    "rate and skin temperature.",
                    "logo": "https://storage.healthledger.dev/providers/oura.png",
                    "auth_type": "oauth",
                    "supported_resources": ["profile", "activity", "sleep", "workouts"],
                }
            ]
        }
    )

    name: str
    slug: str
    description: str
    logo: str | None = Field(description="URL of the provider's logo.")
    auth_type: str | None = Field(
        default=None,
        description="oauth, team_oauth, sdk, password, email or app (non-exhaustive).",
    )
    supported_resources: list[str] = Field(
        default_factory=list, description="Resources the provider can supply (non-exhaustive)."
    )


router = APIRouter(tags=["providers"], route_class=LedgerRoute)


@functools.cache
def catalog_entries() -> list[ProviderCatalogEntry]:
    """The catalog's entries, made once per process, at the first question (the data file
    is read then, not when this module is imported).

    Only the spec fields are emitted: `source_type` and `demo` stay internal. Sorted
    case-insensitively (names such as "iHealth" and "WHOOP" mix cases), slug breaking
    ties, so the order is stable whatever the order of the data file."""
    return [
        ProviderCatalogEntry(
            name=entry.name,
            slug=entry.slug,
            description=entry.description,
            logo=entry.logo,
            auth_type=entry.auth_type,
            supported_resources=list(entry.supported_resources),
        )
        for entry in sorted(provider_catalog(), key=lambda e: (e.name.casefold(), e.slug))
    ]


@functools.cache
def source_types_by_slug() -> dict[str, SourceType]:
    return {entry.slug: entry.source_type for entry in provider_catalog()}


def list_providers(
    caller: TeamApiCaller,
    source_type: Annotated[
        SourceType | None,
        Query(description="Only providers of this kind of source (gaps.md)."),
    ] = None,
) -> Any:
    """The provider catalog: a bare array of entries, sorted by name."""
    # `caller` is not read: asking for it is what requires the team API key.
    entries = catalog_entries()
    if source_type is None:
        return entries
    source_type_of = source_types_by_slug()
    return [entry for entry in entries if source_type_of[entry.slug] == source_type]


# Rule 6: the spec's example call ends in a slash. Both forms are served directly,
# because a redirect would drop the API key header in some clients and costs a round
# trip; only the form without the slash is documented, to keep one operation.
router.add_api_route(
    PROVIDERS_PATH,
    list_providers,
    methods=["GET"],
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=list[ProviderCatalogEntry],
    responses=error_responses(401, 422),
    name="list_providers",
)
router.add_api_route(
    f"{PROVIDERS_PATH}/",
    list_providers,
    methods=["GET"],
    response_model=list[ProviderCatalogEntry],
    name="list_providers_trailing_slash",
    include_in_schema=False,
)
