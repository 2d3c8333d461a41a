"""Area info (spec 2.10, endpoint 9; gaps.md lab testing): real zip codes, patient service
centers counted within the radius by great-circle distance, at-home phlebotomy by service
area, the deprecated `lab` parameter, and bad input."""

from __future__ import annotations

from typing import Any

import pytest
import zipcodes
from fastapi.testclient import TestClient
from healthledger.adapters.reference.labs import lab_reference
from healthledger.adapters.reference.labs.areas import great_circle_miles

from tests.conftest import Team

PATH = "/v3/order/area/info"
CENTRAL = ["quest", "labcorp", "bioreference", "sonora_quest"]


def area(client: TestClient, team: Team, **params: Any) -> dict[str, Any]:
    response = client.get(PATH, params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    assert "deprecation" not in response.headers or "lab" in params
    return response.json()


def brute_force(zip_code: str, radius: int, lab: str) -> int:
    """Centers of `lab` within `radius` miles, counted over every center with the zip
    package's own haversine and centroid (not the service's index)."""
    (entry,) = zipcodes.matching(zip_code)
    lat, lon = float(entry["lat"]), float(entry["long"])
    return sum(
        1
        for site in lab_reference().service_centers
        if site.lab == lab and zipcodes.haversine(lon, lat, site.lon, site.lat) <= radius
    )


RADIUS_QUESTIONS: list[tuple[str, int]] = [
    ("10001", 25),
    ("85281", 10),
    ("85281", 100),
    ("59101", 50),
    ("99501", 20),
    ("33101", 25),
]


def test_centers_within_the_radius_are_counted_by_great_circle_distance(
    client: TestClient, team: Team
) -> None:
    # Read-only questions: every (zip_code, radius) against the one service.
    for zip_code, radius in RADIUS_QUESTIONS:
        case = (zip_code, radius)
        params = {"zip_code": zip_code, "radius": str(radius)}
        response = client.get(PATH, params=params, headers=team.headers)
        assert response.status_code == 200, (case, response.text)
        assert "deprecation" not in response.headers, case
        answer = response.json()
        assert answer["zip_code"] == zip_code, case
        assert sorted(answer["central_labs"]) == sorted(CENTRAL), case
        for lab in CENTRAL:
            centers = answer["central_labs"][lab]["patient_service_centers"]
            assert centers["radius"] == str(radius), (case, lab)
            assert centers["within_radius"] == brute_force(zip_code, radius, lab), (case, lab)


def test_the_answer_carries_the_spec_and_the_newer_fields(client: TestClient, team: Team) -> None:
    answer = area(client, team, zip_code="85281")
    sonora = answer["central_labs"]["sonora_quest"]
    assert sonora["lab_id"] == 4 and sonora["appointment_with_service"] is False
    assert sonora["supported_bill_types"] == ["client_bill", "commercial_insurance", "patient_bill"]
    centers = sonora["patient_service_centers"]
    assert centers["within_radius"] > 10 and "stat" in centers["capabilities"]
    assert centers["appointment_with_vital"] is False
    assert 0 <= centers["nearest_miles"] < 5
    # Sonora Quest is Arizona's: none of its centers is near New York.
    far = area(client, team, zip_code="10001")["central_labs"]["sonora_quest"]
    assert far["patient_service_centers"]["within_radius"] == 0
    assert far["patient_service_centers"]["nearest_miles"] is None
    assert far["patient_service_centers"]["capabilities"] == []
    ready = ["appointment-ready"]
    assert answer["phlebotomy"] == {
        "is_served": True,
        "providers": [
            {"name": "getlabs", "tier": ready, "service_types": ready},
            # Quest's own phlebotomists serve Phoenix's sectional center (852).
            {"name": "quest", "tier": ready, "service_types": ready},
        ],
    }


def test_wider_radii_never_count_fewer_centers(client: TestClient, team: Team) -> None:
    counts = [
        area(client, team, zip_code="27215", radius=str(radius))["central_labs"]["labcorp"][
            "patient_service_centers"
        ]["within_radius"]
        for radius in (10, 20, 25, 50, 100)
    ]
    assert counts == sorted(counts) and counts[-1] > counts[0]


def test_phlebotomy_follows_the_providers_service_areas(client: TestClient, team: Team) -> None:
    # Cheyenne, Wyoming: no network serves the state.
    assert area(client, team, zip_code="82001")["phlebotomy"] == {
        "is_served": False,
        "providers": [],
    }
    # Tucson (857..): getlabs, by state; Phoenix (852..): Quest's own phlebotomists too,
    # by zip prefix.
    names = [p["name"] for p in area(client, team, zip_code="85701")["phlebotomy"]["providers"]]
    assert names == ["getlabs"]
    names = [p["name"] for p in area(client, team, zip_code="85251")["phlebotomy"]["providers"]]
    assert names == ["getlabs", "quest"]
    # Little Rock, Arkansas: phlebfinders, by request.
    served = area(client, team, zip_code="72201")["phlebotomy"]
    assert served["is_served"] is True
    assert served["providers"][0]["tier"] == ["appointment-request"]


def test_labs_narrow_the_central_labs_and_lab_is_deprecated(client: TestClient, team: Team) -> None:
    answer = area(client, team, zip_code="10001", labs=["labcorp", "quest"])
    assert sorted(answer["central_labs"]) == ["labcorp", "quest"]
    response = client.get(
        PATH, params={"zip_code": "10001", "lab": "bioreference"}, headers=team.headers
    )
    assert response.status_code == 200 and response.headers["deprecation"] == "true"
    assert list(response.json()["central_labs"]) == ["bioreference"]
    both = client.get(
        PATH, params={"zip_code": "10001", "lab": "quest", "labs": "labcorp"}, headers=team.headers
    )
    assert sorted(both.json()["central_labs"]) == ["labcorp", "quest"]
    account = area(
        client, team, zip_code="10001", lab_account_id="6a0c2f4e-1d3b-4c5a-9e7f-0b1c2d3e4f03"
    )
    assert list(account["central_labs"]) == ["quest"]


def test_zip_plus_four_is_answered_for_its_zip_code(client: TestClient, team: Team) -> None:
    plain = area(client, team, zip_code="10001")
    plus_four = area(client, team, zip_code="10001-2062")
    assert plus_four["zip_code"] == "10001-2062"
    assert plus_four["central_labs"] == plain["central_labs"]


# (params, field, message): each refused with one problem naming the field.
BAD_AREA_QUESTIONS: list[tuple[dict[str, Any], str, str | None]] = [
    ({}, "zip_code", None),
    ({"zip_code": "1234"}, "zip_code", None),
    ({"zip_code": "123456"}, "zip_code", None),
    ({"zip_code": "abcde"}, "zip_code", None),
    ({"zip_code": "10001-12"}, "zip_code", None),
    ({"zip_code": " 10001"}, "zip_code", None),
    ({"zip_code": "00000"}, "zip_code", "not an existing US zip code"),
    ({"zip_code": "99999"}, "zip_code", "not an existing US zip code"),
    ({"zip_code": "10001", "radius": "15"}, "radius", None),
    ({"zip_code": "10001", "radius": "0"}, "radius", None),
    ({"zip_code": "10001", "radius": "ten"}, "radius", None),
    (
        {"zip_code": "10001", "labs": ["quest", "nope", "gone"]},
        "labs",
        "Unknown labs: nope, gone",
    ),
    ({"zip_code": "10001", "lab": "nope"}, "lab", "Unknown labs: nope"),
    ({"zip_code": "10001", "labs": "zrt"}, "labs", "Not central labs"),
    ({"zip_code": "10001", "labs": "Quest"}, "labs", None),
    ({"zip_code": "10001", "lab_account_id": "x"}, "lab_account_id", None),
    (
        {"zip_code": "10001", "lab_account_id": "00000000-0000-0000-0000-000000000007"},
        "lab_account_id",
        "names no lab account",
    ),
]


def test_bad_area_questions_are_clear_422s(client: TestClient, team: Team) -> None:
    # Read-only questions: every case against the one service.
    for params, field, message in BAD_AREA_QUESTIONS:
        case = params
        response = client.get(PATH, params=params, headers=team.headers)
        assert response.status_code == 422, (case, response.text)
        problems = response.json()["detail"]
        assert len(problems) == 1, (case, problems)
        (problem,) = problems
        assert problem["loc"][:2] == ["query", field], (case, problem)
        if message is not None:
            assert message in problem["msg"], (case, problem)


def test_area_info_needs_the_team_key(client: TestClient) -> None:
    assert client.get(PATH, params={"zip_code": "10001"}).status_code == 401


def test_the_service_and_the_zip_package_agree_on_distances() -> None:
    # New York (10001) to Secaucus (07094), both centroids: about 3.5 miles.
    (ny,) = zipcodes.matching("10001")
    (nj,) = zipcodes.matching("07094")
    ours = great_circle_miles(
        float(ny["lat"]), float(ny["long"]), float(nj["lat"]), float(nj["long"])
    )
    theirs = zipcodes.haversine(
        float(ny["long"]), float(ny["lat"]), float(nj["long"]), float(nj["lat"])
    )
    assert ours == pytest.approx(theirs, rel=0.01) and 2 < ours < 6
