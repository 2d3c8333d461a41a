"""Team API route of area info (spec 2.10, endpoint 9 and rule 3; gaps.md lab testing):
at-home phlebotomy and patient service centers around a US zip code."""

import json
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from fastapi.responses import Response
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.reference.labs.areas import ZIP_CODE, UnknownZipCode, render_area
from healthledger.domain.errors import InvalidRequest
from pydantic import BaseModel, ConfigDict, Field

AREA_INFO_PATH = "/v3/order/area/info"
_LabSlug = Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")]
# Central labs one question may name.
_MAX_LABS = 20


class PhlebotomyProvider(BaseModel):
    name: str = Field(description="getlabs, phlebfinders, quest (non-exhaustive).")
    tier: list[str] = Field(description="appointment-ready, appointment-request.")
    service_types: list[str] = Field(description="The same values as `tier` (gaps.md).")


class Phlebotomy(BaseModel):
    is_served: bool = Field(description="Whether any at-home phlebotomy network serves it.")
    providers: list[PhlebotomyProvider]


class PatientServiceCenters(BaseModel):
    within_radius: int = Field(description="Centers of the lab within the radius.")
    radius: str = Field(description="The radius asked, in miles.")
    capabilities: list[str] = Field(description="What some center within it offers: stat...")
    nearest_miles: float | None = Field(
        description="Great-circle miles to the nearest of them; null when there is none."
    )
    appointment_with_service: bool
    appointment_with_vital: bool = Field(
        description="The official client's name of appointment_with_service."
    )


class CentralLabArea(BaseModel):
    patient_service_centers: PatientServiceCenters
    supported_bill_types: list[str]
    lab_id: int
    appointment_with_service: bool = Field(
        description="Whether appointments at its centers are booked through this service."
    )


class AreaInfo(BaseModel):
    """Spec 2.10, plus gaps.md's newer fields on providers and central labs."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "zip_code": "85281",
                    "phlebotomy": {
                        "is_served": True,
                        "providers": [
                            {
                                "name": "getlabs",
                                "tier": ["appointment-ready"],
                                "service_types": ["appointment-ready"],
                            }
                        ],
                    },
                    "central_labs": {
                        "sonora_quest": {
                            "patient_service_centers": {
                                "within_radius": 41,
                                "radius": "25",
                                "capabilities": ["appointment_scheduling_with_lab", "stat"],
                                "nearest_miles": 1.3,
                                "appointment_with_service": False,
                                "appointment_with_vital": False,
                            },
                            "supported_bill_types": ["client_bill", "commercial_insurance"],
                            "lab_id": 4,
                            "appointment_with_service": False,
                        }
                    },
                }
            ]
        }
    )
    zip_code: str
    phlebotomy: Phlebotomy
    central_labs: dict[str, CentralLabArea] = Field(description="By central lab slug.")


router = APIRouter(tags=["lab testing"], route_class=LedgerRoute)


# `async`: the answer is computed from memory in a fraction of a millisecond, so it
# runs on the event loop instead of a worker thread.
@router.get(
    AREA_INFO_PATH,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=AreaInfo,
    responses=error_responses(
        401,
        422,
        described={
            422: "A malformed or unknown zip code, a radius not in 10, 20, 25, 50, 100, "
            "or labs that are not central labs (named in the detail)."
        },
    ),
)
async def area_info(
    service: CurrentService,
    caller: TeamApiCaller,
    zip_code: Annotated[
        str,
        Query(
            max_length=10,
            pattern=ZIP_CODE,
            description="A US zip code: five digits, or ZIP+4.",
        ),
    ],
    radius: Annotated[Literal["10", "20", "25", "50", "100"], Query(description="Miles.")] = "25",
    labs: Annotated[
        list[_LabSlug] | None,
        Query(max_length=_MAX_LABS, description="Central lab slugs (repeatable)."),
    ] = None,
    lab: Annotated[
        _LabSlug | None,
        Query(deprecated=True, description="Deprecated: use labs."),
    ] = None,
    lab_account_id: Annotated[
        UUID | None, Query(description="Only the central labs of this lab account.")
    ] = None,
) -> Any:
    """Whether at-home phlebotomy serves the zip code, and for each central lab how
    many patient service centers lie within the radius of the zip's centroid
    (great-circle miles). `lab` is deprecated: it is answered, with a `Deprecation`
    header, and joins `labs`."""
    catalog = service.lab_catalog
    central = catalog.central_labs()
    wanted = list(dict.fromkeys([*(labs or ()), *([lab] if lab else [])]))
    unknown = [slug for slug in wanted if catalog.lab_by_slug(slug) is None]
    if unknown:
        raise InvalidRequest(
            f"Unknown labs: {', '.join(unknown)}.", "labs" if labs else "lab", "query"
        )
    not_central = [slug for slug in wanted if slug not in {c.slug for c in central}]
    if not_central:
        raise InvalidRequest(
            f"Not central labs (they have no patient service centers): {', '.join(not_central)}.",
            "labs" if labs else "lab",
            "query",
        )
    lab_ids = [c.id for c in central if not wanted or c.slug in wanted]
    if lab_account_id is not None:
        account = catalog.account(lab_account_id)
        if account is None:
            raise InvalidRequest("lab_account_id names no lab account.", "lab_account_id", "query")
        lab_ids = [i for i in lab_ids if i in account.lab_ids]
    miles = int(radius)
    try:
        found = service.area_info.area(zip_code, miles, lab_ids)
    except UnknownZipCode:
        raise InvalidRequest(
            "zip_code is well-formed but is not an existing US zip code.",
            "zip_code",
            "query",
        ) from None
    details = {lab.id: catalog.details(lab.id) for lab in catalog.labs()}
    body = json.dumps(
        render_area(found, miles, details), ensure_ascii=False, separators=(",", ":")
    ).encode()
    # The legacy parameter is still answered (gaps.md, deprecations), with a notice.
    headers = {"deprecation": "true"} if lab is not None else None
    return Response(content=body, media_type="application/json", headers=headers)
