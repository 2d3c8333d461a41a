"""The lab report parser (issue 34's `lab_report.parser_create_job` and `parser_get_job`;
docs/labs.md) through the team API's ASGI app and the scheduler's job, on SQLite and
PostgreSQL: the result report the service itself prints (Chromium) for a completed order,
uploaded, parses back into the order's own results; a hand-made PDF of another lab's layout
parses too; bad files are a 422 at the upload or a failed job with its reason, never a 500;
the file and the parsed report are sealed with the user's key and go with its erasure;
another team's job is a 404; `as_of` reads the job as it stood; a dead worker's job is
taken over after its lease, and given up after three claims."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import lab_report_uploads, stored_events
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.report_parsing import LabReportParsingJob

from tests.conftest import Team, create_user
from tests.integration.test_orders import T0, complete, placed
from tests.integration.test_orders import settings as orders_settings
from tests.integration.test_orders import team as orders_team
from tests.integration.test_orders import user as orders_user
from tests.lab_report_pdfs import (
    blank_pdf,
    encrypted_pdf,
    letter_without_results,
    riverside_report,
)

# The orders' fixtures: a team made before T0, a user with demographics (Ada Lovelace).
settings = orders_settings
team = orders_team
user = orders_user

JOBS = "/lab_report/v1/parser/job"
CTX = CommandContext.system("test:lab-reports")


def upload(
    client: TestClient,
    team: Team,
    user_id: str,
    *files: bytes,
    **fields: str,
) -> Any:
    return client.post(
        JOBS,
        files=[
            ("file", (f"report-{n}.pdf", data, "application/pdf")) for n, data in enumerate(files)
        ],
        data={"user_id": user_id, **fields},
        headers=team.headers,
    )


def parsed(client: TestClient, team: Team, service: Service, user_id: str, pdf: bytes) -> Any:
    created = upload(client, team, user_id, pdf)
    assert created.status_code == 200, created.text
    job = created.json()
    assert job["status"] == "started" and job["data"] is None
    assert service.jobs.parse_lab_reports() == 1
    read = client.get(f"{JOBS}/{job['id']}", headers=team.headers)
    assert read.status_code == 200, read.text
    return read.json()


def stored_upload_rows(service: Service, user_id: str) -> list[Any]:
    with service.db.read() as conn:
        return list(
            conn.execute(
                sa.select(lab_report_uploads).where(
                    lab_report_uploads.c.user_id == uuid.UUID(user_id)
                )
            ).all()
        )


def test_the_result_report_the_service_prints_parses_back_into_the_orders_results(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    with freeze_time(T0):
        order = placed(client, team, user)
        complete(client, team, order["id"], "abnormal")
    pdf = client.get(f"/v3/order/{order['id']}/result/pdf", headers=team.headers)
    assert pdf.status_code == 200, pdf.text
    results = client.get(f"/v3/order/{order['id']}/result", headers=team.headers).json()

    created = upload(client, team, user, pdf.content, needs_human_review="true")
    assert created.status_code == 200, created.text
    job = created.json()
    assert job["id"] == job["job_id"] and job["needs_human_review"] is True
    assert job["is_reviewed"] is False and job["user_id"] == user
    # The file waits sealed: no byte of it in clear.
    (row,) = stored_upload_rows(service, user)
    assert b"%PDF" not in bytes(row.files) and b"Lovelace" not in bytes(row.files)

    assert service.jobs.parse_lab_reports() == 1
    assert stored_upload_rows(service, user) == []  # discarded once parsed
    read = client.get(f"{JOBS}/{job['id']}", headers=team.headers)
    assert read.status_code == 200, read.text
    answer = read.json()
    assert answer["status"] == "completed" and answer["failure_reason"] is None
    data = answer["data"]
    meta = results["metadata"]
    assert data["metadata"]["patient_first_name"] == "Ada"
    assert data["metadata"]["patient_last_name"] == "Lovelace"
    assert data["metadata"]["dob"] == meta["dob"]
    assert data["metadata"]["lab_name"] == meta["laboratory"] == "Quest Diagnostics"
    assert data["metadata"]["specimen_number"] == meta["specimen_number"]
    assert data["metadata"]["date_collected"] == meta["date_collected"][:10]
    # Every result of the order, in its order, with what it said.
    assert answer["result_count"] == len(results["results"]) == len(data["results"])
    assert any(r["interpretation"] == "abnormal" for r in results["results"])
    for ours, printed in zip(data["results"], results["results"], strict=True):
        assert ours["test_name"] == printed["name"]
        assert ours["value"] == printed["result"]
        assert ours["units"] == printed["unit"]
        assert ours["reference_range"] == printed["reference_range"]
        assert ours["min_reference_range"] == printed["min_range_value"]
        assert ours["max_reference_range"] == printed["max_range_value"]
        assert ours["interpretation"] == printed["interpretation"], printed["name"]
        assert ours["is_above_max_range"] == printed["is_above_max_range"], printed["name"]
        assert ours["is_below_min_range"] == printed["is_below_min_range"], printed["name"]
        assert ours["lab_code"] == printed["provider_id"]
        assert ours["source_panel_name"] == printed["source_markers"][0]["name"]
        assert [m["loinc_code"] for m in ours["loinc_matches"]] == [printed["loinc"]]
        assert ours["expected_result"]["id"] == printed["expected_result_id"]
        assert ours["expected_result"]["marker_id"] == printed["source_markers"][0]["marker_id"]

    # The parsed report is sealed in the log: no name or value of it in clear.
    with service.db.read() as conn:
        states = conn.execute(
            sa.select(stored_events.c.topic, stored_events.c.state).where(
                stored_events.c.originator_id == uuid.UUID(job["id"])
            )
        ).all()
    assert [topic.rsplit(".", 2)[-2] for topic, _ in states] == [
        "Created",
        "ParsingStarted",
        "Completed",
    ]
    stored = b"".join(bytes(state) for _, state in states)
    assert b"Lovelace" not in stored and b"Glucose" not in stored and b"71.6" not in stored


def test_a_hand_made_report_of_another_labs_layout(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    answer = parsed(client, team, service, user, riverside_report())
    assert answer["status"] == "completed", answer
    meta = answer["data"]["metadata"]
    assert meta == {
        "patient_first_name": "Ada",
        "patient_last_name": "Lovelace",
        "dob": "1985-12-10",
        "gender": "female",
        "lab_name": "RIVERSIDE CLINICAL LABORATORY",
        "date_reported": "2026-03-02",
        "date_collected": "2026-03-01",
        "specimen_number": "RC-2026-0042",
    }
    found = {
        r["test_name"]: (
            r["value"],
            r["units"],
            r["min_reference_range"],
            r["max_reference_range"],
            r["interpretation"],
            r["type"],
            [m["loinc_code"] for m in r["loinc_matches"]],
        )
        for r in answer["data"]["results"]
    }
    assert found == {
        "Glucose": ("112", "mg/dL", 65.0, 99.0, "abnormal", "numeric", ["2345-7"]),
        "Hemoglobin A1c": ("5.4", "%", None, 5.7, "normal", "numeric", ["4548-4"]),
        "TSH": ("0.21", "mIU/L", 0.4, 4.5, "abnormal", "numeric", ["3016-3"]),
        # Not in our catalog: no LOINC, no match; a negative screen reads as normal.
        "HIV-1/2 Antibody": ("Negative", None, None, None, "normal", "boolean", []),
        "Potassium": ("6.8", "mmol/L", 3.5, 5.3, "critical", "numeric", ["2823-3"]),
    }
    glucose = answer["data"]["results"][0]
    assert glucose["is_above_max_range"] is True and glucose["flag"] == "HIGH"
    assert answer["data"]["results"][3]["expected_result"] is None


def test_bad_files_are_a_422_at_the_upload_or_a_failed_job_never_a_500(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    refused = {
        "not_a_pdf": [b"Glucose 112 mg/dL\n"],
        "empty_file": [b""],
        "encrypted_pdf": [encrypted_pdf()],
        "unreadable_pdf": [b"%PDF-1.7\n" + b"\x00garbage" * 50],
        "file_too_large": [b"%PDF-1.4\n" + b"%" * (10 * 1024**2)],
        "too_many_pages": [blank_pdf(31)],
    }
    for code, files in refused.items():
        response = upload(client, team, user, *files)
        assert response.status_code == 422, (code, response.text)
        (problem,) = response.json()["detail"]
        assert (problem["type"], problem["loc"]) == (code, ["body", "file"]), problem
        assert problem["input"] == "[redacted]"
    assert stored_upload_rows(service, user) == []
    # The form itself.
    pdf = riverside_report()
    cases: list[tuple[dict[str, Any], str, list[str]]] = [
        (
            {"data": {"user_id": user}, "files": [("needs_human_review", (None, "false"))]},
            "missing",
            ["body", "file"],
        ),
        ({"files": [("file", ("r.pdf", pdf, "application/pdf"))]}, "missing", ["body", "user_id"]),
        (
            {"files": [("file", ("r.pdf", pdf, "application/pdf"))], "data": {"user_id": "me"}},
            "uuid_parsing",
            ["body", "user_id"],
        ),
        (
            {
                "files": [("file", ("r.pdf", pdf, "application/pdf"))],
                "data": {"user_id": user, "needs_human_review": "perhaps"},
            },
            "bool_parsing",
            ["body", "needs_human_review"],
        ),
        (
            {"files": [("file", ("r.pdf", pdf, "application/pdf"))] * 6, "data": {"user_id": user}},
            "too_many_files",
            ["body", "file"],
        ),
        ({"json": {"user_id": user}}, "multipart_expected", ["body", "file"]),
    ]
    for request, kind, loc in cases:
        response = client.post(JOBS, headers=team.headers, **request)
        assert response.status_code == 422, (kind, response.text)
        (problem,) = response.json()["detail"]
        assert (problem["type"], problem["loc"]) == (kind, loc)
    # Files that are PDFs but say nothing readable fail their job, with the reason.
    for pdf_bytes, code, reason in (
        (blank_pdf(), "no_text", "low_quality"),
        (letter_without_results(), "no_results_found", "low_quality"),
    ):
        answer = parsed(client, team, service, user, pdf_bytes)
        assert answer["status"] == "failed", answer
        assert (answer["failure_code"], answer["failure_reason"]) == (code, reason)
        assert answer["data"] is None and answer["failure_message"]
    # Two files read as one report.
    both = upload(client, team, user, riverside_report(), riverside_report())
    assert both.status_code == 200 and both.json()["file_count"] == 2
    assert service.jobs.parse_lab_reports() == 1
    again = client.get(f"{JOBS}/{both.json()['id']}", headers=team.headers).json()
    assert again["status"] == "completed" and again["result_count"] == 10


def test_another_teams_job_and_user_are_not_found(
    client: TestClient, team: Team, user: str, service: Service, other_team: Team
) -> None:
    created = upload(client, team, user, riverside_report())
    job_id = created.json()["id"]
    assert upload(client, other_team, user, riverside_report()).status_code == 404
    for path in (f"{JOBS}/{job_id}", f"{JOBS}/{uuid.uuid4()}", f"{JOBS}/not-a-job"):
        response = client.get(path, headers=other_team.headers)
        assert response.status_code == 404, response.text
    assert client.get(f"{JOBS}/not-a-job", headers=team.headers).status_code == 404
    assert client.get(f"{JOBS}/{job_id}").status_code == 401
    assert upload(client, team, str(uuid.uuid4()), riverside_report()).status_code == 404
    assert client.get(f"{JOBS}/{job_id}", headers=team.headers).status_code == 200


def test_the_job_as_of_an_instant(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    with freeze_time(T0) as frozen:
        job_id = upload(client, team, user, riverside_report()).json()["id"]
        frozen.tick(timedelta(minutes=1))
        assert service.jobs.parse_lab_reports() == 1
        frozen.tick(timedelta(minutes=1))
        url = f"{JOBS}/{job_id}"
        before = client.get(
            url, params={"as_of": (T0 + timedelta(seconds=30)).isoformat()}, headers=team.headers
        )
        assert before.status_code == 200, before.text
        assert before.json()["status"] == "started" and before.json()["data"] is None
        after = client.get(
            url, params={"as_of": (T0 + timedelta(seconds=90)).isoformat()}, headers=team.headers
        )
        assert after.json()["status"] == "completed"
        assert after.json()["data"] == client.get(url, headers=team.headers).json()["data"]
        earlier = client.get(
            url, params={"as_of": (T0 - timedelta(seconds=1)).isoformat()}, headers=team.headers
        )
        assert earlier.status_code == 404


def test_erasure_takes_the_upload_and_the_parsed_report(
    client: TestClient, team: Team, service: Service
) -> None:
    with freeze_time(T0):
        user_id = create_user(client, team, "parser-erased")["user_id"]
        done = upload(client, team, user_id, riverside_report()).json()["id"]
        assert service.jobs.parse_lab_reports() == 1
        waiting = upload(client, team, user_id, riverside_report()).json()["id"]
        assert len(stored_upload_rows(service, user_id)) == 1
        service.users.delete_user(CTX, team.team_id, uuid.UUID(user_id))
        # Scheduled for deletion: its jobs are not found, the waiting one fails.
        assert client.get(f"{JOBS}/{done}", headers=team.headers).status_code == 404
        assert service.jobs.parse_lab_reports() == 1
    job = service.ledger.find(uuid.UUID(waiting))
    assert isinstance(job, LabReportParsingJob) and job.failure_code == "user_erased"
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 1
    assert stored_upload_rows(service, user_id) == []
    completed = service.ledger.find(uuid.UUID(done))
    assert isinstance(completed, LabReportParsingJob) and completed.sealed_data is not None
    # The key is gone: the sealed report opens no more.
    assert service.key_store.open(uuid.UUID(user_id), completed.sealed_data) is None
    assert client.get(f"{JOBS}/{done}", headers=team.headers).status_code == 404


def test_an_upload_left_by_an_erasure_in_flight_is_erased(
    client: TestClient, team: Team, service: Service
) -> None:
    """An upload kept but not parsed when the user is erased: the erasure deletes it."""
    with freeze_time(T0):
        user_id = create_user(client, team, "parser-waiting")["user_id"]
        upload(client, team, user_id, riverside_report())
        service.users.delete_user(CTX, team.team_id, uuid.UUID(user_id))
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 1
    assert stored_upload_rows(service, user_id) == []


def test_a_dead_workers_job_is_taken_over_after_its_lease_then_given_up(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    parsing = service.report_parsing
    with freeze_time(T0) as frozen:
        job_id = uuid.UUID(upload(client, team, user, riverside_report()).json()["id"])
        for _attempt in range(3):
            # A worker claims the job and dies before an outcome.
            job = service.ledger.find(job_id)
            assert isinstance(job, LabReportParsingJob)
            job.start(CTX, service.clock())
            service.ledger.save(job)
            assert parsing.run_due() == 0  # its lease holds
            frozen.tick(timedelta(minutes=5, seconds=1))
        # Three claims without an outcome: given up, the file discarded.
        assert parsing.run_due() == 1
    job = service.ledger.find(job_id)
    assert isinstance(job, LabReportParsingJob)
    assert (job.status, job.failure_code, job.failure_reason) == (
        "failed",
        "worker_gave_up",
        "processing_error",
    )
    assert stored_upload_rows(service, user) == []


def test_a_taken_over_job_completes(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    with freeze_time(T0) as frozen:
        job_id = uuid.UUID(upload(client, team, user, riverside_report()).json()["id"])
        job = service.ledger.find(job_id)
        assert isinstance(job, LabReportParsingJob)
        job.start(CTX, service.clock())
        service.ledger.save(job)
        assert service.jobs.parse_lab_reports() == 0
        frozen.tick(timedelta(minutes=6))
        assert service.jobs.parse_lab_reports() == 1
    answer = client.get(f"{JOBS}/{job_id}", headers=team.headers).json()
    assert answer["status"] == "completed" and answer["result_count"] == 5


@pytest.mark.parametrize("field", ["user_id", "needs_human_review"])
def test_form_fields_are_never_echoed(
    client: TestClient, team: Team, user: str, field: str
) -> None:
    secret = "Ada Lovelace 1985-12-10"
    data = {"user_id": user, field: secret}
    response = client.post(
        JOBS,
        files=[("file", ("r.pdf", riverside_report(), "application/pdf"))],
        data=data,
        headers=team.headers,
    )
    assert response.status_code == 422
    assert secret not in response.text
