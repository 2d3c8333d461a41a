"""Team API routes of the lab report parser (the official clients' `lab_report.*`;
docs/labs.md, the lab report parser): `POST /lab_report/v1/parser/job` takes a user's lab
report as multipart form data (`file`, one or more PDFs; `user_id`; `needs_human_review`)
and answers the job, `started`; the parse runs in the background (the scheduler's
lab-report-parser job, woken by the upload), and `GET /lab_report/v1/parser/job/{job_id}`
reads the job, with the parsed report once `completed`.

The upload's body is exempt from the API's JSON body limit (`max_body_bytes`, see
`UNLIMITED_PATH`): it is read into memory (never to a temporary file: it is personal health
data) up to `lab_report_max_upload_bytes` and its form's overhead, past which it is a 422.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from healthledger.adapters.compliance.time_travel import aggregate_as_of, reads_as_of
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller, TeamCaller
from healthledger.adapters.http.errors import REDACTED, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.errors import UserNotFound, UserScheduledForDeletion
from healthledger.domain.labs.report_parsing import (
    COMPLETED,
    LabReportParsingJob,
    ParsingJobNotFound,
)
from healthledger.domain.labs.report_reading import TOO_LARGE, ReportRefused
from pydantic import BaseModel, ConfigDict, Field
from python_multipart import FormParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import Field as FormField
from python_multipart.multipart import File as FormFile
from python_multipart.multipart import parse_options_header
from starlette.requests import ClientDisconnect

router = APIRouter(tags=["lab_report"], route_class=LedgerRoute)

# The multipart parser logs what it found malformed, quoting bytes of the body: a lab
# report's, kept out of the service's log.
logging.getLogger("python_multipart").setLevel(logging.CRITICAL)

# The upload's path: the body limit middleware leaves its body to the route.
UNLIMITED_PATH = re.compile(r"^/lab_report/v1/parser/job/?$")
# What a multipart body may add to its files (boundaries, part headers, the fields).
_FORM_OVERHEAD = 64 * 1024

_JOB_NOT_FOUND = {
    404: "Unknown job, another team's, a malformed id, or its user deleted or erased."
}
_USER_NOT_FOUND = {
    404: "user_id names an unknown user, another team's, or one scheduled for deletion."
}


# -- the answer (the clients' ParsingJob) ---------------------------------------------------


class LoincMatch(BaseModel):
    loinc_code: str = Field(examples=["2345-7"])
    loinc_name: str = Field(examples=["Glucose [Mass/volume] in Serum or Plasma"])
    display_name: str | None = Field(default=None, examples=["Glucose"])
    aliases: list[str] | None = Field(default=None, examples=[[]])
    confidence_score: float = Field(
        description="Ours: 1 for the catalog's result of that name, 0.9 for a folded "
        "match, 0.5 for a LOINC printed on the report that our catalog does not know.",
        examples=[1.0],
    )


class CatalogMatch(BaseModel):
    """Ours: the expected result of our marker catalog the result was matched to by name
    (the report's lab's first), and its marker (GET /v3/lab_tests/markers)."""

    id: int = Field(examples=[10001])
    slug: str = Field(examples=["glucose"])
    lab_id: int = Field(examples=[1])
    marker_id: int | None = Field(examples=[1077])
    marker_name: str | None = Field(examples=["Comprehensive Metabolic Panel"])


class LabReportResult(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "test_name": "Glucose",
                    "value": "71.6",
                    "type": "numeric",
                    "units": "mg/dL",
                    "max_reference_range": 99.0,
                    "min_reference_range": 65.0,
                    "reference_range": "65-99",
                    "source_panel_name": "Comprehensive Metabolic Panel",
                    "loinc_matches": [
                        {
                            "loinc_code": "2345-7",
                            "loinc_name": "Glucose",
                            "display_name": "Glucose",
                            "aliases": [],
                            "confidence_score": 1.0,
                        }
                    ],
                    "loinc_match_status": "matched",
                    "interpretation": "normal",
                    "is_above_max_range": False,
                    "is_below_min_range": False,
                    "flag": None,
                    "lab_code": "483",
                    "expected_result": {
                        "id": 10001,
                        "slug": "glucose",
                        "lab_id": 1,
                        "marker_id": 1077,
                        "marker_name": "Comprehensive Metabolic Panel",
                    },
                }
            ]
        }
    )

    test_name: str
    value: str = Field(description="As printed (a number, `<0.5`, `Negative`...).")
    type: str | None = Field(description="numeric, range, boolean or comment.")
    units: str | None
    max_reference_range: float | None
    min_reference_range: float | None
    reference_range: str | None = Field(default=None, description="Ours: as printed.")
    source_panel_name: str | None
    loinc_matches: list[LoincMatch] | None
    loinc_match_status: str | None = Field(description="matched or unmatched.")
    interpretation: str | None = Field(description="normal, abnormal, critical or unknown.")
    is_above_max_range: bool | None
    is_below_min_range: bool | None
    flag: str | None = Field(default=None, description="Ours: the flag as printed (H, L...).")
    lab_code: str | None = Field(default=None, description="Ours: the lab's test code.")
    expected_result: CatalogMatch | None = None


class ResultMetadata(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "patient_first_name": "Ada",
                    "patient_last_name": "Lovelace",
                    "dob": "1985-12-10",
                    "gender": "female",
                    "lab_name": "Quest Diagnostics",
                    "date_reported": "2026-03-10",
                    "date_collected": "2026-03-10",
                    "specimen_number": "9662639669",
                }
            ]
        }
    )

    patient_first_name: str = Field(description="As the report prints it; empty if none.")
    patient_last_name: str
    dob: str = Field(description="YYYY-MM-DD as the report prints it; empty if none.")
    gender: str | None = None
    lab_name: str = Field(description="A lab of our catalog the report names, else its heading.")
    date_reported: str | None
    date_collected: str | None
    specimen_number: str | None


class ParsedLabReportData(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "metadata": ResultMetadata.model_config["json_schema_extra"]["examples"][0],  # type: ignore[index]
                    "results": LabReportResult.model_config["json_schema_extra"]["examples"],  # type: ignore[index]
                }
            ]
        }
    )

    metadata: ResultMetadata
    results: list[LabReportResult]


class ParsingJob(BaseModel):
    """A parsing job (the clients' ParsingJob, and ours beside it)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "5b1f0a9e-0c4d-4d8e-9a51-7f3e2c1b0a99",
                    "job_id": "5b1f0a9e-0c4d-4d8e-9a51-7f3e2c1b0a99",
                    "user_id": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
                    "status": "completed",
                    "failure_reason": None,
                    "failure_code": None,
                    "failure_message": None,
                    "data": ParsedLabReportData.model_config["json_schema_extra"]["examples"][0],  # type: ignore[index]
                    "needs_human_review": False,
                    "is_reviewed": False,
                    "file_count": 1,
                    "size_bytes": 148213,
                    "result_count": 1,
                    "created_at": "2026-03-10T12:00:00+00:00",
                    "ended_at": "2026-03-10T12:00:02+00:00",
                }
            ]
        }
    )

    id: str
    job_id: str = Field(description="The same as id (the older client reads it).")
    user_id: UUID
    status: Literal["upload_pending", "started", "completed", "failed"] = Field(
        description="started (the file is with us, the parse queued or running), "
        "completed or failed; never upload_pending here."
    )
    failure_reason: str | None = Field(
        description="invalid_input, low_quality, too_many_pages or processing_error."
    )
    failure_code: str | None = Field(
        default=None,
        description="Ours, finer: not_a_pdf, empty_file, file_too_large, too_many_pages, "
        "encrypted_pdf, unreadable_pdf, no_text, no_results_found, user_erased, "
        "upload_missing, worker_gave_up.",
    )
    failure_message: str | None = None
    data: ParsedLabReportData | None
    needs_human_review: bool
    is_reviewed: bool = Field(description="Always false: no one reviews parses here.")
    file_count: int
    size_bytes: int
    result_count: int | None
    created_at: datetime
    ended_at: datetime | None


def answer(job: LabReportParsingJob, data: Any) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "job_id": str(job.id),
        "user_id": job.user_id,
        "status": job.status,
        "failure_reason": job.failure_reason,
        "failure_code": job.failure_code,
        "failure_message": job.failure_message,
        "data": data,
        "needs_human_review": job.needs_human_review,
        "is_reviewed": False,
        "file_count": job.file_count,
        "size_bytes": job.size_bytes,
        "result_count": job.result_count,
        "created_at": job.created_at,
        "ended_at": job.ended_at,
    }


# -- the upload -----------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, kind: str, field: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.field, self.message = kind, field, message


def _problem(kind: str, field: str, message: str) -> JSONResponse:
    # Every 422 of both APIs has the documented validation shape; the input is never
    # echoed (a file is personal health data).
    problem = {"type": kind, "loc": ["body", field], "msg": message, "input": REDACTED}
    return JSONResponse({"detail": [problem]}, status_code=422)


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    too_large = _Refused(TOO_LARGE, "file", f"The files are larger than {limit} bytes.")
    if declared.isdigit() and int(declared) > limit + _FORM_OVERHEAD:
        raise too_large
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit + _FORM_OVERHEAD:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _form(content_type: str, body: bytes, max_files: int) -> tuple[list[bytes], dict[str, str]]:
    """The form's files (parts named `file`) and its other fields, all in memory."""
    try:
        media, options = parse_options_header(content_type)
    except (ValueError, TypeError) as exc:
        raise _Refused(
            "multipart_expected", "file", "Send the form as multipart/form-data."
        ) from exc
    if media != b"multipart/form-data" or b"boundary" not in options:
        raise _Refused("multipart_expected", "file", "Send the form as multipart/form-data.")
    files: list[bytes] = []
    fields: dict[str, str] = {}

    def on_file(part: FormFile) -> None:
        if (part.field_name or b"") != b"file":
            return
        if len(files) >= max_files:
            raise _Refused("too_many_files", "file", f"At most {max_files} files a job.")
        handle = part.file_object
        handle.seek(0)
        files.append(handle.read())

    def on_field(part: FormField) -> None:
        name = (part.field_name or b"").decode("utf-8", "replace")
        if name == "file":  # a part named file sent without a filename: a file still
            if len(files) >= max_files:
                raise _Refused("too_many_files", "file", f"At most {max_files} files a job.")
            files.append(part.value or b"")
            return
        if len(fields) < 16:
            fields[name] = (part.value or b"").decode("utf-8", "replace")

    parser = FormParser(
        "multipart/form-data",
        on_field,
        on_file,
        boundary=options[b"boundary"],
        # Every file kept in memory: the body is bounded already, and a temporary file
        # would hold the report in clear on disk.
        config={"MAX_MEMORY_FILE_SIZE": len(body) + 1, "MAX_BODY_SIZE": len(body) + 1},
    )
    try:
        parser.write(body)
        parser.finalize()
    except (FormParserError, ValueError, TypeError, IndexError) as exc:
        raise _Refused("multipart_invalid", "file", "The form is not well-formed.") from exc
    return files, fields


def _user_id(fields: dict[str, str]) -> UUID:
    value = fields.get("user_id")
    if value is None:
        raise _Refused("missing", "user_id", "Field required")
    try:
        return UUID(value.strip())
    except ValueError:
        raise _Refused("uuid_parsing", "user_id", "user_id is not a UUID.") from None


def _needs_human_review(fields: dict[str, str]) -> bool:
    value = fields.get("needs_human_review")
    if value is None or value == "":
        return False
    folded = value.strip().casefold()
    if folded in ("true", "1", "yes", "on"):
        return True
    if folded in ("false", "0", "no", "off"):
        return False
    raise _Refused("bool_parsing", "needs_human_review", "needs_human_review is not a boolean.")


@router.post(
    "/lab_report/v1/parser/job",
    response_model=ParsingJob,
    responses=error_responses(401, 404, 422, described=_USER_NOT_FOUND),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file", "user_id"],
                        "properties": {
                            "file": {
                                "description": "The lab report: a text-based PDF (one or "
                                "more parts named file, read as one report).",
                                "type": "array",
                                "items": {"type": "string", "format": "binary"},
                            },
                            "user_id": {"type": "string", "format": "uuid"},
                            "needs_human_review": {"type": "boolean", "default": False},
                        },
                    }
                }
            },
        }
    },
)
async def parser_create_job(
    request: Request, service: CurrentService, caller: TeamApiCaller
) -> Any:
    """Upload a user's lab report (a text-based PDF, or several parts read as one) to be
    parsed: the job, `started`; its results come with `GET .../job/{job_id}` once
    `completed`. A file that is not a PDF, is empty, larger than the limit (10 MiB by
    default), encrypted, unreadable or of too many pages is a 422 at once; one with no text
    (a scanned image) or no table of results fails its job (`low_quality`)."""
    settings = service.settings
    try:
        body = await _body(request, settings.lab_report_max_upload_bytes)
        files, fields = _form(
            request.headers.get("content-type", ""), body, settings.lab_report_max_files
        )
        user_id = _user_id(fields)
        needs_review = _needs_human_review(fields)
        if not files:
            raise _Refused("missing", "file", "Field required")
    except _Refused as refused:
        return _problem(refused.kind, refused.field, refused.message)
    except ClientDisconnect:
        return JSONResponse(
            {"detail": {"error_type": "UPLOAD_INCOMPLETE", "error_message": "Cut off."}},
            status_code=400,
        )
    del body
    try:
        job = await run_in_threadpool(_create, service, caller, user_id, files, needs_review)
    except ReportRefused as refused:
        return _problem(refused.code, "file", refused.message)
    return answer(job, None)


def _create(
    service: CurrentService,
    caller: TeamCaller,
    user_id: UUID,
    files: Sequence[bytes],
    needs_review: bool,
) -> LabReportParsingJob:
    user = service.users.load_live(caller.team_id, user_id)
    return service.report_parsing.create(caller.ctx, user, files, needs_review)


# -- the job --------------------------------------------------------------------------------


@router.get(
    "/lab_report/v1/parser/job/{job_id}",
    response_model=ParsingJob,
    responses={**error_responses(401, 404, 422, described=_JOB_NOT_FOUND)},
)
def parser_get_job(
    service: CurrentService, job_id: str, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """A parsing job: its status, and the parsed report once completed (sealed with the
    user's key, opened for this answer). With `as_of`, as it stood at that instant (from
    the log: not created yet is a 404). Another team's job, or one whose user is deleted
    or erased, is a 404."""
    try:
        wanted = UUID(job_id)
    except ValueError:
        raise ParsingJobNotFound() from None
    if as_of is None:
        job = service.report_parsing.find(caller.team_id, wanted)
    else:
        reads_as_of(service, as_of)  # a future instant is refused
        found = aggregate_as_of(service, wanted, as_of)
        if not isinstance(found, LabReportParsingJob) or found.team_id != caller.team_id:
            raise ParsingJobNotFound()
        job = found
    try:
        service.users.load_live(caller.team_id, job.user_id)
    except (UserNotFound, UserScheduledForDeletion):
        raise ParsingJobNotFound() from None
    data = None
    if job.status == COMPLETED and job.sealed_data is not None:
        data = service.key_store.open(job.user_id, job.sealed_data)
        if data is None:
            raise ParsingJobNotFound()  # the key went with an erasure meanwhile
    return answer(job, data)
