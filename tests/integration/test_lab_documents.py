"""The printed documents of lab testing (issue 33; docs/labs.md, Documents) through the team
API, on both databases: each PDF renders a page that is not blank (pdftoppm) and holds the
values it must print (pdftotext): the lab, the team, the patient, the markers with their
codes, the requisition number (with its Code 128 barcode), the results with their reference
ranges. Another team's order or lab test is a 404; after the user's erasure every document
of its orders is a 404."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters import printing
from healthledger.adapters.composition import Service
from healthledger.adapters.reference import icd10
from healthledger.domain.labs.documents import requisition_number

from tests.conftest import Team
from tests.integration import test_deletion_report as pdf_tools
from tests.integration.test_orders import (
    HEART,
    T0,
    THYROID_KIT,
    WELLNESS,
    complete,
    placed,
)
from tests.integration.test_orders import settings as orders_settings
from tests.integration.test_orders import team as orders_team
from tests.integration.test_orders import user as orders_user

# The orders' fixtures (no lab failure or cancellation; a user with demographics).
settings = orders_settings
team = orders_team
user = orders_user
tools = pdf_tools.tools

ORDER_DOCUMENTS = (
    "requisition/pdf",
    "labels/pdf?collection_date=2026-03-11T08:30:00Z&number_of_labels=4",
    "abn_pdf",
    "collection_instruction_pdf",
    "result/pdf",
)


def text_of(pdf: bytes, tools: pdf_tools.Tools, tmp_path: Path, name: str) -> str:
    """The PDF's text, after checking its first page is neither blank nor solid."""
    assert pdf.startswith(b"%PDF-")
    path = tmp_path / f"{name}.pdf"
    path.write_bytes(pdf)
    prefix = tmp_path / f"{name}-page"
    subprocess.run(
        [str(tools.pdftoppm), "-r", "40", "-f", "1", "-l", "1", "-gray", str(path), str(prefix)],
        check=True,
    )
    [image] = tmp_path.glob(f"{name}-page*.pgm")
    pixels = pdf_tools.pgm_pixels(image.read_bytes())
    dark = sum(1 for p in pixels if p < 128)
    assert len(pixels) > 10_000
    assert 0.003 < dark / len(pixels) < 0.5, f"{name}: the first page is blank (or solid)"
    return subprocess.run(
        [str(tools.pdftotext), "-layout", str(path), "-"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout


def flat(text: str) -> str:
    """The text with its line breaks and layout spaces as single spaces."""
    return " ".join(text.split())


def document(client: TestClient, team: Team, path: str) -> Any:
    return client.get(path, headers=team.headers)


def test_every_document_of_a_completed_order_prints_its_values(
    client: TestClient,
    team: Team,
    user: str,
    service: Service,
    tools: pdf_tools.Tools,
    tmp_path: Path,
) -> None:
    with freeze_time(T0):
        order = placed(client, team, user)
        completed = complete(client, team, order["id"], "abnormal")
    number = requisition_number(UUID(order["id"]))
    assert completed["sample_id"] == number  # the sample id the order answers
    texts = {}
    for path in ORDER_DOCUMENTS:
        response = document(client, team, f"/v3/order/{order['id']}/{path}")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/pdf"
        assert response.headers["cache-control"] == "no-store"
        texts[path.split("?")[0]] = text_of(response.content, tools, tmp_path, path[:5])
    markers = order["lab_test"]["markers"]
    assert len(markers) == 5
    for path, text in texts.items():
        assert "Quest Diagnostics" in text, path
        assert "Ada Lovelace" in text, path  # the demographics' name, opened to print
        assert number in text, path  # the requisition number (under its barcode)
    for path in ("requisition/pdf", "abn_pdf", "collection_instruction_pdf"):
        for marker in markers:
            assert marker["provider_id"] in texts[path] and marker["name"] in texts[path], path
    assert "1985-12-10" in texts["requisition/pdf"] and "78701" in texts["requisition/pdf"]
    assert "Walk-in draw at a patient service center" in flat(texts["requisition/pdf"])
    assert texts["labels/pdf"].count(number) >= 8  # four labels, each its number twice
    assert "2026-03-11 08:30 UTC" in texts["labels/pdf"]
    # The ABN's estimated costs are the markers' prices and their sum.
    total = sum(float(m["price"]) for m in markers)
    assert f"{total:.2f}" in texts["abn_pdf"]
    assert all(m["price"] in texts["abn_pdf"] for m in markers)
    # The report: every result with its value, unit and reference range, and the flags.
    results = client.get(f"/v3/order/{order['id']}/result", headers=team.headers).json()
    report = texts["result/pdf"]
    assert "abnormal" in report
    for result in results["results"]:
        assert result["name"] in report and str(result["result"]) in report
        if result["reference_range"]:
            assert result["reference_range"] in report
        if result["is_above_max_range"] or result["is_below_min_range"]:
            assert any(
                result["name"] in line and (" H " in line or " L " in line or "CRITICAL" in line)
                for line in report.splitlines()
            ), result["name"]


def test_the_requisition_marks_a_stat_order_and_prints_its_diagnoses(
    client: TestClient,
    team: Team,
    user: str,
    tools: pdf_tools.Tools,
    tmp_path: Path,
) -> None:
    """As placed: a STAT order's requisition says so, and lists the order's diagnoses (sent
    in any case, kept dotted) with the ICD-10-CM list's descriptions; a routine order's
    says routine and has no diagnoses section."""
    with freeze_time(T0):
        stat = placed(client, team, user, priority=True, icd_codes=["e6601", "Z68.41"])
        routine = placed(client, team, user)
    texts = {
        name: flat(
            text_of(
                document(client, team, f"/v3/order/{order['id']}/requisition/pdf").content,
                tools,
                tmp_path,
                name,
            )
        )
        for name, order in (("stat", stat), ("routine", routine))
    }
    assert "Laboratory requisition STAT" in texts["stat"]
    assert "STAT: process and report at once" in texts["stat"]
    assert "Diagnoses (ICD-10-CM)" in texts["stat"]
    for code in ("E66.01", "Z68.41"):
        described = flat(icd10.description(code))
        assert described, code
        assert f"{code} {described}" in texts["stat"], code
    assert "Priority Routine" in texts["routine"]
    assert "STAT" not in texts["routine"] and "Diagnoses" not in texts["routine"]


def test_the_team_name_and_each_methods_instructions(
    client: TestClient,
    team: Team,
    user: str,
    service: Service,
    tools: pdf_tools.Tools,
    tmp_path: Path,
) -> None:
    found = service.team_queries.team(team.team_id)
    assert found is not None
    team_name = found["name"]
    with freeze_time(T0):
        kit = placed(client, team, user, lab_test_id=THYROID_KIT)
        home = placed(client, team, user, lab_test_id=HEART)
    kit_text = text_of(
        document(client, team, f"/v3/order/{kit['id']}/collection_instruction_pdf").content,
        tools,
        tmp_path,
        "kit",
    )
    assert "ZRT Laboratory" in kit_text and team_name in kit_text
    assert "prepaid envelope" in flat(kit_text)
    home_text = text_of(
        document(client, team, f"/v3/order/{home['id']}/requisition/pdf").content,
        tools,
        tmp_path,
        "home",
    )
    assert "At-home draw by a phlebotomist" in flat(home_text) and "Labcorp" in home_text
    # A lab test's own instructions: no patient, its fasting flag.
    created = client.post(
        "/v3/lab_tests",
        json={
            "name": "Fasting lipids",
            "method": "walk_in_test",
            "marker_ids": [1079],
            "fasting": True,
        },
        headers=team.headers,
    )
    assert created.status_code == 200, created.text
    test_text = text_of(
        document(
            client, team, f"/v3/lab_test/{created.json()['id']}/collection_instruction_pdf"
        ).content,
        tools,
        tmp_path,
        "labtest",
    )
    assert "Fasting lipids" in test_text and "Required: nothing to eat" in flat(test_text)
    assert "7600" in test_text and "Ada" not in test_text


def test_documents_an_order_cannot_have_yet_or_any_more(
    client: TestClient, team: Team, user: str
) -> None:
    with freeze_time(T0):
        order = placed(client, team, user)
    early = document(client, team, f"/v3/order/{order['id']}/result/pdf")
    assert early.status_code == 409 and "no result report" in early.json()["detail"]
    assert client.post(f"/v3/order/{order['id']}/cancel", headers=team.headers).status_code == 200
    for path in ORDER_DOCUMENTS:
        response = document(client, team, f"/v3/order/{order['id']}/{path}")
        assert response.status_code == 409, path
        assert "cancelled" in response.json()["detail"]
    bad = document(client, team, f"/v3/order/{order['id']}/labels/pdf?collection_date=soon")
    assert bad.status_code == 422
    many = document(
        client,
        team,
        f"/v3/order/{order['id']}/labels/pdf?collection_date=2026-03-11&number_of_labels=21",
    )
    assert many.status_code == 422
    # A date far outside any collection (year 1 east of UTC would not convert): a 422.
    for far in ("0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"):
        path = f"/v3/order/{order['id']}/labels/pdf"
        far_off = client.get(path, params={"collection_date": far}, headers=team.headers)
        assert far_off.status_code == 422, far


def test_another_teams_and_an_erased_users_documents_are_not_found(
    client: TestClient, team: Team, other_team: Team, user: str, service: Service
) -> None:
    with freeze_time(T0) as frozen:
        order = placed(client, team, user)
        complete(client, team, order["id"])
        created = client.post(
            "/v3/lab_tests",
            json={"name": "Ours", "method": "walk_in_test", "marker_ids": [1079]},
            headers=team.headers,
        )
        ours = created.json()["id"]
        for path in ORDER_DOCUMENTS:
            assert (
                document(client, other_team, f"/v3/order/{order['id']}/{path}").status_code == 404
            )
        path = f"/v3/lab_test/{ours}/collection_instruction_pdf"
        assert document(client, other_team, path).status_code == 404
        assert document(client, team, path).status_code == 200
        assert (
            document(
                client, other_team, f"/v3/lab_test/{WELLNESS}/collection_instruction_pdf"
            ).status_code
            == 200
        )
        assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
        frozen.tick(timedelta(days=8))
        assert service.jobs.sweep_erasures() == 1
        for path in ORDER_DOCUMENTS:
            response = document(client, team, f"/v3/order/{order['id']}/{path}")
            assert response.status_code == 404, path
            assert "Lovelace" not in response.text


@pytest.mark.parametrize("path", ["requisition/pdf", "abn_pdf"])
def test_a_non_uuid_order_is_not_a_500(client: TestClient, team: Team, path: str) -> None:
    assert document(client, team, f"/v3/order/not-an-order/{path}").status_code in (404, 422)


def test_without_chromium_a_document_is_a_clear_503(
    client: TestClient,
    team: Team,
    user: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with freeze_time(T0):
        order = placed(client, team, user)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(printing, "DEBIAN_CHROMIUM", tmp_path / "no-chromium")
    response = document(client, team, f"/v3/order/{order['id']}/requisition/pdf")
    assert response.status_code == 503
    assert response.json() == {"detail": "The document cannot be printed now; retry later."}
