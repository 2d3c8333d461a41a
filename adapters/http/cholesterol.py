"""The cholesterol fractions: `GET /v2/timeseries/{user_id}/cholesterol/{total|ldl|hdl|
triglycerides}` (the official client's `vitals.cholesterol_*`), the user's cholesterol
samples whose `type` is that fraction, as `GET /v2/timeseries/{user_id}/cholesterol` answers
them (same range, provider filter and `as_of`).

A cholesterol sample is `{timestamp, value, unit, type}` with its type one of FRACTIONS.
No provider of ours records cholesterol yet (no maker's device does, HealthKit has no type
for it), so these answer what a source stores under `cholesterol`: nothing until one does.

Each fraction is a literal path, so `.../cholesterol/grouped` stays the generic grouped
route; the router is included after the timeseries router all the same.
"""

import json
from collections.abc import Callable
from typing import Any, Literal, get_args

from fastapi import APIRouter, Response
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.date_ranges import EndDate, StartDate, date_range
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.summaries import ProviderFilter
from healthledger.adapters.http.timeseries import TimeseriesSample, UserId, samples_json
from pydantic import Field

# The `type` of a cholesterol sample: the fraction it measures (mmol/L).
Fraction = Literal["total", "ldl", "hdl", "triglycerides"]
FRACTIONS: tuple[str, ...] = get_args(Fraction)


class CholesterolSample(TimeseriesSample):
    """One cholesterol reading (the client's ClientFacingCholesterolTimeseries): its
    `type` is the fraction."""

    value: float
    type: str = Field(description="The fraction: total, ldl, hdl or triglycerides.")


router = APIRouter(tags=["timeseries"], route_class=LedgerRoute)


def _fraction_route(fraction: str) -> Callable[..., Any]:
    def get_cholesterol_fraction(
        service: CurrentService,
        user_id: UserId,
        caller: TeamApiCaller,
        start_date: StartDate,
        as_of: TeamAsOf,
        end_date: EndDate = None,
        provider: ProviderFilter = None,
    ) -> Any:
        days = date_range(start_date, end_date)
        samples = json.loads(
            samples_json(service, caller.team_id, user_id, "cholesterol", days, provider, as_of)
        )
        of_fraction = [s for s in samples if s.get("type") == fraction]
        body = json.dumps(of_fraction, separators=(",", ":"))
        return Response(body, media_type="application/json")

    get_cholesterol_fraction.__doc__ = (
        f"The user's cholesterol samples of type `{fraction}` from start_date to end_date, "
        "in time order, of every provider (or of one); as they were at `as_of` when given."
    )
    return get_cholesterol_fraction


# One literal path per fraction, as the client calls them (and as the OpenAPI document
# lists them to the clients' generators).
for _fraction in FRACTIONS:
    router.add_api_route(
        f"/v2/timeseries/{{user_id}}/cholesterol/{_fraction}",
        _fraction_route(_fraction),
        methods=["GET"],
        name=f"get_cholesterol_{_fraction}",
        response_model=list[CholesterolSample],
        responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
    )
