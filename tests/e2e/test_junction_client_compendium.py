"""The newer official client's `compendium.*`, `lab_account.get_team_lab_accounts` and
`order_transaction.*` (issue 34), `junction-api-sdk` 2.0.0 with only its base_url changed,
against the team API under uvicorn: each answer parsed by the client's own models, its
values checked, a bad body raised as the client's 422."""

from __future__ import annotations

import junction
import pytest
from healthledger.adapters.composition import Service
from healthledger.domain.labs.sandbox import SandboxPolicy
from junction.core.api_error import ApiError
from junction.errors.unprocessable_entity_error import UnprocessableEntityError
from junction.types import (
    ConvertCompendiumResponse,
    GetOrderTransactionResponse,
    GetTeamLabAccountsResponse,
    LabResultsRaw,
    SearchCompendiumResponse,
    SearchOrderableTestsResponse,
)

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.test_official_client_orders import ADDRESS, PATIENT, WELLNESS

pytestmark = CLIENTS_PARSE_ANSWERS


def test_compendium_and_lab_accounts_through_the_junction_client(base_url: str, team: Team) -> None:
    client = junction.Junction(api_key=team.key, base_url=base_url, timeout=30)
    canonical = client.compendium.search(mode="canonical", query="glucose", limit=2)
    assert isinstance(canonical, SearchCompendiumResponse)
    assert canonical.selected_canonical is not None
    assert canonical.selected_canonical.loinc_codes == ["2345-7"]
    walked = client.compendium.search(
        mode="crosswalk",
        loinc_set_hash=canonical.selected_canonical.loinc_set_hash,
        include_related=True,
    )
    assert walked.per_lab is not None
    assert {lab: [c.provider_id for c in cs] for lab, cs in walked.per_lab.items()} == {
        "quest": ["483"],
        "labcorp": ["001032"],
        "bioreference": ["BR0001"],
    }
    assert walked.related and all(r.relation == "superset" for r in walked.related)

    converted = client.compendium.convert(provider_ids=["001032"], target_lab="quest")
    assert isinstance(converted, ConvertCompendiumResponse)
    assert converted.converted_provider_ids == ["483"] and converted.target_lab_id == 1
    orderable = client.compendium.search_orderable_tests(
        provider_ids=["7600"], target_lab="labcorp"
    )
    assert isinstance(orderable, SearchOrderableTestsResponse) and orderable.candidates
    assert orderable.candidates["7600"][0].name == "Lipid Panel"
    with pytest.raises(UnprocessableEntityError):
        client.compendium.search(mode="canonical")

    accounts = client.lab_account.get_team_lab_accounts()
    assert isinstance(accounts, GetTeamLabAccountsResponse) and accounts.data
    assert {a.lab.value for a in accounts.data} >= {"quest", "labcorp", "bioreference"}
    assert all(a.status.value == "active" for a in accounts.data)
    one = client.lab_account.get_team_lab_accounts(lab_account_id=accounts.data[0].id)
    assert one.data and {a.id for a in one.data} == {accounts.data[0].id}


def test_order_transactions_through_the_junction_client(
    base_url: str, team: Team, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        service.lab_orders, "policy", SandboxPolicy(failure_rate=0, cancellation_rate=0)
    )
    client = junction.Junction(api_key=team.key, base_url=base_url, timeout=60)
    user_id = client.user.create(client_user_id="transactions-junction").user_id
    order = client.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
    ).order
    transaction = client.order_transaction.get_transaction(order.id)
    assert isinstance(transaction, GetOrderTransactionResponse)
    assert transaction.id == order.id and transaction.status.value == "active"
    assert transaction.orders is not None and [o.id for o in transaction.orders] == [order.id]
    assert transaction.orders[0].last_status.value == "ordered"
    with pytest.raises(ApiError) as early:
        client.order_transaction.get_transaction_result(order.id)
    assert early.value.status_code == 409
    while client.lab_tests.get_order(order.id).status.value != "completed":
        client.lab_tests.simulate_order_process(order.id)
    done = client.order_transaction.get_transaction(order.id)
    assert done.status.value == "completed"
    results = client.order_transaction.get_transaction_result(order.id)
    assert isinstance(results, LabResultsRaw)
    assert results == client.lab_tests.get_result_raw(order.id)
    pdf = b"".join(client.order_transaction.get_transaction_result_pdf(order.id))
    assert pdf.startswith(b"%PDF-")
    with pytest.raises(ApiError) as unknown:
        client.order_transaction.get_transaction("1b7c8a3e-2f41-4d6a-9c1e-5a7b3d2f1e90")
    assert unknown.value.status_code == 404
