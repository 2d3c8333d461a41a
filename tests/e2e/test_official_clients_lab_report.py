"""The lab report parser through both official clients, unchanged (issue 34): the real team
API under uvicorn; a lab report PDF uploaded with `vital` 2.1.569's and
`junction-api-sdk` 2.0.0's `lab_report.parser_create_job` (multipart, as each sends it:
vital one file, junction a list), parsed by the scheduler's job, read with each client's
`lab_report.parser_get_job` (parsed as their ParsingJob, ParsedLabReportData and
LabReportResult) and held to what the API answers over plain HTTP; a file that is not a
PDF is each client's 422 error, a scanned page a failed job with the clients'
failure_reason. On both databases."""

from __future__ import annotations

import httpx
import junction
import vital
from healthledger.adapters.composition import Service
from junction.core.api_error import ApiError as JunctionApiError
from vital.core.api_error import ApiError
from vital.errors.unprocessable_entity_error import UnprocessableEntityError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.lab_report_pdfs import RIVERSIDE_ROWS, blank_pdf, riverside_report

pytestmark = CLIENTS_PARSE_ANSWERS


def test_both_clients_upload_a_lab_report_and_read_its_results(
    api: vital.Vital, base_url: str, service: Service, team: Team
) -> None:
    user_id = str(api.user.create(client_user_id="oc-lab-report").user_id)
    other = junction.Junction(api_key=team.key, base_url=base_url, timeout=30)
    plain = httpx.Client(base_url=base_url, headers={"x-vital-api-key": team.key}, timeout=30)

    by_vital = api.lab_report.parser_create_job(
        file=("report.pdf", riverside_report(), "application/pdf"),
        user_id=user_id,
        needs_human_review=True,
    )
    assert by_vital.status.value == "started" and by_vital.data is None
    assert by_vital.job_id == by_vital.id and by_vital.needs_human_review is True
    by_junction = other.lab_report.parser_create_job(
        file=[("report.pdf", riverside_report(), "application/pdf")], user_id=user_id
    )
    assert by_junction.status.value == "started" and by_junction.needs_human_review is False
    assert service.jobs.parse_lab_reports() == 2

    for job_id in (by_vital.id, by_junction.id):
        expected = plain.get(f"/lab_report/v1/parser/job/{job_id}").json()
        assert expected["status"] == "completed"
        for client in (api, other):
            job = client.lab_report.parser_get_job(job_id)
            assert job.status.value == "completed" and job.is_reviewed is False
            assert job.data is not None
            meta = job.data.metadata
            assert (meta.patient_first_name, meta.patient_last_name, meta.dob) == (
                "Ada",
                "Lovelace",
                "1985-12-10",
            )
            assert meta.lab_name == expected["data"]["metadata"]["lab_name"]
            names = [r.test_name for r in job.data.results]
            assert names == [row[0] for row in RIVERSIDE_ROWS]
            for result, wanted in zip(job.data.results, expected["data"]["results"], strict=True):
                assert result.value == wanted["value"]
                assert result.units == wanted["units"]
                assert result.min_reference_range == wanted["min_reference_range"]
                assert result.max_reference_range == wanted["max_reference_range"]
                assert result.interpretation is not None
                assert result.interpretation.value == wanted["interpretation"]
                assert [m.loinc_code for m in result.loinc_matches or []] == [
                    m["loinc_code"] for m in wanted["loinc_matches"]
                ]
            glucose = job.data.results[0]
            assert glucose.is_above_max_range is True
            assert glucose.type is not None and glucose.type.value == "numeric"

    # Not a PDF: the client's 422; a page without text: a failed job, the clients' reason.
    try:
        api.lab_report.parser_create_job(
            file=("notes.txt", b"Glucose 112 mg/dL", "text/plain"), user_id=user_id
        )
        raise AssertionError("a text file was taken")
    except UnprocessableEntityError as error:
        assert error.status_code == 422
    scanned = other.lab_report.parser_create_job(
        file=[("scan.pdf", blank_pdf(), "application/pdf")], user_id=user_id
    )
    assert service.jobs.parse_lab_reports() == 1
    failed = other.lab_report.parser_get_job(scanned.id)
    assert failed.status.value == "failed" and failed.data is None
    assert failed.failure_reason is not None and failed.failure_reason.value == "low_quality"
    assert api.lab_report.parser_get_job(scanned.id).status.value == "failed"

    # An unknown or malformed job id: not found, through either client.
    for client_error, call in (
        (ApiError, lambda: api.lab_report.parser_get_job("00000000-0000-4000-8000-000000000000")),
        (JunctionApiError, lambda: other.lab_report.parser_get_job("not-a-job")),
    ):
        try:
            call()
            raise AssertionError("an unknown job was found")
        except client_error as error:
            assert error.status_code == 404
    plain.close()
