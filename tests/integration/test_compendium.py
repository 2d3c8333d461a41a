"""The compendium (search, convert, orderable tests) and the team's lab accounts through the
team API, on both databases: answers from the lab catalog, markers of different labs
matched by the LOINC codes they report and nothing else, and the refusals (422, 404)."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from fastapi.testclient import TestClient
from healthledger.adapters.reference.labs import US_STATES
from healthledger.adapters.reference.labs.compendium import loinc_set_hash

from tests.conftest import Team

GLUCOSE_HASH = loinc_set_hash(frozenset({"2345-7"}))
# Glucose at Quest, Labcorp and BioReference (Sonora Quest has none on its own).
GLUCOSE_CODES = {"quest": "483", "labcorp": "001032", "bioreference": "BR0001"}
WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"  # Quest, five markers
CENTRAL = "6a0c2f4e-1d3b-4c5a-9e7f-0b1c2d3e4f01"


def search(client: TestClient, team: Team, **body: Any) -> Any:
    return client.post("/v3/compendium/search", json=body, headers=team.headers)


def test_a_canonical_search_ranks_the_catalogs_loinc_sets(client: TestClient, team: Team) -> None:
    found = search(client, team, mode="canonical", query="glucose", limit=4)
    assert found.status_code == 200, found.text
    answer = found.json()
    assert answer["mode"] == "canonical" and answer["per_lab"] == {} and answer["related"] == []
    first = answer["selected_canonical"]
    assert first == answer["canonical_candidates"][0]
    assert first["loinc_set_hash"] == GLUCOSE_HASH and first["loinc_codes"] == ["2345-7"]
    assert first["display_name"] == "Glucose" and first["confidence"] == 1.0
    assert set(first["provider_ids"]) == set(GLUCOSE_CODES.values())
    assert first["cpt_codes"] == [] and first["popularity_score"] == 0.0
    # Then the panels that report glucose among other results, by name (0.5).
    rest = answer["canonical_candidates"][1:]
    assert all(c["confidence"] == 0.5 for c in rest)
    # The smaller sets first (eAG is an estimated average glucose).
    assert [c["display_name"] for c in rest] == [
        "Hemoglobin A1c with eAG",
        "Basic Metabolic Panel",
        "Renal Function Panel",
    ]
    # By a LOINC code, by a lab's code: the same canonical first.
    for query in ("2345-7", "001032", "BR0001"):
        by = search(client, team, mode="canonical", query=query).json()
        assert by["selected_canonical"]["loinc_set_hash"] == GLUCOSE_HASH, query
    nothing = search(client, team, mode="canonical", query="no such test anywhere").json()
    assert nothing["selected_canonical"] is None and nothing["canonical_candidates"] == []


def test_a_crosswalk_maps_one_canonical_to_each_labs_markers(
    client: TestClient, team: Team
) -> None:
    walked = search(client, team, mode="crosswalk", loinc_set_hash=GLUCOSE_HASH)
    assert walked.status_code == 200, walked.text
    answer = walked.json()
    assert answer["selected_canonical"]["loinc_set_hash"] == GLUCOSE_HASH
    assert answer["canonical_candidates"] == [answer["selected_canonical"]]
    assert {lab: [c["provider_id"] for c in cs] for lab, cs in answer["per_lab"].items()} == {
        lab: [code] for lab, code in GLUCOSE_CODES.items()
    }
    quest = answer["per_lab"]["quest"][0]
    assert quest["lab_id"] == 1 and quest["relation"] == "exact" and quest["confidence"] == 1.0
    assert quest["loinc_codes"] == ["2345-7"] and quest["result_names"] == ["Glucose"]
    assert answer["related"] == []
    # Only the labs asked; related: the panels reporting glucose and more.
    some = search(
        client,
        team,
        mode="crosswalk",
        query="Glucose",
        labs=["labcorp"],
        include_related=True,
    ).json()
    assert list(some["per_lab"]) == ["labcorp"]
    assert some["related"] and all(r["relation"] == "superset" for r in some["related"])
    assert all("2345-7" in r["canonical"]["loinc_codes"] for r in some["related"])
    shares = [r["confidence"] for r in some["related"]]
    assert shares == sorted(shares, reverse=True) and all(0 < s < 1 for s in shares)
    unknown = search(client, team, mode="crosswalk", loinc_set_hash="0" * 32).json()
    assert unknown["selected_canonical"] is None and unknown["per_lab"] == {}


def test_convert_finds_the_same_loinc_set_at_the_target_lab(
    client: TestClient, team: Team, other_team: Team
) -> None:
    def convert(who: Team = team, **body: Any) -> Any:
        return client.post("/v3/compendium/convert", json=body, headers=who.headers)

    # Another team's lab test is as unknown as none.
    theirs = client.post(
        "/v3/lab_tests",
        json={"name": "Theirs", "method": "walk_in_test", "marker_ids": [1001]},
        headers=other_team.headers,
    )
    assert theirs.status_code == 200, theirs.text
    assert convert(lab_test_id=theirs.json()["id"], target_lab="quest").status_code == 404

    glucose = convert(provider_ids=["001032", "nope"], target_lab="quest")
    assert glucose.status_code == 200, glucose.text
    answer = glucose.json()
    assert answer["target_lab_id"] == 1 and answer["target_lab_slug"] == "quest"
    assert answer["source_provider_ids"] == ["001032", "nope"]
    assert answer["converted_provider_ids"] == ["483"]
    assert answer["unresolved_provider_ids"] == ["nope"]
    first = answer["by_source_provider_id"]["001032"]["candidates"][0]
    assert (first["provider_id"], first["relation"], first["confidence"]) == ("483", "exact", 1.0)
    # Sonora Quest has no glucose alone: its panels that report it, nothing exact.
    sonora = convert(provider_ids=["483"], target_lab="sonora_quest").json()
    candidates = sonora["by_source_provider_id"]["483"]["candidates"]
    assert candidates and all(c["relation"] == "superset" for c in candidates)
    assert all("2345-7" in c["loinc_codes"] and c["lab_slug"] == "sonora_quest" for c in candidates)
    # A lab test's markers, at its lab.
    wellness = convert(lab_test_id=WELLNESS, target_lab="labcorp").json()
    assert wellness["source_lab_test_id"] == WELLNESS and wellness["source_lab_id"] == 1
    assert len(wellness["source_provider_ids"]) == 5
    for code in wellness["source_provider_ids"]:
        for candidate in wellness["by_source_provider_id"][code]["candidates"]:
            assert candidate["lab_id"] == 2
    # Refusals.
    assert convert(lab_test_id=str(uuid4()), target_lab="quest").status_code == 404
    assert convert(target_lab="quest").status_code == 422
    assert convert(provider_ids=["483"], target_lab="mars").status_code == 422
    assert convert(provider_ids=["483"]).status_code == 422
    assert convert(provider_ids=["483"], target_lab="quest", limit=0).status_code == 422


def test_orderable_tests_are_the_targets_a_la_carte_markers(client: TestClient, team: Team) -> None:
    found = client.post(
        "/v3/compendium/search_orderable_tests",
        json={"provider_ids": ["001032", "7600", "nope"], "target_lab": "bioreference"},
        headers=team.headers,
    )
    assert found.status_code == 200, found.text
    candidates = found.json()["candidates"]
    assert candidates["001032"][0]["provider_id"] == "BR0001"
    assert candidates["7600"][0]["name"] == "Lipid Panel" and candidates["nope"] == []
    for refused in (
        {"provider_ids": [], "target_lab": "quest"},
        {"provider_ids": ["483"], "target_lab": "quest", "per_provider_limit": 21},
        {"provider_ids": ["483"], "target_lab": "nowhere"},
        {"provider_ids": ["483"], "target_lab": "quest", "surprise": 1},
    ):
        response = client.post(
            "/v3/compendium/search_orderable_tests", json=refused, headers=team.headers
        )
        assert response.status_code == 422, refused


def test_bad_search_bodies_are_422s(client: TestClient, team: Team) -> None:
    for body in (
        {"mode": "canonical"},
        {"mode": "canonical", "query": "  "},
        {"mode": "canonical", "query": "glucose", "loinc_set_hash": GLUCOSE_HASH},
        {"mode": "canonical", "query": "glucose", "limit": 11},
        {"mode": "crosswalk"},
        {"mode": "crosswalk", "query": "glucose", "loinc_set_hash": GLUCOSE_HASH},
        {"mode": "crosswalk", "query": "glucose", "limit": 21},
        {"mode": "canonical", "query": "glucose", "cpt_codes": ["82947"]},
        {"mode": "canonical", "query": "glucose", "labs": ["atlantis"]},
        {"mode": "sideways", "query": "glucose"},
        {"query": "glucose"},
    ):
        response = search(client, team, **body)
        assert response.status_code == 422, body
        assert response.json()["detail"], body
    assert client.post("/v3/compendium/search", json={"mode": "canonical"}).status_code == 401


def test_the_teams_lab_accounts_are_the_catalogs_platform_accounts(
    client: TestClient, team: Team
) -> None:
    listed = client.get("/v3/lab_test/lab_account", headers=team.headers)
    assert listed.status_code == 200, listed.text
    accounts = listed.json()["data"]
    central = [a for a in accounts if a["id"] == CENTRAL]
    assert [a["lab"] for a in central] == ["quest", "labcorp", "bioreference", "sonora_quest"]
    for account in accounts:
        assert account["status"] == "active" and account["delegated_flow"] == "not_delegated"
        assert account["team_id_allowlist"] == []
        assert account["allowed_billing"] == {"client_bill": sorted(US_STATES)}
    assert {a["id"] for a in accounts} == {
        CENTRAL,
        "6a0c2f4e-1d3b-4c5a-9e7f-0b1c2d3e4f02",
        "6a0c2f4e-1d3b-4c5a-9e7f-0b1c2d3e4f03",
    }
    one = client.get(
        "/v3/lab_test/lab_account", params={"lab_account_id": CENTRAL}, headers=team.headers
    ).json()["data"]
    assert one == central
    for params in ({"lab_account_id": str(uuid4())}, {"status": "suspended"}):
        none = client.get("/v3/lab_test/lab_account", params=params, headers=team.headers)
        assert none.status_code == 200 and none.json() == {"data": []}, params
    for params in ({"lab_account_id": "not-a-uuid"}, {"status": "sleepy"}):
        bad = client.get("/v3/lab_test/lab_account", params=params, headers=team.headers)
        assert bad.status_code == 422, params
    assert client.get("/v3/lab_test/lab_account").status_code == 401
