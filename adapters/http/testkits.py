"""Team API routes of at-home test kits (the official client's `testkit.*`, docs/labs.md):
`POST /v3/order/testkit` orders a kit for a user, shipped to the address given (an order
whose collection method is `testkit`, placed as `POST /v3/order` places one), and
`POST /v3/order/testkit/register` registers a kit by the sample id printed on it to the
patient who took the sample (their details and address sealed with the user's key). Both
answer the order as the client's PostOrderResponse reads it.
"""

from typing import Any, Literal
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.order_schemas import (
    PASSTHROUGH_DESCRIPTION,
    OrderChanged,
    OrderPatientAddress,
    Passthrough,
)
from healthledger.adapters.http.orders import changed_answer
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.labs.billing import require_client_bill
from healthledger.domain.labs.ordering import OrderRequest
from healthledger.domain.labs.orders import TESTKIT
from healthledger.domain.labs.patients import PatientDetails
from pydantic import BaseModel, ConfigDict, Field


class TestkitOrderCreate(BaseModel):
    """`POST /v3/order/testkit` (the client's `testkit.create_order`)."""

    __test__ = False  # not a pytest class, whatever its name
    model_config = ConfigDict(extra="forbid")
    user_id: UUID = Field(description="The user the kit is for.")
    lab_test_id: UUID = Field(description="A lab test of a lab that sends test kits.")
    shipping_details: OrderPatientAddress = Field(description="Where the kit is sent.")
    passthrough: Passthrough | None = Field(default=None, description=PASSTHROUGH_DESCRIPTION)


class TestkitRegistration(BaseModel):
    """`POST /v3/order/testkit/register` (the client's `testkit.register`)."""

    __test__ = False
    model_config = ConfigDict(extra="forbid")
    sample_id: str = Field(min_length=1, max_length=32, description="Printed on the kit.")
    patient_details: PatientDetails
    patient_address: OrderPatientAddress
    user_id: UUID | None = Field(
        default=None, description="When sent, the user the kit was ordered for."
    )
    # Accepted so that a request naming it gets the reason it is refused (a 400: this
    # deployment bills the team only, domain/labs/billing.py), not "extra inputs".
    health_insurance: dict[str, Any] | None = Field(
        default=None, description="Refused: this deployment does not bill insurance."
    )
    physician: Literal[None] = Field(
        default=None,
        description="Not accepted: orders are signed by the lab's physician network.",
    )


router = APIRouter(tags=["lab orders"], route_class=LedgerRoute)


@router.post(
    "/v3/order/testkit",
    response_model=OrderChanged,
    responses=error_responses(
        401,
        404,
        409,
        422,
        described={
            404: "Unknown user, another team's, scheduled for deletion; unknown lab test.",
            409: "The lab test is inactive (its team took it out of use).",
            422: "Invalid body; a lab test whose lab sends no kits; or the user has no "
            "demographics to take the patient's details from.",
        },
    ),
)
def order_testkit(service: CurrentService, body: TestkitOrderCreate, caller: TeamApiCaller) -> Any:
    """Order a test kit for a live user of the team, shipped to `shipping_details`. The
    patient's details are the user's demographics until the kit is registered."""
    request = OrderRequest(
        user_id=body.user_id,
        lab_test_id=body.lab_test_id,
        collection_method=TESTKIT,
        patient_address=body.shipping_details,
        passthrough=body.passthrough,
    )
    order = service.lab_orders.place(caller.ctx, caller.team_id, request)
    return changed_answer(service, order, "Test kit ordered.")


@router.post(
    "/v3/order/testkit/register",
    response_model=OrderChanged,
    responses=error_responses(
        400,
        401,
        404,
        409,
        422,
        described={
            400: "Health insurance attached: no insurance billed here.",
            404: "No test kit of the team has this sample id (or its user is gone).",
            409: "The kit is registered already, or its sample is with the lab.",
            422: "Invalid body, or user_id is not the user the kit was ordered for.",
        },
    ),
)
def register_testkit(
    service: CurrentService, body: TestkitRegistration, caller: TeamApiCaller
) -> Any:
    """Register the team's kit of `sample_id` to the patient who took its sample."""
    require_client_bill(None, body.health_insurance is not None)
    order = service.kit_registrations.register(
        caller.ctx,
        caller.team_id,
        body.sample_id,
        body.patient_details,
        body.patient_address,
        body.user_id,
    )
    return changed_answer(service, order, "Test kit registered.")
