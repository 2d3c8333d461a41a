"""Unmatched lab results (issue 33, ADR 0040) through the team API, on both databases:
the sandbox's harness builds each case from the team's own orders and the matcher
decides it; the team's listing with its filters and cursor pages; accepting into an
order (its results and its webhook, once) or a new one; rejecting (the result's key
destroyed, its data unreadable); unsure; another team's ids; twice decided; bad input.
Every answer parses with junction-api-sdk 2.0.0's models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import unmatched_results
from healthledger.domain.labs.unmatched_results import UnmatchedResult
from junction.types import (
    ClientFacingOrder,
    CreateUnmatchedResultTestResponse,
    GetUnmatchedResultResponse,
    GetUnmatchedResultTestResponse,
    ListUnmatchedResultResponse,
    ListUnmatchedResultTestCasesResponse,
)
from junction.types import (
    UnmatchedResult as ClientUnmatchedResult,
)
from sqlalchemy import select

from tests.conftest import Team, create_user
from tests.integration.test_orders import (
    CTX,
    DEMOGRAPHICS,
    T0,
    complete,
    placed,
    step,
)
from tests.integration.test_orders import settings as orders_settings
from tests.integration.test_orders import team as orders_team
from tests.integration.test_orders import user as orders_user
from tests.receivers import Receiver, http_receiver

settings = orders_settings
team = orders_team
user = orders_user
HEART = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a02"  # Labcorp (the wellness test is Quest's)
CASES = (
    "match_completed",
    "match_cancelled",
    "wrong_collection",
    "wrong_lab",
    "multiple_demo_match",
    "match_sample_id_mismatch_demo",
    "match_demo",
    "no_match",
)


def run(client: TestClient, team: Team, key: str, **body: Any) -> Any:
    return client.post(
        "/v3/unmatched_result_test",
        json=body,
        headers={**team.headers, "X-Idempotency-Key": key},
    )


def ran(client: TestClient, team: Team, case: str, **body: Any) -> dict[str, Any]:
    """A run of `case` that succeeded: the run's answer."""
    created = run(client, team, f"{case}-{uuid4()}", case=case, **body)
    assert created.status_code == 200, created.text
    CreateUnmatchedResultTestResponse.model_validate(created.json())
    got = client.get(f"/v3/unmatched_result_test/{created.json()['run_id']}", headers=team.headers)
    assert got.status_code == 200, got.text
    GetUnmatchedResultTestResponse.model_validate(got.json())
    assert got.json()["status"] == "succeeded", got.json()
    return dict(got.json())


def result_of(client: TestClient, team: Team, result_id: str) -> dict[str, Any]:
    got = client.get(f"/v3/unmatched_result/{result_id}", headers=team.headers)
    assert got.status_code == 200, got.text
    GetUnmatchedResultResponse.model_validate(got.json())
    return dict(got.json())


def at_requisition(client: TestClient, team: Team, user_id: str) -> dict[str, Any]:
    order = placed(client, team, user_id)
    moved = step(client, team, order["id"])
    assert moved.json()["detailed_status"].endswith("requisition_created"), moved.text
    return dict(moved.json())


@pytest.fixture
def orders(client: TestClient, team: Team, user: str) -> dict[str, dict[str, Any]]:
    """The user's orders (Ada Lovelace's): one completed, one cancelled, one at its
    requisition (open, its sample not collected); all Quest's."""
    with freeze_time(T0):
        done = placed(client, team, user)
        complete(client, team, done["id"])
        # Cancelled after its requisition: it has a sample id a lab may still report.
        cancelled = at_requisition(client, team, user)
        assert client.post(f"/v3/order/{cancelled['id']}/cancel", headers=team.headers).is_success
        waiting = at_requisition(client, team, user)
    order = client.get(f"/v3/order/{done['id']}", headers=team.headers).json()
    return {"completed": order, "cancelled": cancelled, "waiting": waiting}


# -- the harness: every case from the team's orders --------------------------------------


def test_the_cases_and_each_decided_as_its_case(
    client: TestClient, team: Team, user: str, orders: dict[str, dict[str, Any]]
) -> None:
    listed = client.get("/v3/unmatched_result_test/case", headers=team.headers)
    assert listed.status_code == 200, listed.text
    cases = ListUnmatchedResultTestCasesResponse.model_validate(listed.json())
    assert {c.case.value for c in cases.data} == set(CASES)
    required = {
        c.case.value: {r: s.value for r, s in c.required_statuses.items()} for c in cases.data
    }
    assert required["match_completed"] == {"order": "completed"}
    assert required["no_match"] == {}
    completed, waiting = orders["completed"], orders["waiting"]
    provided: dict[str, dict[str, str | None]] = {
        "match_completed": {"order": completed["id"]},
        "match_cancelled": {"order": orders["cancelled"]["id"]},
        "wrong_collection": {"order": waiting["id"]},
        "wrong_lab": {"order": waiting["id"]},
        "match_sample_id_mismatch_demo": {"order": waiting["id"]},
        "match_demo": {"order": waiting["id"]},
    }
    decided = {}
    for case, roles in provided.items():
        the_run = ran(client, team, case, order_source="provided", orders=roles)
        assert the_run["orders"]["order"]["order_id"] == roles["order"]
        assert the_run["orders"]["order"]["user_id"] == user
        decided[case] = result_of(client, team, the_run["raw_result_id"])
    # Two open orders of one patient: the demographics match both.
    second = at_requisition(client, team, user)
    two = ran(client, team, "multiple_demo_match", order_source="managed")
    assert {o["order_id"] for o in two["orders"].values()} == {waiting["id"], second["id"]}
    decided["multiple_demo_match"] = result_of(client, team, two["raw_result_id"])
    nobody = ran(client, team, "no_match", order_source="managed")
    assert nobody["orders"] == {}
    decided["no_match"] = result_of(client, team, nobody["raw_result_id"])

    for case, result in decided.items():
        assert result["decision_code"] == case, (case, result)
        assert result["status"] == "pending_customer_review"
        assert result["allowed_actions"] == ["accept", "reject", "unsure"]
        assert result["result_status"] == "final" and result["reason"]
        assert result["markers"] and all(m["results"] for m in result["markers"])
        assert result["interpretation"] in ("normal", "abnormal", "critical")
    # The patient as the lab named them: the order's (a year off for the mismatch).
    assert decided["match_completed"]["patient"]["last_name"] == "Lovelace"
    assert decided["match_completed"]["patient"]["dob"].startswith("1985-12-10")
    assert decided["match_sample_id_mismatch_demo"]["patient"]["dob"].startswith("1984-12-10")
    assert decided["no_match"]["patient"]["last_name"] != "Lovelace"
    # The lab: the order's, or another for wrong_lab.
    assert decided["match_completed"]["lab"]["slug"] == "quest"
    assert decided["wrong_lab"]["lab"]["slug"] != "quest"
    # The candidates: the order the sample id names, first, with why.
    (group,) = decided["match_completed"]["candidate_groups"]
    provenance = group["candidates"][0]
    assert group["user_id"] == user and provenance["order_id"] == completed["id"]
    assert provenance["candidate_type"] == "provenance_order"
    assert provenance["last_status"] == "completed" and provenance["confidence_level"] == "high"
    assert {"sample_id_match", "matched_completed_order", "demographic_match", "same_lab"} <= set(
        provenance["reasons"]
    )
    # ... and the user's open orders it may go to instead.
    options = [c for c in group["candidates"] if c["candidate_type"] == "order_option"]
    assert [c["order_id"] for c in options] == [waiting["id"]]
    mismatch = decided["match_sample_id_mismatch_demo"]["candidate_groups"][0]["candidates"][0]
    assert "demographic_mismatch" in mismatch["reasons"]
    assert (
        "possible_wrong_lab"
        in (decided["wrong_lab"]["candidate_groups"][0]["candidates"][0]["reasons"])
    )
    many = decided["multiple_demo_match"]["candidate_groups"][0]["candidates"]
    assert {c["order_id"] for c in many} == {waiting["id"], second["id"]}
    assert decided["no_match"]["candidate_groups"] == []


def test_a_run_that_cannot_build_its_case_fails_and_says_where(
    client: TestClient, team: Team, other_team: Team, orders: dict[str, dict[str, Any]]
) -> None:
    wrong = run(
        client,
        team,
        "status-mismatch",
        case="match_completed",
        order_source="provided",
        orders={"order": orders["waiting"]["id"]},
    )
    assert wrong.status_code == 200, wrong.text
    assert wrong.json()["status"] == "failed"
    got = client.get(f"/v3/unmatched_result_test/{wrong.json()['run_id']}", headers=team.headers)
    body = GetUnmatchedResultTestResponse.model_validate(got.json())
    assert body.stage.value == "failed" and body.raw_result_id is None
    assert body.error is not None and body.error.code == "order_status_mismatch"
    missing = run(client, team, "missing", case="match_demo", order_source="provided")
    assert missing.json()["status"] == "failed"
    # Managed: the other team has no order to build a case from (and sees none of ours).
    none = run(client, other_team, "none", case="match_completed", order_source="managed")
    assert none.json()["status"] == "failed"
    foreign = run(
        client,
        other_team,
        "foreign",
        case="match_completed",
        order_source="provided",
        orders={"order": orders["completed"]["id"]},
    )
    assert foreign.json()["status"] == "failed"
    failed = client.get(
        f"/v3/unmatched_result_test/{foreign.json()['run_id']}", headers=other_team.headers
    ).json()
    assert failed["error"]["code"] == "order_not_found"
    # No result was made by any of them.
    listed = client.get("/v3/unmatched_result", headers=team.headers).json()
    assert listed["total"] == 0


def test_the_idempotency_key_answers_the_first_run(
    client: TestClient, team: Team, service: Service
) -> None:
    first = run(client, team, "key-1", case="no_match", order_source="managed")
    again = run(client, team, "key-1", case="no_match", order_source="managed")
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert client.get("/v3/unmatched_result", headers=team.headers).json()["total"] == 1
    other = run(
        client, team, "key-1", case="no_match", order_source="managed", result_status="partial"
    )
    assert other.status_code == 409 and "key" in other.json()["detail"]


def test_the_harness_is_sandbox_only_and_checks_its_input(
    client: TestClient, team: Team, service: Service
) -> None:
    production = service.teams.issue_team_api_key(CTX, team.team_id, environment="production")
    live = Team(team.team_id, production.plain)
    refused = run(client, live, "prod", case="no_match", order_source="managed")
    assert refused.status_code == 400 and "sandbox" in refused.json()["detail"]
    no_key = client.post(
        "/v3/unmatched_result_test",
        json={"case": "no_match", "order_source": "managed"},
        headers=team.headers,
    )
    assert no_key.status_code == 422
    for body in (
        {"case": "everything", "order_source": "managed"},
        {"case": "no_match", "order_source": "anywhere"},
        {"case": "no_match", "order_source": "managed", "interpretation": "fine"},
        {"case": "no_match", "order_source": "managed", "orders": {"order": "not-an-id"}},
        {"case": "no_match", "order_source": "managed", "surprise": 1},
    ):
        assert run(client, team, "bad", **body).status_code == 422, body
    unknown_test = run(
        client,
        team,
        "unknown-test",
        case="no_match",
        order_source="managed",
        lab_test_id=str(uuid4()),
    )
    assert unknown_test.status_code == 404
    assert (
        client.get(f"/v3/unmatched_result_test/{uuid4()}", headers=team.headers).status_code == 404
    )


# -- the listing ---------------------------------------------------------------------------


def test_listing_filters_and_cursor_pages(
    client: TestClient, team: Team, orders: dict[str, dict[str, Any]]
) -> None:
    made = []
    with freeze_time("2026-03-11T09:00:00Z"):
        for _ in range(3):
            made.append(ran(client, team, "no_match", order_source="managed")["raw_result_id"])
    with freeze_time("2026-03-12T09:00:00Z"):
        made.append(ran(client, team, "match_demo", order_source="managed")["raw_result_id"])
        heart = ran(client, team, "no_match", order_source="managed", lab_test_id=HEART)
        made.append(heart["raw_result_id"])
    everything = client.get("/v3/unmatched_result", headers=team.headers)
    assert everything.status_code == 200, everything.text
    page = ListUnmatchedResultResponse.model_validate(everything.json())
    assert page.total == 5 and page.next_cursor is None
    assert {r.id for r in page.data or []} == set(made)
    # Newest first, in cursor pages of two.
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"next_cursor": cursor} if cursor else {})}
        got = client.get("/v3/unmatched_result", params=params, headers=team.headers).json()
        assert got["total"] == 5
        seen += [r["id"] for r in got["data"]]
        cursor = got["next_cursor"]
        if cursor is None:
            break
    assert seen == [r.id for r in page.data or []] and len(seen) == 5
    created = [r.created_at for r in page.data or []]
    assert created == sorted(created, reverse=True)

    def ids(**params: Any) -> set[str]:
        got = client.get("/v3/unmatched_result", params=params, headers=team.headers)
        assert got.status_code == 200, got.text
        assert got.json()["total"] == len(got.json()["data"])
        return {r["id"] for r in got.json()["data"]}

    assert ids(decision_code="match_demo") == {made[3]}
    assert ids(lab_slug="labcorp") == {made[4]}
    assert ids(created_at_start="2026-03-12") == {made[3], made[4]}
    assert ids(created_at_end="2026-03-11") == set(made[:3])
    assert ids(status="pending_customer_review") == set(made)
    assert ids(status="resolved") == set()
    # Search: by the patient's name or date of birth, opened with each result's key.
    assert ids(search_input="lovelace") == {made[3]}
    assert ids(search_input="1985-12-10") == {made[3]}
    someone = result_of(client, team, made[0])["patient"]
    found = ids(search_input=someone["first_name"])
    assert made[0] in found and made[3] not in found
    # A cursor of other filters, a forged one, bad filters.
    first = client.get("/v3/unmatched_result", params={"limit": 1}, headers=team.headers).json()
    other = client.get(
        "/v3/unmatched_result",
        params={"limit": 1, "next_cursor": first["next_cursor"], "search_input": "Ada"},
        headers=team.headers,
    )
    assert other.status_code == 400
    for params in (
        {"next_cursor": "abc.def"},
        {"lab_slug": "nowhere"},
        {"created_at_start": "2026-13-01"},
        {"limit": 0},
        {"limit": 101},
        {"decision_code": "maybe"},
        {"status": "matched"},
    ):
        bad = client.get("/v3/unmatched_result", params=params, headers=team.headers)
        assert bad.status_code in (400, 422), (params, bad.text)


# -- the team's decisions ------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def _sent(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in receiver.on("ok")]


def test_accept_attaches_the_result_to_the_order_announced_once(
    client: TestClient,
    team: Team,
    user: str,
    service: Service,
    orders: dict[str, dict[str, Any]],
    receiver: Receiver,
) -> None:
    service.webhooks.create(CTX, team.team_id, "sandbox", url=receiver.url("ok"))
    waiting = orders["waiting"]
    result_id = ran(
        client, team, "wrong_collection", order_source="provided", orders={"order": waiting["id"]}
    )["raw_result_id"]
    before = result_of(client, team, result_id)
    service.jobs.dispatch_webhooks()
    already = len(_sent(receiver))
    accepted = client.post(
        f"/v3/unmatched_result/{result_id}/accept",
        json={"order_id": waiting["id"], "user_id": user, "note": "Ada's sample"},
        headers=team.headers,
    )
    assert accepted.status_code == 200, accepted.text
    order = ClientFacingOrder.model_validate(accepted.json())
    assert order.id == waiting["id"] and order.status is not None
    assert order.status.value == "completed"
    # The order carries the result's values.
    results = client.get(f"/v3/order/{waiting['id']}/result", headers=team.headers)
    assert results.status_code == 200, results.text
    reported = {(r["name"], r["result"]) for m in before["markers"] for r in m["results"]}
    carried = {(r["name"], r["result"]) for r in results.json()["results"]}
    assert reported == carried
    # Announced by the order's webhook, once.
    service.jobs.dispatch_webhooks()
    service.jobs.dispatch_webhooks()
    about = [
        body
        for body in _sent(receiver)[already:]
        # (A critical result's own notice, labtest.result.critical, is another type.)
        if body["event_type"] == "labtest.order.updated"
        and body["data"]["id"] == waiting["id"]
        and body["data"]["status"] == "completed"
    ]
    assert len(about) == 1 and about[0]["event_type"] == "labtest.order.updated"
    # The result: resolved, its key destroyed (its contents live on in the order).
    after = result_of(client, team, result_id)
    assert after["status"] == "resolved" and after["resolution_action"] == "accept"
    assert after["resolved_user_id"] == user and after["resolved_order_id"] == waiting["id"]
    assert after["reviewed_at"] is not None and after["allowed_actions"] == []
    assert after["patient"] is None and after["markers"] is None and after["note"] is None
    assert not service.key_store.has_key(UUID(result_id))
    # Decided once: a second decision is a 409.
    twice = client.post(
        f"/v3/unmatched_result/{result_id}/accept",
        json={"order_id": waiting["id"]},
        headers=team.headers,
    )
    assert twice.status_code == 409 and "resolved" in twice.json()["detail"]
    reject = client.post(
        f"/v3/unmatched_result/{result_id}/resolve", json={"action": "reject"}, headers=team.headers
    )
    assert reject.status_code == 409


def test_accept_into_a_new_order_of_the_user(
    client: TestClient, team: Team, user: str, service: Service, orders: dict[str, dict[str, Any]]
) -> None:
    completed = orders["completed"]
    result_id = ran(
        client, team, "match_completed", order_source="provided", orders={"order": completed["id"]}
    )["raw_result_id"]
    # The completed order takes no more results; the waiting one is another lab's for a
    # wrong_lab result.
    final = client.post(
        f"/v3/unmatched_result/{result_id}/accept",
        json={"order_id": completed["id"]},
        headers=team.headers,
    )
    assert final.status_code == 409 and "user_id" in final.json()["detail"]
    accepted = client.post(
        f"/v3/unmatched_result/{result_id}/accept", json={"user_id": user}, headers=team.headers
    )
    assert accepted.status_code == 200, accepted.text
    order = ClientFacingOrder.model_validate(accepted.json())
    assert order.id not in (completed["id"], orders["waiting"]["id"])
    assert order.user_id == user and order.status is not None and order.status.value == "completed"
    assert order.sample_id == completed["sample_id"]
    statuses = [e.status.value for e in order.events]
    assert statuses[1].endswith("requisition_created") and statuses[-1].startswith("completed")
    after = result_of(client, team, result_id)
    assert after["resolved_order_id"] == order.id
    # wrong_lab: its lab is not the order's.
    wrong = ran(
        client,
        team,
        "wrong_lab",
        order_source="provided",
        orders={"order": orders["waiting"]["id"]},
    )["raw_result_id"]
    other_lab = client.post(
        f"/v3/unmatched_result/{wrong}/accept",
        json={"order_id": orders["waiting"]["id"]},
        headers=team.headers,
    )
    assert other_lab.status_code == 409 and "lab" in other_lab.json()["detail"]


def test_reject_destroys_the_results_key_and_its_data(
    client: TestClient, team: Team, service: Service
) -> None:
    with freeze_time(T0):
        result_id = ran(client, team, "no_match", order_source="managed")["raw_result_id"]
    (received,) = list(service.ledger.events.get(UUID(result_id)))
    assert isinstance(received, UnmatchedResult.Received)
    patient = result_of(client, team, result_id)["patient"]
    opened = service.key_store.open(UUID(result_id), received.sealed_result)
    assert opened is not None and opened["patient"]["last_name"] == patient["last_name"]
    # Nothing personal in clear in the event.
    stored = json.dumps({k: str(v) for k, v in vars(received).items()})
    assert patient["last_name"] not in stored and patient["first_name"] not in stored
    with freeze_time("2026-03-10T13:00:00Z"):
        rejected = client.post(
            f"/v3/unmatched_result/{result_id}/resolve",
            json={"action": "reject", "note": "not ours"},
            headers=team.headers,
        )
    assert rejected.status_code == 200, rejected.text
    body = ClientUnmatchedResult.model_validate(rejected.json())
    assert body.status.value == "resolved" and body.resolution_action is not None
    assert body.resolution_action.value == "reject"
    assert body.patient is None and body.markers is None and body.interpretation is None
    # The key is gone: the sealed contents in the log open no more, nor the row's.
    assert not service.key_store.has_key(UUID(result_id))
    assert service.key_store.open(UUID(result_id), received.sealed_result) is None
    with service.db.read() as conn:
        row = conn.execute(
            select(unmatched_results).where(unmatched_results.c.result_id == UUID(result_id))
        ).one()
    assert row.sealed_result is None and row.status == "resolved"
    # As of before the rejection: pending, and its data erased since (null).
    then = client.get(
        f"/v3/unmatched_result/{result_id}",
        params={"as_of": "2026-03-10T12:30:00Z"},
        headers=team.headers,
    )
    assert then.status_code == 200, then.text
    assert then.json()["status"] == "pending_customer_review" and then.json()["patient"] is None
    before = client.get(
        f"/v3/unmatched_result/{result_id}",
        params={"as_of": "2026-03-10T11:00:00Z"},
        headers=team.headers,
    )
    assert before.status_code == 404
    # A search finds it no more.
    found = client.get(
        "/v3/unmatched_result", params={"search_input": patient["last_name"]}, headers=team.headers
    )
    assert found.json()["total"] == 0
    again = client.post(
        f"/v3/unmatched_result/{result_id}/resolve", json={"action": "unsure"}, headers=team.headers
    )
    assert again.status_code == 409


def test_unsure_goes_to_operations_review(client: TestClient, team: Team, service: Service) -> None:
    result_id = ran(client, team, "no_match", order_source="managed")["raw_result_id"]
    unsure = client.post(
        f"/v3/unmatched_result/{result_id}/resolve",
        json={"action": "unsure", "note": "maybe a walk-in"},
        headers=team.headers,
    )
    assert unsure.status_code == 200, unsure.text
    body = unsure.json()
    assert body["status"] == "pending_ops_review" and body["resolution_action"] == "unsure"
    assert body["allowed_actions"] == ["accept", "reject"] and body["note"] == "maybe a walk-in"
    assert body["patient"] is not None  # still the result's: its key kept
    assert service.key_store.has_key(UUID(result_id))
    listed = client.get(
        "/v3/unmatched_result", params={"status": "pending_ops_review"}, headers=team.headers
    ).json()
    assert [r["id"] for r in listed["data"]] == [result_id]
    twice = client.post(
        f"/v3/unmatched_result/{result_id}/resolve", json={"action": "unsure"}, headers=team.headers
    )
    assert twice.status_code == 409 and "pending_ops_review" in twice.json()["detail"]


def test_another_teams_results_are_not_found_and_bad_input_is_refused(
    client: TestClient, team: Team, other_team: Team, user: str
) -> None:
    the_run = ran(client, team, "no_match", order_source="managed")
    result_id = the_run["raw_result_id"]
    path = f"/v3/unmatched_result/{result_id}"
    assert client.get(path, headers=other_team.headers).status_code == 404
    assert (
        client.get(
            f"/v3/unmatched_result_test/{the_run['run_id']}", headers=other_team.headers
        ).status_code
        == 404
    )
    assert (
        client.post(
            f"{path}/accept", json={"user_id": user}, headers=other_team.headers
        ).status_code
        == 404
    )
    assert (
        client.post(
            f"{path}/resolve", json={"action": "reject"}, headers=other_team.headers
        ).status_code
        == 404
    )
    assert client.get("/v3/unmatched_result", headers=other_team.headers).json()["total"] == 0
    assert client.get(f"/v3/unmatched_result/{uuid4()}", headers=team.headers).status_code == 404
    malformed = client.get("/v3/unmatched_result/not-an-id", headers=team.headers)
    assert malformed.status_code in (404, 422)
    # Another team's user or order: a 404 as well.
    stranger = create_user(client, other_team, "stranger")["user_id"]
    assert (
        client.post(f"{path}/accept", json={"user_id": stranger}, headers=team.headers).status_code
        == 404
    )
    for body in (
        {},
        {"note": "which one?"},
        {"user_id": "someone"},
        {"user_id": user, "extra": True},
        {"user_id": user, "note": "bell\x07"},
    ):
        refused = client.post(f"{path}/accept", json=body, headers=team.headers)
        assert refused.status_code == 422, (body, refused.text)
    for body in ({}, {"action": "accept"}, {"action": "reject", "note": ""}):
        refused = client.post(f"{path}/resolve", json=body, headers=team.headers)
        assert refused.status_code == 422, (body, refused.text)
    # A user without demographics has no patient for a new order: a 422 naming it.
    bare = create_user(client, team, "bare")["user_id"]
    no_patient = client.post(f"{path}/accept", json={"user_id": bare}, headers=team.headers)
    assert no_patient.status_code == 422 and "demographics" in no_patient.json()["detail"][0]["msg"]
    # Nothing was decided by any of them.
    assert result_of(client, team, result_id)["status"] == "pending_customer_review"
    assert str(DEMOGRAPHICS["last_name"]) not in json.dumps(no_patient.json())


def test_a_teams_deletion_resolves_its_undecided_results_and_destroys_their_keys(
    client: TestClient, team: Team, other_team: Team, service: Service
) -> None:
    from healthledger.adapters.persistence.queries.unmatched_results import UnmatchedFilters
    from healthledger.domain.teams.directory import DEFAULT_ORG_ID
    from healthledger.domain.teams.teams import Team as TeamAggregate

    pending = ran(client, team, "no_match", order_source="managed")["raw_result_id"]
    unsure = ran(client, team, "no_match", order_source="managed")["raw_result_id"]
    client.post(
        f"/v3/unmatched_result/{unsure}/resolve", json={"action": "unsure"}, headers=team.headers
    )
    rejected = ran(client, team, "no_match", order_source="managed")["raw_result_id"]
    client.post(
        f"/v3/unmatched_result/{rejected}/resolve", json={"action": "reject"}, headers=team.headers
    )
    kept = ran(client, other_team, "no_match", order_source="managed")["raw_result_id"]
    (received,) = list(service.ledger.events.get(UUID(pending)))
    assert isinstance(received, UnmatchedResult.Received)
    rejected_before = len(list(service.ledger.events.get(UUID(rejected))))
    service.teams.delete_team(CTX, DEFAULT_ORG_ID, team.team_id)
    # In the transaction that records the deletion: every key of the team's results.
    assert not service.key_store.has_key(UUID(pending))
    assert not service.key_store.has_key(UUID(unsure))
    assert service.key_store.open(UUID(pending), received.sealed_result) is None
    # And they are resolved, by the deletion (no decision): in their streams, recorded
    # with Team.Deleted (its instant and request), and in the listing's rows.
    deleted = list(service.ledger.events.get(team.team_id))[-1]
    assert isinstance(deleted, TeamAggregate.Deleted)
    for result_id in (pending, unsure):
        last = list(service.ledger.events.get(UUID(result_id)))[-1]
        assert isinstance(last, UnmatchedResult.ResolvedByTeamDeletion)
        assert last.timestamp == deleted.timestamp and last.request_id == deleted.request_id
        result = service.unmatched_results.load(team.team_id, UUID(result_id))
        assert result.status == "resolved" and result.resolution_action is None
        assert result.allowed_actions == () and result.reviewed_at == deleted.timestamp
    # A result decided before is left as it was decided.
    assert len(list(service.ledger.events.get(UUID(rejected)))) == rejected_before
    assert service.unmatched_results.load(team.team_id, UUID(rejected)).resolution_action == (
        "reject"
    )
    with service.db.read() as conn:
        rows = conn.execute(
            select(
                unmatched_results.c.result_id,
                unmatched_results.c.status,
                unmatched_results.c.sealed_result,
            ).where(unmatched_results.c.team_id == team.team_id)
        ).all()
    assert {(str(r.result_id), r.status, r.sealed_result) for r in rows} == {
        (result_id, "resolved", None) for result_id in (pending, unsure, rejected)
    }
    for state in ("pending_customer_review", "pending_ops_review"):
        page = service.unmatched_result_queries.page(
            team.team_id, UnmatchedFilters(status=state), None, 50
        )
        assert page.total == 0, state
    # Another team's are its own.
    assert service.key_store.has_key(UUID(kept))
    other = result_of(client, other_team, kept)
    assert other["patient"] is not None and other["status"] == "pending_customer_review"


def test_a_result_the_deletion_did_not_read_is_resolved_by_the_next_sweep(
    client: TestClient, team: Team, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    from healthledger.domain.teams.directory import DEFAULT_ORG_ID

    late = ran(client, team, "no_match", order_source="managed")["raw_result_id"]
    # As for a result recorded by a request in flight as the deletion committed: the
    # deletion's own transaction did not resolve it.
    with monkeypatch.context() as patched:
        patched.setattr(service.teams, "changed_with_deletion", lambda ctx, now, team_id: ())
        service.teams.delete_team(CTX, DEFAULT_ORG_ID, team.team_id)
    assert service.unmatched_results.load(team.team_id, UUID(late)).status == (
        "pending_customer_review"
    )
    assert service.unmatched_result_queries.deleted_teams_with_undecided() == [team.team_id]
    service.jobs.sweep_erasures()
    last = list(service.ledger.events.get(UUID(late)))[-1]
    assert isinstance(last, UnmatchedResult.ResolvedByTeamDeletion)
    assert not service.key_store.has_key(UUID(late))
    assert service.unmatched_result_queries.deleted_teams_with_undecided() == []
    # Nothing left: the next sweep records nothing more.
    service.jobs.sweep_erasures()
    assert list(service.ledger.events.get(UUID(late)))[-1].originator_version == (
        last.originator_version
    )
