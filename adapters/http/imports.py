"""Team API routes for imports of a maker's export file (docs/makers/apple_health.md):
`POST /v2/user/{user_id}/import/apple_health` takes the Health app's `export.zip` as the
request body (`Content-Type: application/zip`), streamed to a file and never held in
memory, and answers 202 with the import's id; the import runs in the background, and
`GET /v2/user/{user_id}/import/apple_health/{import_id}` reads how far it is.

The upload's body is exempt from the API's JSON body limit (`max_body_bytes`, see
`UNLIMITED_PATH`) and has its own, `apple_health_max_upload_bytes`.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any
from uuid import UUID, uuid4

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from healthledger.adapters.compliance.time_travel import aggregate_as_of, reads_as_of
from healthledger.adapters.http.as_of import UploadAsOf
from healthledger.adapters.http.auth import UploadApiCaller, UploadCaller
from healthledger.adapters.http.errors import (
    REDACTED,
    USER_NOT_FOUND,
    ErrorBody,
    error_responses,
)
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.providers.apple_health import FILE_FORMAT, PROVIDER
from healthledger.adapters.providers.apple_health_export import check_upload
from healthledger.adapters.providers.import_files import UploadTooLarge
from healthledger.domain.connections.imports import DataImport, ImportNotFound, ImportRefused
from healthledger.domain.errors import UserNotFound
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import ClientDisconnect

router = APIRouter(tags=["imports"], route_class=LedgerRoute)

# The upload's path: the body limit middleware leaves its body to the route.
UNLIMITED_PATH = re.compile(r"^/v2/user/[^/]+/import/apple_health/?$")
# What an export.zip may be sent as (browsers and tools name zips differently).
ZIP_TYPES = frozenset(
    {"application/zip", "application/x-zip-compressed", "application/octet-stream"}
)

_IMPORT_NOT_FOUND = {
    404: "Unknown user, another team's user, scheduled for deletion, or no such import of the user."
}


class ImportStatus(BaseModel):
    """An import of a maker's export file: where it is, and what it found."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "import_id": "9b2f4c1e-5d7a-4e3b-8c6f-2a1d0e9f8b7c",
                    "user_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
                    "provider": "apple_health_kit",
                    "status": "success",
                    "progress": 1.0,
                    "size_bytes": 48213377,
                    "counts": {
                        "records_read": 812004,
                        "records_mapped": 801377,
                        "records_skipped": 10627,
                        "workouts": 212,
                        "days_created": 14230,
                        "days_updated": 0,
                    },
                    "received_at": "2026-11-29T08:00:00+00:00",
                    "started_at": "2026-11-29T08:00:01+00:00",
                    "ended_at": "2026-11-29T08:00:41+00:00",
                    "oldest_day": "2023-01-04",
                    "newest_day": "2026-11-28",
                    "failure_code": None,
                    "failure_reason": None,
                }
            ]
        }
    )

    import_id: UUID
    user_id: UUID
    provider: str = Field(examples=["apple_health_kit"])
    status: str = Field(
        description="received, in_progress, success or failure",
        examples=["in_progress"],
    )
    progress: float = Field(description="How far the import is, 0 to 1.", examples=[0.42])
    size_bytes: int
    counts: dict[str, int] = Field(
        description="Records read, mapped and skipped, workouts, days created and updated.",
        examples=[{"records_read": 120000, "records_mapped": 118000}],
    )
    received_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    oldest_day: date | None
    newest_day: date | None
    failure_code: str | None = Field(
        default=None,
        description="Why a failed import failed: not_a_zip, no_export_xml, too_large, "
        "malformed_xml, entities_refused, not_an_export, export_of_another_person, "
        "user_erased, upload_missing, unexpected_error.",
    )
    failure_reason: str | None = None


def status_of(job: DataImport) -> dict[str, Any]:
    return {
        "import_id": job.id,
        "user_id": job.user_id,
        "provider": job.provider,
        "status": job.status,
        "progress": job.progress,
        "size_bytes": job.size_bytes,
        "counts": job.counts,
        "received_at": job.received_at,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "oldest_day": job.oldest_day,
        "newest_day": job.newest_day,
        "failure_code": job.failure_code,
        "failure_reason": job.failure_reason,
    }


def _refused(status: int, error_type: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"detail": {"error_type": error_type, "error_message": message}}, status_code=status
    )


@router.post(
    "/v2/user/{user_id:uuid}/import/apple_health",
    status_code=202,
    response_model=ImportStatus,
    responses={
        **error_responses(401, 404, 422, described=USER_NOT_FOUND),
        413: {"description": "Larger than the upload limit.", "model": ErrorBody},
        415: {"description": "Not sent as application/zip.", "model": ErrorBody},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The Health app's export.zip, as it is (apple_health_export/"
            "export.xml inside), as the raw body: not multipart, not JSON.",
            "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def import_apple_health(
    request: Request, service: CurrentService, user_id: UUID, caller: UploadApiCaller
) -> Any:
    """Upload a user's Apple Health export (ours): 202 with the import, which runs in the
    background. A file that is not a zip or holds no export.xml is a 422 at once; a file
    found broken while it is read fails the import, with a fixed reason. With a mobile
    SDK's sign-in token (`Authorization: Bearer`) instead of the team key: its own user's
    only (any other is a 404)."""
    _check_uploader(caller, user_id)
    await run_in_threadpool(service.users.load_live, caller.team_id, user_id)
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in ZIP_TYPES:
        return _refused(415, "UNSUPPORTED_MEDIA_TYPE", "Send the export.zip as application/zip.")
    limit = service.settings.apple_health_max_upload_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return _refused(413, "TOO_LARGE", f"The upload is larger than {limit} bytes.")
    files = service.import_files
    import_id = uuid4()
    try:
        size = await files.receive(import_id, request.stream(), limit)
    except UploadTooLarge:
        return _refused(413, "TOO_LARGE", f"The upload is larger than {limit} bytes.")
    except ClientDisconnect:
        return _refused(400, "UPLOAD_INCOMPLETE", "The upload was cut off.")
    try:
        await run_in_threadpool(check_upload, files.path(import_id))
        job = await run_in_threadpool(_receive, service, caller, user_id, import_id, size)
    except ImportRefused as exc:
        files.discard(import_id)
        # A body that is no export is a 422 of the documented validation shape (every 422
        # of both APIs is): the problem's type is the refusal's code.
        problem = {"type": exc.code, "loc": ["body"], "msg": exc.message, "input": REDACTED}
        return JSONResponse({"detail": [problem]}, status_code=422)
    except BaseException:
        files.discard(import_id)
        raise
    return JSONResponse(
        ImportStatus.model_validate(status_of(job)).model_dump(mode="json"), status_code=202
    )


def _check_uploader(caller: UploadCaller, user_id: UUID) -> None:
    """A sign-in token uploads for its own user: another is as unknown as a missing one."""
    if not caller.may_upload_for(user_id):
        raise UserNotFound()


def _receive(
    service: CurrentService, caller: UploadCaller, user_id: UUID, import_id: UUID, size: int
) -> DataImport:
    user = service.users.load_live(caller.team_id, user_id)
    return service.imports.receive(caller.ctx, import_id, user, PROVIDER, FILE_FORMAT, size)


@router.get(
    "/v2/user/{user_id:uuid}/import/apple_health/{import_id:uuid}",
    response_model=ImportStatus,
    responses=error_responses(401, 404, 422, described=_IMPORT_NOT_FOUND),
)
def apple_health_import(
    service: CurrentService,
    user_id: UUID,
    import_id: UUID,
    caller: UploadApiCaller,
    as_of: UploadAsOf,
) -> Any:
    """An Apple Health import of the user: its status, progress and counts (ours); with
    `as_of`, as it stood at that instant (from the log: not received yet is a 404). A
    sign-in token reads its own user's imports only."""
    _check_uploader(caller, user_id)
    if as_of is None:
        service.users.load_live(caller.team_id, user_id)
        return status_of(service.imports.find(caller.team_id, user_id, import_id))
    reads_as_of(service, as_of)  # a future instant is refused
    job = aggregate_as_of(service, import_id, as_of)
    if not isinstance(job, DataImport) or job.team_id != caller.team_id or job.user_id != user_id:
        raise ImportNotFound()
    return status_of(job)
