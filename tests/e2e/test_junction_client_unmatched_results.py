"""Unmatched lab results through the newer official client, `junction-api-sdk` 2.0.0, with
only its base_url changed (issue 33): its seven methods against a real server. The
harness's cases listed, a run made (and made again with its key), read back; the team's
listing; one result; accepted into the team's order (the client's ClientFacingOrder,
completed), rejected, and unsure. On both databases."""

from __future__ import annotations

import junction
import pytest
from healthledger.adapters.composition import Service
from healthledger.domain.labs.sandbox import SandboxPolicy
from junction.types import (
    ClientFacingOrder,
    CreateUnmatchedResultTestResponse,
    GetUnmatchedResultResponse,
    GetUnmatchedResultTestResponse,
    ListUnmatchedResultResponse,
    ListUnmatchedResultTestCasesResponse,
    UnmatchedResult,
)

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.test_official_client_orders import ADDRESS, PATIENT, WELLNESS

pytestmark = CLIENTS_PARSE_ANSWERS


def test_the_seven_unmatched_result_methods_through_the_junction_client(
    base_url: str, team: Team, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        service.lab_orders, "policy", SandboxPolicy(failure_rate=0, cancellation_rate=0)
    )
    client = junction.Junction(api_key=team.key, base_url=base_url, timeout=30)
    labs = client.lab_tests
    user_id = client.user.create(client_user_id="unmatched-junction").user_id
    order = labs.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
    ).order
    labs.simulate_order_process(order.id)  # to requisition_created: a sample id, not drawn

    cases = labs.list_unmatched_result_test_cases()
    assert isinstance(cases, ListUnmatchedResultTestCasesResponse) and len(cases.data) == 8

    created = labs.create_unmatched_result_test(
        idempotency_key="demo-1", case="match_demo", order_source="managed"
    )
    assert isinstance(created, CreateUnmatchedResultTestResponse)
    assert created.status.value == "succeeded"
    again = labs.create_unmatched_result_test(
        idempotency_key="demo-1", case="match_demo", order_source="managed"
    )
    assert again.run_id == created.run_id
    the_run = labs.get_unmatched_result_test(created.run_id)
    assert isinstance(the_run, GetUnmatchedResultTestResponse)
    assert the_run.orders is not None and the_run.orders["order"].order_id == order.id
    assert the_run.raw_result_id is not None

    page = labs.list_unmatched_results(decision_code="match_demo", limit=10)
    assert isinstance(page, ListUnmatchedResultResponse) and page.total == 1
    assert [r.id for r in page.data or []] == [the_run.raw_result_id]
    found = labs.list_unmatched_results(search_input=PATIENT.last_name)
    assert found.total == 1

    result = labs.get_unmatched_result(the_run.raw_result_id)
    assert isinstance(result, GetUnmatchedResultResponse)
    assert result.decision_code.value == "match_demo"
    assert result.patient is not None and result.patient.last_name == PATIENT.last_name
    assert result.lab.slug == "quest" and result.markers
    (group,) = result.candidate_groups or []
    assert group.user_id == user_id
    assert [c.order_id for c in group.candidates or []] == [order.id]

    accepted = labs.accept_unmatched_result(the_run.raw_result_id, order_id=order.id, note="hers")
    assert isinstance(accepted, ClientFacingOrder)
    assert accepted.id == order.id and accepted.status is not None
    assert accepted.status.value == "completed"
    resolved = labs.get_unmatched_result(the_run.raw_result_id)
    assert resolved.status.value == "resolved" and resolved.resolved_order_id == order.id
    assert resolved.patient is None  # its key destroyed: the values live on in the order

    for key, action, status in (("none-1", "reject", "resolved"), ("none-2", "unsure", None)):
        made = labs.create_unmatched_result_test(
            idempotency_key=key, case="no_match", order_source="managed"
        )
        raw_id = labs.get_unmatched_result_test(made.run_id).raw_result_id
        assert raw_id is not None
        decided = labs.resolve_unmatched_result(raw_id, action=action)
        assert isinstance(decided, UnmatchedResult)
        assert decided.status.value == (status or "pending_ops_review")
    pending = labs.list_unmatched_results(status="pending_ops_review")
    assert pending.total == 1
