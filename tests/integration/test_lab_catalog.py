"""The lab catalog (spec 2.7 to 2.9, endpoints 5, 8 and 12; issue 14): the shipped
reference data and its checks, the labs and markers through the team API (filters,
paging), the markers of an order set, and bad input."""

from __future__ import annotations

import json
import math
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.reference import ReferenceDataError
from healthledger.adapters.reference import labs as labs_package
from healthledger.adapters.reference.labs import lab_reference, read_lab_reference
from healthledger.adapters.reference.labs.catalog import ReferenceLabCatalog
from sqlalchemy import func, select

from tests.conftest import Team

LABS_FOLDER = Path(labs_package.__file__).parent
CENTRAL = {"quest", "labcorp", "bioreference", "sonora_quest"}
QUEST_ONLY_ACCOUNT = "6a0c2f4e-1d3b-4c5a-9e7f-0b1c2d3e4f03"
KITS_ACCOUNT = "6a0c2f4e-1d3b-4c5a-9e7f-0b1c2d3e4f02"
DEMO_QUEST_TEST = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"
DEMO_LABCORP_TEST = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a02"


def loinc_check_digit(body: str) -> int:
    """LOINC's mod-10 check digit (Luhn over the digits before the hyphen)."""
    total = 0
    for position, char in enumerate(reversed(body)):
        digit = int(char) * (2 if position % 2 == 0 else 1)
        total += digit - 9 if digit > 9 else digit
    return (10 - total % 10) % 10


def markers(client: TestClient, team: Team, **params: Any) -> dict[str, Any]:
    response = client.get("/v3/lab_tests/markers", params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()


def every_marker(client: TestClient, team: Team, **params: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    page = 1
    while True:
        answer = markers(client, team, page=page, size=100, **params)
        found += answer["markers"]
        if page >= answer["pages"]:
            return found
        page += 1


def event_count(service: Service) -> int:
    with service.db.read() as conn:
        return conn.execute(select(func.count()).select_from(stored_events)).scalar_one()


# -- the shipped data ------------------------------------------------------------------------


def test_the_shipped_catalog_is_large_real_and_consistent() -> None:
    reference = lab_reference()
    slugs = {d.lab.slug for d in reference.labs}
    assert slugs >= CENTRAL
    assert {d.lab.slug for d in reference.labs if d.central_lab} == CENTRAL
    assert any("testkit" in d.lab.collection_methods for d in reference.labs)
    assert len(reference.markers) >= 300
    results = {r.loinc.code: r for m in reference.markers for r in m.expected_results}
    assert len(results) >= 100
    for code in results:
        body, check = code.split("-")
        assert loinc_check_digit(body) == int(check), code
    codes = [(m.lab_id, m.provider_id) for m in reference.markers]
    assert len(codes) == len(set(codes))
    for marker in reference.markers:
        assert marker.price.replace(".", "", 1).isdigit() and marker.price[-3] == "."
        if marker.type == "biomarker":
            assert len(marker.expected_results) == 1
            assert marker.unit == marker.expected_results[0].unit
        else:
            assert len(marker.expected_results) > 1 and marker.unit is None
        for result in marker.expected_results:
            assert result.lab_id == marker.lab_id
            r = result.reference_range
            bounds = [b for b in (r.critical_low, r.low, r.high, r.critical_high) if b is not None]
            assert bounds == sorted(bounds)
    quest = {m.provider_id: m for m in reference.markers if m.lab_id == 1}
    # Quest's published codes: CMP 10231 holds its 18 results, HbA1c is 496 (LOINC 4548-4).
    assert len(quest["10231"].expected_results) == 18
    assert quest["496"].expected_results[0].loinc.code == "4548-4"
    # A panel's member reported alone at the same lab is the same result, with its code.
    glucose = quest["483"].expected_results[0]
    assert glucose in quest["10231"].expected_results


def test_every_state_has_service_centers_of_the_national_labs() -> None:
    sites = lab_reference().service_centers
    states = {s.state for s in sites if s.lab == "quest"}
    assert len(states) == 51  # the 50 states and DC
    assert len({s.state for s in sites if s.lab == "labcorp"}) == 51
    assert {s.state for s in sites if s.lab == "sonora_quest"} == {"AZ"}


def test_the_catalog_port_looks_up_by_id_slug_and_code() -> None:
    catalog = ReferenceLabCatalog(lab_reference())
    quest = catalog.lab_by_slug("quest")
    assert quest is not None and catalog.lab(quest.id) == quest
    assert catalog.lab(999) is None and catalog.lab_by_slug("nope") is None
    found = catalog.markers_by_provider_id(quest.id, ["7600", "missing", "496"])
    assert [m.provider_id for m in found] == ["7600", "496"]
    assert catalog.marker(found[0].id) == found[0]
    assert catalog.markers_by_provider_id(2, ["7600"]) == []  # Labcorp's codes differ


# -- broken files stop the service at start, naming the file and the entry ----------------


@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "labs"
    shutil.copytree(LABS_FOLDER, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return folder


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_copy_of_the_shipped_data_reads_as_the_shipped_data(data_copy: Path) -> None:
    assert read_lab_reference(data_copy) == lab_reference()


def test_a_marker_naming_an_unknown_result_names_its_file_and_marker(data_copy: Path) -> None:
    def typo(data: dict[str, Any]) -> None:
        data["markers"][4]["results"] = ["potasium"]

    edit(data_copy / "markers" / "quest.json", typo)
    with pytest.raises(ReferenceDataError) as raised:
        read_lab_reference(data_copy)
    message = str(raised.value)
    assert "markers/quest.json" in message and "marker 1005" in message and "potasium" in message


@pytest.mark.parametrize(
    ("file", "change", "expected"),
    [
        ("labs.json", lambda d: d["labs"].append(dict(d["labs"][0])), "lab id 1"),
        (
            "analytes.json",
            lambda d: d["analytes"][0]["reference_range"].update(low=200),
            "analytes.json is not a valid analyte list",
        ),
        (
            "markers/labcorp.json",
            lambda d: d["markers"][1].update(provider_id=d["markers"][0]["provider_id"]),
            "provider_id '001032' twice",
        ),
        (
            "markers/zrt.json",
            lambda d: d["markers"][0].update(price="12"),
            "markers/zrt.json is not a valid marker list",
        ),
        (
            "demo_lab_tests.json",
            lambda d: d["lab_tests"][2].update(method="walk_in_test"),
            "zrt does not offer walk_in_test",
        ),
        (
            "patient_service_centers.json",
            lambda d: d["sites"][0].update(lab="zrt"),
            "site 0",
        ),
        (
            "phlebotomy.json",
            lambda d: d["providers"][0].update(states=["XX"]),
            "unknown states XX",
        ),
    ],
)
def test_a_broken_file_is_refused_with_its_name_and_entry(
    data_copy: Path, file: str, change: Any, expected: str
) -> None:
    edit(data_copy / file, change)
    with pytest.raises(ReferenceDataError) as raised:
        read_lab_reference(data_copy)
    assert expected in str(raised.value)
    assert file.split("/")[-1] in str(raised.value)


def test_a_file_that_is_not_json_is_refused_with_its_name(data_copy: Path) -> None:
    (data_copy / "labs.json").write_text("{not json")
    with pytest.raises(ReferenceDataError, match=r"labs\.json is not valid JSON"):
        read_lab_reference(data_copy)


# -- labs and markers over HTTP --------------------------------------------------------------


def test_labs_are_listed_with_their_addresses(client: TestClient, team: Team) -> None:
    response = client.get("/v3/lab_tests/labs", headers=team.headers)
    assert response.status_code == 200
    labs = {lab["slug"]: lab for lab in response.json()}
    assert labs["quest"] == {
        "id": 1,
        "slug": "quest",
        "name": "Quest Diagnostics",
        "first_line_address": "500 Plaza Drive",
        "city": "Secaucus",
        "state": "NJ",
        "zipcode": "07094",
        "collection_methods": ["walk_in_test", "at_home_phlebotomy"],
        "sample_types": ["serum", "urine"],
    }
    assert labs["labcorp"]["city"] == "Burlington"
    assert labs["zrt"]["collection_methods"] == ["testkit"]
    assert client.get("/v3/lab_tests/labs").status_code == 401


def test_markers_page_through_the_whole_catalog_once(client: TestClient, team: Team) -> None:
    first = markers(client, team)
    total = len(lab_reference().markers)
    assert (first["total"], first["page"], first["size"]) == (total, 1, 50)
    assert first["pages"] == math.ceil(total / 50) and len(first["markers"]) == 50
    ids = [m["id"] for m in every_marker(client, team)]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) == total
    last = markers(client, team, page=first["pages"], size=50)
    assert len(last["markers"]) == total - 50 * (first["pages"] - 1)
    marker = first["markers"][0]
    assert marker["expected_results"][0]["loinc"]["code"] == "2345-7"  # Quest's glucose
    assert marker["price"] == "10.00" and marker["type"] == "biomarker"


def test_lab_slug_wins_over_lab_id(client: TestClient, team: Team) -> None:
    by_slug = every_marker(client, team, lab_slug="labcorp", lab_id=1)
    assert by_slug and {m["lab_id"] for m in by_slug} == {2}
    quest = every_marker(client, team, lab_id=1)
    assert {m["lab_id"] for m in quest} == {1}
    both = markers(client, team, lab_id=[1, 2])["total"]
    assert both == len(quest) + len(by_slug)


def test_name_matches_the_name_or_the_lab_code_in_any_case(client: TestClient, team: Team) -> None:
    by_name = every_marker(client, team, name="HEMOGLOBIN a1c", lab_slug="quest")
    assert {m["provider_id"] for m in by_name} == {"496", "496-E"}
    by_code = every_marker(client, team, name="10231")
    assert [m["name"] for m in by_code] == ["Comprehensive Metabolic Panel"]
    assert markers(client, team, name="no such marker")["total"] == 0
    assert markers(client, team, name="no such marker")["pages"] == 0


def test_a_la_carte_and_lab_account_filters(client: TestClient, team: Team) -> None:
    not_alone = every_marker(client, team, a_la_carte_enabled=False)
    assert not_alone and all(
        m["type"] == "panel" and not m["a_la_carte_enabled"] for m in not_alone
    )
    quest_only = every_marker(client, team, lab_account_id=QUEST_ONLY_ACCOUNT)
    assert {m["lab_id"] for m in quest_only} == {1}
    kits = every_marker(client, team, lab_account_id=KITS_ACCOUNT)
    assert {m["lab_id"] for m in kits} == {5, 6, 7, 8}
    # The account narrows a lab filter; a lab it cannot order from leaves nothing.
    assert markers(client, team, lab_account_id=KITS_ACCOUNT, lab_slug="quest")["total"] == 0


# (params, field): each one problem naming the field.
BAD_MARKER_QUERIES: list[tuple[dict[str, Any], str]] = [
    ({"page": 0}, "page"),
    ({"page": -1}, "page"),
    ({"page": "one"}, "page"),
    ({"page": 10**30}, "page"),
    ({"page": 99}, "page"),
    ({"size": 0}, "size"),
    ({"size": 101}, "size"),
    ({"lab_id": "quest"}, "lab_id"),
    ({"lab_id": 999}, "lab_id"),
    ({"lab_slug": "nope"}, "lab_slug"),
    ({"lab_slug": "Quest Diagnostics"}, "lab_slug"),
    ({"lab_account_id": "not-a-uuid"}, "lab_account_id"),
    ({"lab_account_id": str(uuid.UUID(int=7))}, "lab_account_id"),
    ({"a_la_carte_enabled": "maybe"}, "a_la_carte_enabled"),
    ({"name": "x" * 101}, "name"),
]


def test_bad_marker_queries_are_clear_422s(client: TestClient, team: Team) -> None:
    # Read-only refusals: every case against the one service.
    for params, field in BAD_MARKER_QUERIES:
        case = params
        response = client.get("/v3/lab_tests/markers", params=params, headers=team.headers)
        assert response.status_code == 422, (case, response.text)
        problems = response.json()["detail"]
        assert len(problems) == 1, (case, problems)
        (problem,) = problems
        assert problem["loc"][:2] == ["query", field], (case, problem)


def test_a_page_past_the_last_says_how_many_there_are(client: TestClient, team: Team) -> None:
    response = client.get(
        "/v3/lab_tests/markers", params={"lab_slug": "crl", "page": 2}, headers=team.headers
    )
    assert response.status_code == 422
    assert "past the last page (1 of size 50)" in response.json()["detail"][0]["msg"]


# -- the markers of an order set (endpoint 8) --------------------------------------------------


def order_set(client: TestClient, team: Team, body: dict[str, Any], **params: Any) -> Any:
    return client.post(
        "/v3/lab_tests/list_order_set_markers", json=body, params=params, headers=team.headers
    )


def create_lab_test(client: TestClient, team: Team, **fields: Any) -> dict[str, Any]:
    body = {"name": "Panel", "method": "walk_in_test", **fields}
    response = client.post("/v3/lab_tests", json=body, headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_an_order_set_lists_its_tests_markers_then_its_add_ons(
    client: TestClient, team: Team
) -> None:
    own = create_lab_test(client, team, marker_ids=[1071, 1001])
    response = order_set(
        client,
        team,
        {
            "lab_test_ids": [own["id"], DEMO_QUEST_TEST, own["id"]],
            "add_on": {"provider_ids": ["7600", "899", "483"], "marker_ids": [1061]},
        },
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    catalog = ReferenceLabCatalog(lab_reference())
    demo = catalog.demo_lab_test(uuid.UUID(DEMO_QUEST_TEST))
    assert demo is not None
    demo_ids = list(demo.marker_ids)
    code_ids = [m.id for m in catalog.markers_by_provider_id(1, ["7600", "899", "483"])]
    expected = list(dict.fromkeys([1071, 1001, *demo_ids, 1061, *code_ids]))
    assert [m["id"] for m in answer["markers"]] == expected
    assert (answer["total"], answer["pages"]) == (len(expected), 1)
    paged = order_set(client, team, {"lab_test_ids": [DEMO_QUEST_TEST]}, page=2, size=2)
    assert [m["id"] for m in paged.json()["markers"]] == demo_ids[2:4]


def test_an_order_set_with_unknown_ids_is_a_404_naming_them(
    client: TestClient, team: Team, other_team: Team, service: Service
) -> None:
    theirs = create_lab_test(client, other_team, marker_ids=[1001])
    unknown = str(uuid.uuid4())
    before = event_count(service)
    response = order_set(client, team, {"lab_test_ids": [DEMO_QUEST_TEST, unknown, theirs["id"]]})
    assert response.status_code == 404
    assert response.json()["detail"] == f"Unknown lab test ids: {unknown}, {theirs['id']}."
    response = order_set(client, team, {"add_on": {"marker_ids": [1001, 424242, 9]}})
    assert response.status_code == 404
    assert response.json()["detail"] == "Unknown marker ids: 424242, 9."
    response = order_set(
        client, team, {"lab_test_ids": [DEMO_QUEST_TEST], "add_on": {"provider_ids": ["ZZ9"]}}
    )
    assert response.status_code == 404
    assert response.json()["detail"] == "Unknown provider_ids of quest: ZZ9."
    assert event_count(service) == before


def test_an_order_set_of_two_labs_is_a_422(client: TestClient, team: Team) -> None:
    response = order_set(client, team, {"lab_test_ids": [DEMO_QUEST_TEST, DEMO_LABCORP_TEST]})
    assert response.status_code == 422
    assert "2 labs" in response.json()["detail"][0]["msg"]
    mixed = order_set(
        client, team, {"lab_test_ids": [DEMO_QUEST_TEST], "add_on": {"marker_ids": [2001]}}
    )
    assert mixed.status_code == 422


BAD_ORDER_SET_BODIES: list[dict[str, Any]] = [
    {"lab_test_ids": ["not-a-uuid"]},
    {"lab_test_ids": [str(uuid.uuid4())] * 101},
    {"add_on": {"provider_ids": ["has space"]}},
    {"add_on": {"provider_ids": ["7600"]}},  # no lab to look the code up at
    {"add_on": {"unknown": 1}},
    {"lab_account_id": str(uuid.UUID(int=7)), "lab_test_ids": [DEMO_QUEST_TEST]},
    {"lab_account_id": KITS_ACCOUNT, "lab_test_ids": [DEMO_QUEST_TEST]},
    {"surprise": True},
]


def test_bad_order_set_bodies_are_422s(client: TestClient, team: Team) -> None:
    # Read-only refusals: every body against the one service.
    for body in BAD_ORDER_SET_BODIES:
        case = body
        response = order_set(client, team, body)
        assert response.status_code == 422, (case, response.text)


def test_an_order_set_of_the_lab_accounts_only_lab_takes_codes(
    client: TestClient, team: Team
) -> None:
    response = order_set(
        client, team, {"lab_account_id": QUEST_ONLY_ACCOUNT, "add_on": {"provider_ids": ["496"]}}
    )
    assert response.status_code == 200
    assert [m["provider_id"] for m in response.json()["markers"]] == ["496"]


def test_an_oversized_order_set_body_is_a_413(client: TestClient, team: Team) -> None:
    body = {"lab_test_ids": [DEMO_QUEST_TEST], "add_on": {"provider_ids": ["A" * 32] * 50_000}}
    response = order_set(client, team, body)
    assert response.status_code == 413
