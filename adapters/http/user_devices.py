"""A user's devices (issue 34; `user.get_devices` and `user.get_device` of the official
clients): one device per live connection, described from what we know of its maker (the
catalog's name, the kind of device it records with). The makers we read report no device
model, version or serial with the data we pull, so those fields are null rather than
guessed. A device's id is stable for the user and provider (`SummaryIds.device`: keyed by
the user's key, ADR 0057), so a client can keep it; with `as_of`, the devices of the
connections live then."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, HTTPException, Path
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.operations import users as operations
from healthledger.domain.connections.summaries import SOURCE_TYPES, UNKNOWN_SOURCE_TYPE
from healthledger.domain.connections.summary_ids import ERASED_ID
from pydantic import BaseModel, ConfigDict

router = APIRouter(route_class=LedgerRoute, tags=["users"])


class Device(BaseModel):
    """The client's ClientFacingDevice."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "0b6f1c3e-5d2a-5e8f-9a7b-1c2d3e4f5a6b",
                    "user_id": "3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a0f9",
                    "provider": "oura",
                    "source_type": "ring",
                    "app_id": None,
                    "device_manufacturer": "Oura",
                    "device_model": None,
                    "device_version": None,
                    "device_id": None,
                }
            ]
        }
    )
    id: UUID
    user_id: UUID
    provider: str
    source_type: str
    app_id: str | None
    device_manufacturer: str | None
    device_model: str | None
    device_version: str | None
    device_id: str | None


def devices_of(
    service: Service, team_id: UUID, user_id: UUID, as_of: datetime | None = None
) -> list[Device]:
    """The live user's devices, one per connection not deregistered (404 otherwise)."""
    providers = operations.user_providers(service, team_id, user_id, as_of=as_of)["providers"]
    if not providers:
        return []
    # A user with connections has a key (their facts are sealed with it); none is left
    # only for an erased user read as of before its erasure, whose devices' ids cannot be
    # derived any more (nor its makers named: placeholders).
    cipher = service.key_store.cipher(user_id)
    return [
        Device(
            id=ERASED_ID if cipher is None else cipher.summary_ids.device(p["slug"]),
            user_id=user_id,
            provider=p["slug"],
            source_type=SOURCE_TYPES.get(p["slug"], UNKNOWN_SOURCE_TYPE),
            app_id=None,
            device_manufacturer=p["name"],
            device_model=None,
            device_version=None,
            device_id=None,
        )
        for p in providers
    ]


@router.get(
    "/v2/user/{user_id:uuid}/device",
    response_model=list[Device],
    responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
)
def get_devices(
    service: CurrentService, caller: TeamApiCaller, user_id: UUID, as_of: TeamAsOf
) -> Any:
    """The user's devices: one per connection (deregistered ones are gone)."""
    return devices_of(service, caller.team_id, user_id, as_of)


@router.get(
    "/v2/user/{user_id:uuid}/device/{device_id}",
    response_model=Device,
    responses=error_responses(
        401, 404, 422, described={404: USER_NOT_FOUND[404] + " Or no such device of the user."}
    ),
)
def get_device(
    service: CurrentService,
    caller: TeamApiCaller,
    user_id: UUID,
    device_id: Annotated[UUID, Path()],
    as_of: TeamAsOf,
) -> Any:
    """One of the user's devices, by its id (a 404 when the user has no such device)."""
    for device in devices_of(service, caller.team_id, user_id, as_of):
        if device.id == device_id:
            return device
    raise HTTPException(404, "Device not found.")
