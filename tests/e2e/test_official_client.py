"""Wire compatibility with the official Python client `vital==2.1.569` (issue 17,
docs/compatibility.md): the real team API under uvicorn on a localhost port, called through
the client, on both databases. A call that returns has been parsed by the client's models
(vital.types); the values are checked too.

The only change to the client is the one customers make: an httpx event hook renames its
key header to ours. A second test diffs the client's methods and response models against
our OpenAPI document, so that a field the client requires and we do not declare, or an
endpoint we stop serving, is a failing test rather than a customer's traceback."""

from __future__ import annotations

import typing
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from vital.core.api_error import ApiError
from vital.errors import BadRequestError, UnprocessableEntityError
from vital.types import (
    Address,
    ClientUserIdConflictResponse,
    GuarantorDetails,
    HttpValidationError,
    NotFoundErrorBody,
)

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.official_client import ADDRESS, client_calls, gaps, shape, upsert_info

pytestmark = CLIENTS_PARSE_ANSWERS

# -- every endpoint we serve, through the client ----------------------------------------------


def test_users_and_demographics_through_the_official_client(api: vital.Vital) -> None:
    created = api.user.create(client_user_id="oc-1", fallback_time_zone="Europe/London")
    assert created.client_user_id == "oc-1"
    user_id = created.user_id
    plain = api.user.create(client_user_id="oc-2")

    got = api.user.get(user_id)
    assert (got.user_id, got.client_user_id, got.connected_sources) == (user_id, "oc-1", [])
    assert got.fallback_time_zone is not None and got.fallback_time_zone.id == "Europe/London"
    assert api.user.get_by_client_user_id("oc-1").user_id == user_id
    page = api.user.get_all(offset=0, limit=10)
    assert page.total == 2 and {u.user_id for u in page.users} == {user_id, plain.user_id}

    assert api.user.patch(user_id, ingestion_start="2026-01-01", client_user_id="oc-1b") is None
    patched = api.user.get(user_id)
    assert (patched.client_user_id, patched.ingestion_start) == ("oc-1b", "2026-01-01")

    # Demographics: the client's address spelling in, both spellings out.
    info = upsert_info(api, user_id)
    assert (info.address.zip, info.address.country) == ("20374", "US")
    latest = api.user.get_latest_user_info(user_id)
    assert (latest.first_name, latest.address.zip, latest.address.country) == (
        "Grace",
        "20374",
        "US",
    )
    assert latest.address.model_extra == {"zip_code": "20374"}  # the spec's spelling, beside
    assert latest.race == "white_caucasian"
    # A medical proxy as the client sends it (household members included), and an address
    # the client read back and sends again (both spellings, country "" for none).
    proxy = GuarantorDetails(
        first_name="Ada",
        last_name="Hopper",
        address=ADDRESS.model_copy(update={"country": ""}),
        phone_number="+1 555 010 1907",
        household_income=50000,
        household_size=2,
    )
    echoed = Address.model_validate(latest.address.model_dump())
    with_proxy = api.user.upsert_user_info(
        user_id,
        **{**info.model_dump(exclude={"address"}), "medical_proxy": proxy},
        address=echoed,
    )
    assert with_proxy.medical_proxy is not None
    assert with_proxy.medical_proxy.address.country == ""
    assert with_proxy.medical_proxy.household_size == 2
    assert api.user.get_latest_user_info(user_id).medical_proxy == with_proxy.medical_proxy

    # Delete, read (404), undo.
    assert api.user.delete(user_id).success is True
    with pytest.raises(ApiError) as gone:
        api.user.get(user_id)
    assert gone.value.status_code == 404
    assert "scheduled for deletion" in str(NotFoundErrorBody.model_validate(gone.value.body).detail)
    assert api.user.undo_delete(user_id=user_id).success is True
    assert api.user.get(user_id).client_user_id == "oc-1b"
    assert api.user.delete(plain.user_id).success is True
    assert api.user.undo_delete(client_user_id="oc-2").success is True


def test_spec_spelled_demographics_read_back_through_the_client(
    api: vital.Vital, base_url: str, team: Team
) -> None:
    """A record made the spec's way (zip_code, no country) still parses for the client."""
    user_id = api.user.create(client_user_id="oc-spec").user_id
    spec_body = {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "email": "ada@example.org",
        "phone_number": "+44 20 7946 0000",
        "gender": "female",
        "dob": "1915-12-10",
        "address": {
            "first_line": "12 St James's Sq",
            "zip_code": "SW1Y 4JH",
            "state": "LDN",
            "city": "London",
        },
    }
    recorded = httpx.patch(
        f"{base_url}/v2/user/{user_id}/info", json=spec_body, headers=team.headers
    )
    assert recorded.status_code == 200, recorded.text
    latest = api.user.get_latest_user_info(user_id)
    # No country was recorded: answered as the empty string, not guessed.
    assert (latest.address.zip, latest.address.country) == ("SW1Y 4JH", "")


def test_connections_link_providers_and_introspection_through_the_client(
    api: vital.Vital, service: Service
) -> None:
    user_id = api.user.create(client_user_id="oc-connected").user_id
    lonely = api.user.create(client_user_id="oc-lonely").user_id

    token = api.link.token(user_id=user_id, provider="oura")
    assert token.link_token.startswith("hll_") and "token=" in token.link_web_url
    assert api.link.is_token_valid(token=token.link_token)["is_valid"] is True
    assert api.link.is_token_valid(token="hll_nope")["is_valid"] is False

    demo = api.link.connect_demo_provider(user_id=user_id, provider="oura")
    assert demo.success is True and demo.detail
    api.link.connect_demo_provider(user_id=user_id, provider="freestyle_libre")
    assert service.jobs.run_due_pulls() > 0

    # The user with connections, in all three user reads.
    for read in (
        api.user.get(user_id),
        api.user.get_by_client_user_id("oc-connected"),
        next(u for u in api.user.get_all().users if u.user_id == user_id),
    ):
        sources = {s.provider.slug: s for s in read.connected_sources}
        assert set(sources) == {"oura", "freestyle_libre"}
        assert sources["oura"].source == sources["oura"].provider  # deprecated duplicate
        assert sources["oura"].provider.name == "Oura" and sources["oura"].provider.logo
    assert api.user.get(lonely).connected_sources == []

    providers = api.user.get_connected_providers(user_id)
    assert {p.slug for p in providers["providers"]} == {"oura", "freestyle_libre"}
    assert {p.status for p in providers["providers"]} == {"connected"}
    assert api.user.get_connected_providers(lonely) == {"providers": []}

    catalog = api.providers.get_all()
    assert {"oura", "fitbit", "freestyle_libre", "manual"} <= {p.slug for p in catalog}

    pulls = api.introspect.get_user_historical_pulls(user_id=user_id)
    (entry,) = pulls.data
    assert entry.user_id == user_id and set(entry.provider) == {"oura", "freestyle_libre"}
    glucose = entry.provider["freestyle_libre"].pulled["glucose"]
    assert glucose.status == "success" and glucose.error_details is None
    assert pulls.next_cursor is None

    resources = api.introspect.get_user_resources(user_id=user_id)
    (entry_r,) = resources.data
    assert entry_r.user_id == user_id and set(entry_r.provider) == {"oura", "freestyle_libre"}
    glucose_r = entry_r.provider["freestyle_libre"]["glucose"]
    assert glucose_r.last_attempt is not None and glucose_r.last_attempt.status == "success"
    assert glucose_r.oldest_data is not None and glucose_r.newest_data is not None
    assert glucose_r.oldest_data <= glucose_r.newest_data
    everyone = api.introspect.get_user_resources(user_limit=1)
    assert len(everyone.data) == 1 and everyone.next_cursor is None  # one connected user

    assert api.user.deregister_provider(user_id, "oura").success is True
    left = api.user.get(user_id).connected_sources
    assert [s.provider.slug for s in left] == ["freestyle_libre"]


def test_introspection_pages_with_either_cursor_parameter(
    api: vital.Vital, service: Service
) -> None:
    users = sorted(api.user.create(client_user_id=f"oc-page-{n}").user_id for n in range(3))
    # withings is not in the client's DemoProviders, which is non-exhaustive: it goes through.
    for user_id, provider in zip(users, ("fitbit", "withings", "apple_health_kit"), strict=True):
        api.link.connect_demo_provider(user_id=user_id, provider=provider)
    service.jobs.run_due_pulls()
    for listing in (api.introspect.get_user_resources, api.introspect.get_user_historical_pulls):
        for parameter in ("next_cursor", "cursor"):  # the client offers both
            seen: list[str] = []
            page = listing(user_limit=2)
            while True:
                seen += [entry.user_id for entry in page.data]
                if page.next_cursor is None:
                    break
                page = listing(user_limit=2, **{parameter: page.next_cursor})
            assert seen == users, (listing, parameter)


def test_errors_parse_as_the_clients_error_types(api: vital.Vital) -> None:
    first = api.user.create(client_user_id="oc-dup")

    # Spec section 7: a client_user_id already held is a 400 naming the holder.
    with pytest.raises(BadRequestError) as duplicate:
        api.user.create(client_user_id="oc-dup")
    conflict = ClientUserIdConflictResponse.model_validate(duplicate.value.body)
    assert conflict.detail.user_id == first.user_id
    assert conflict.detail.error_type == "INVALID_REQUEST"

    # A bad body: 422 with pydantic's shape.
    with pytest.raises(UnprocessableEntityError) as invalid:
        api.user.create(client_user_id="oc-bad", fallback_time_zone="Not/AZone")
    body = invalid.value.body
    assert isinstance(body, HttpValidationError) and body.detail is not None
    assert [e["loc"] for e in body.detail] == [["body", "fallback_time_zone"]]
    with pytest.raises(UnprocessableEntityError):
        upsert_info(api, first.user_id, ADDRESS.model_copy(update={"zip": ""}))

    # An unknown user: 404 with a string `detail`. The client raises its NotFoundError only
    # for a lab-test call; for every call we serve it raises ApiError with the status.
    unknown = str(uuid.uuid4())
    calls: list[Callable[[], Any]] = [
        lambda: api.user.get(unknown),
        lambda: api.user.get_by_client_user_id("oc-nobody"),
        lambda: api.user.delete(unknown),
        lambda: api.user.get_connected_providers(unknown),
        lambda: api.user.get_latest_user_info(unknown),
        lambda: api.link.token(user_id=unknown),
        lambda: api.introspect.get_user_resources(user_id=unknown),
    ]
    for call in calls:
        with pytest.raises(ApiError) as missing:
            call()
        assert missing.value.status_code == 404
        assert NotFoundErrorBody.model_validate(missing.value.body).detail

    # A 400 of a call whose 400 the client does not type: ApiError, the body still JSON.
    with pytest.raises(ApiError) as neither:
        api.user.undo_delete()
    assert neither.value.status_code == 400 and "detail" in neither.value.body


# -- the client's methods against our OpenAPI document ------------------------------------------

# (client method, HTTP method, path template in our document): every client method that
# calls an endpoint we serve. test_the_list_names_every_served_client_call keeps it complete.
SERVED: list[tuple[str, str, str]] = [
    ("user.get_all", "GET", "/v2/user"),
    ("user.create", "POST", "/v2/user"),
    ("user.get_connected_providers", "GET", "/v2/user/providers/{user_id}"),
    ("user.get_latest_user_info", "GET", "/v2/user/{user_id}/info/latest"),
    ("user.upsert_user_info", "PATCH", "/v2/user/{user_id}/info"),
    ("user.get_by_client_user_id", "GET", "/v2/user/resolve/{client_user_id}"),
    ("user.deregister_provider", "DELETE", "/v2/user/{user_id}/{provider}"),
    ("user.get", "GET", "/v2/user/{user_id}"),
    ("user.delete", "DELETE", "/v2/user/{user_id}"),
    ("user.patch", "PATCH", "/v2/user/{user_id}"),
    ("user.undo_delete", "POST", "/v2/user/undo_delete"),
    # Closed beta (tests/e2e/test_official_client_portal.py drives it).
    ("user.create_portal_url", "POST", "/v2/user/{user_id}/create_portal_url"),
    ("link.token", "POST", "/v2/link/token"),
    ("link.is_token_valid", "POST", "/v2/link/token/isValid"),
    ("link.connect_demo_provider", "POST", "/v2/link/connect/demo"),
    ("link.token_state", "GET", "/v2/link/state"),
    ("link.start_connect", "POST", "/v2/link/start"),
    ("link.get_all_providers", "GET", "/v2/link/providers"),
    ("link.generate_oauth_link", "GET", "/v2/link/provider/oauth/{oauth_provider}"),
    ("link.connect_password_provider", "POST", "/v2/link/provider/password/{provider}"),
    (
        "link.complete_password_provider_mfa",
        "POST",
        "/v2/link/provider/password/{provider}/complete_mfa",
    ),
    # (link.connect_email_auth_provider's path names freestyle_libre, which our
    # /v2/link/provider/email/{provider} serves: test_official_client_link.py drives it.)
    ("link.password_auth", "POST", "/v2/link/auth"),
    ("link.email_auth", "POST", "/v2/link/auth/email"),
    ("link.connect_manual_provider", "POST", "/v2/link/provider/manual/{provider}"),
    ("link.code_create", "POST", "/v2/link/code/create"),
    ("link.bulk_trigger_historical_pull", "POST", "/v2/link/bulk_trigger_historical_pull"),
    ("link.list_bulk_ops", "GET", "/v2/link/bulk_op"),
    ("link.bulk_import", "POST", "/v2/link/bulk_import"),
    ("link.bulk_export", "POST", "/v2/link/bulk_export"),
    ("link.bulk_pause", "POST", "/v2/link/bulk_pause"),
    ("providers.get_all", "GET", "/v2/providers"),
    ("introspect.get_user_resources", "GET", "/v2/introspect/resources"),
    ("introspect.get_user_historical_pulls", "GET", "/v2/introspect/historical_pull"),
    # The aggregate query (tests/e2e/test_official_client_aggregate.py drives it).
    ("aggregate.query_one", "POST", "/aggregate/v1/user/{user_id}/query"),
    # Continuous queries (tests/e2e/test_official_clients_continuous_queries.py).
    (
        "aggregate.get_result_table_for_continuous_query",
        "GET",
        "/aggregate/v1/user/{user_id}/continuous_query/{query_id_or_slug}/result_table",
    ),
    (
        "aggregate.get_task_history_for_continuous_query",
        "GET",
        "/aggregate/v1/user/{user_id}/continuous_query/{query_id_or_slug}/task_history",
    ),
    # The lab report parser (tests/e2e/test_official_clients_lab_report.py).
    ("lab_report.parser_create_job", "POST", "/lab_report/v1/parser/job"),
    ("lab_report.parser_get_job", "GET", "/lab_report/v1/parser/job/{job_id}"),
    # Summaries (tests/e2e/test_official_client_health_data.py drives them).
    ("sleep.get", "GET", "/v2/summary/sleep/{user_id}"),
    ("activity.get", "GET", "/v2/summary/activity/{user_id}"),
    ("workouts.get", "GET", "/v2/summary/workouts/{user_id}"),
    ("body.get", "GET", "/v2/summary/body/{user_id}"),
    ("meal.get", "GET", "/v2/summary/meal/{user_id}"),
    ("profile.get", "GET", "/v2/summary/profile/{user_id}"),
    ("sleep_cycle.get", "GET", "/v2/summary/sleep_cycle/{user_id}"),
    ("menstrual_cycle.get", "GET", "/v2/summary/menstrual_cycle/{user_id}"),
    ("electrocardiogram.get", "GET", "/v2/summary/electrocardiogram/{user_id}"),
    # The makers' payloads as received (tests/e2e/test_official_clients_raw.py drives them).
    ("sleep.get_raw", "GET", "/v2/summary/sleep/{user_id}/raw"),
    ("activity.get_raw", "GET", "/v2/summary/activity/{user_id}/raw"),
    ("workouts.get_raw", "GET", "/v2/summary/workouts/{user_id}/raw"),
    ("body.get_raw", "GET", "/v2/summary/body/{user_id}/raw"),
    ("profile.get_raw", "GET", "/v2/summary/profile/{user_id}/raw"),
    ("devices.get_raw", "GET", "/v2/summary/devices/{user_id}/raw"),
    # A session's stream by its id (tests/e2e/test_official_clients_session_streams.py).
    ("sleep.get_stream_by_sleep_id", "GET", "/v2/timeseries/sleep/{sleep_id}/stream"),
    ("workouts.get_by_workout_id", "GET", "/v2/timeseries/workouts/{workout_id}/stream"),
    # Lab catalog, lab tests, area info (tests/e2e/test_official_client_labs.py drives them).
    ("lab_tests.get_labs", "GET", "/v3/lab_tests/labs"),
    ("lab_tests.get_markers", "GET", "/v3/lab_tests/markers"),
    ("lab_tests.get_markers_for_order_set", "POST", "/v3/lab_tests/list_order_set_markers"),
    ("lab_tests.get", "GET", "/v3/lab_tests"),
    ("lab_tests.create", "POST", "/v3/lab_tests"),
    ("lab_tests.get_by_id", "GET", "/v3/lab_tests/{lab_test_id}"),
    ("lab_tests.update_lab_test", "PATCH", "/v3/lab_tests/{lab_test_id}"),
    ("lab_tests.get_markers_for_lab_test", "GET", "/v3/lab_tests/{lab_test_id}/markers"),
    ("lab_tests.get_area_info", "GET", "/v3/order/area/info"),
    # Lab test orders (tests/e2e/test_official_client_orders.py drives them).
    ("lab_tests.create_order", "POST", "/v3/order"),
    ("lab_tests.get_order", "GET", "/v3/order/{order_id}"),
    ("lab_tests.get_orders", "GET", "/v3/orders"),
    ("lab_tests.cancel_order", "POST", "/v3/order/{order_id}/cancel"),
    ("lab_tests.simulate_order_process", "POST", "/v3/order/{order_id}/test"),
    ("lab_tests.get_result_raw", "GET", "/v3/order/{order_id}/result"),
    # Issue 33's lab methods (test_official_clients_lab_methods.py; its PDFs are streamed,
    # which client_calls does not read).
    ("lab_tests.get_result_metadata", "GET", "/v3/order/{order_id}/result/metadata"),
    (
        "lab_tests.update_on_site_collection_order_draw_completed",
        "PATCH",
        "/v3/order/{order_id}/draw_completed",
    ),
    ("lab_tests.import_order", "POST", "/v3/order/import"),
    ("order.resend_events", "POST", "/v3/order/resend_events"),
    ("lab_tests.get_paginated", "GET", "/v3/lab_test"),
    (
        "lab_tests.get_markers_by_lab_and_provider_id",
        "GET",
        "/v3/lab_tests/{lab_id}/markers/{provider_id}",
    ),
    ("lab_tests.validate_icd_codes", "POST", "/v3/insurance/validate_icd_codes"),
    ("insurance.search_diagnosis", "GET", "/v3/insurance/search/diagnosis"),
    # The team's settings (tests/e2e/test_official_client_team.py drives them).
    ("team.get", "GET", "/v2/team/{team_id}"),
    ("team.get_link_config", "GET", "/v2/team/link/config"),
    ("team.get_user_by_id", "GET", "/v2/team/users/search"),
    ("team.get_svix_url", "GET", "/v2/team/svix/url"),
    ("user.get_team_metrics", "GET", "/v2/user/metrics"),
    ("user.refresh", "POST", "/v2/user/refresh/{user_id}"),
    # Source priorities, physicians, devices (test_official_client_team.py).
    ("team.get_source_priorities", "GET", "/v2/team/source/priorities"),
    ("team.update_source_priorities", "PATCH", "/v2/team/source/priorities"),
    ("team.get_physicians", "GET", "/v2/team/{team_id}/physicians"),
    ("user.get_devices", "GET", "/v2/user/{user_id}/device"),
    ("user.get_device", "GET", "/v2/user/{user_id}/device/{device_id}"),
    # The mobile SDKs' sign-in (tests/e2e/test_official_client_sign_in_token.py drives it).
    ("user.get_user_sign_in_token", "POST", "/v2/user/{user_id}/sign_in_token"),
    # Cholesterol fractions and test kits (test_official_clients_kits_and_cholesterol.py).
    ("vitals.cholesterol_total", "GET", "/v2/timeseries/{user_id}/cholesterol/total"),
    ("vitals.cholesterol_ldl", "GET", "/v2/timeseries/{user_id}/cholesterol/ldl"),
    ("vitals.cholesterol_hdl", "GET", "/v2/timeseries/{user_id}/cholesterol/hdl"),
    (
        "vitals.cholesterol_triglycerides",
        "GET",
        "/v2/timeseries/{user_id}/cholesterol/triglycerides",
    ),
    ("testkit.create_order", "POST", "/v3/order/testkit"),
    ("testkit.register", "POST", "/v3/order/testkit/register"),
    # Appointments of lab test orders (tests/e2e/test_official_client_appointments.py).
    ("lab_tests.get_psc_info", "GET", "/v3/order/psc/info"),
    ("lab_tests.get_order_psc_info", "GET", "/v3/order/{order_id}/psc/info"),
    (
        "lab_tests.get_psc_appointment_availability",
        "POST",
        "/v3/order/psc/appointment/availability",
    ),
    ("lab_tests.book_psc_appointment", "POST", "/v3/order/{order_id}/psc/appointment/book"),
    (
        "lab_tests.reschedule_psc_appointment",
        "PATCH",
        "/v3/order/{order_id}/psc/appointment/reschedule",
    ),
    ("lab_tests.cancel_psc_appointment", "PATCH", "/v3/order/{order_id}/psc/appointment/cancel"),
    (
        "lab_tests.get_psc_appointment_cancellation_reason",
        "GET",
        "/v3/order/psc/appointment/cancellation-reasons",
    ),
    ("lab_tests.get_psc_appointment", "GET", "/v3/order/{order_id}/psc/appointment"),
    (
        "lab_tests.get_phlebotomy_appointment_availability",
        "POST",
        "/v3/order/phlebotomy/appointment/availability",
    ),
    (
        "lab_tests.request_phlebotomy_appointment",
        "POST",
        "/v3/order/{order_id}/phlebotomy/appointment/request",
    ),
    (
        "lab_tests.book_phlebotomy_appointment",
        "POST",
        "/v3/order/{order_id}/phlebotomy/appointment/book",
    ),
    (
        "lab_tests.reschedule_phlebotomy_appointment",
        "PATCH",
        "/v3/order/{order_id}/phlebotomy/appointment/reschedule",
    ),
    (
        "lab_tests.cancel_phlebotomy_appointment",
        "PATCH",
        "/v3/order/{order_id}/phlebotomy/appointment/cancel",
    ),
    (
        "lab_tests.get_phlebotomy_appointment_cancellation_reason",
        "GET",
        "/v3/order/phlebotomy/appointment/cancellation-reasons",
    ),
    ("lab_tests.get_phlebotomy_appointment", "GET", "/v3/order/{order_id}/phlebotomy/appointment"),
]


# Client methods whose every answer is a 4xx saying why the deployment does not do it (no
# 2xx body to compare): listed, so that the check below still finds every call we answer.
REFUSED: list[tuple[str, str, str]] = [
    # No insurance is kept: lab orders bill the team (test_official_client_team.py).
    ("user.create_insurance", "POST", "/v2/user/{user_id}/insurance"),
    ("user.get_latest_insurance", "GET", "/v2/user/{user_id}/insurance/latest"),
    # Nor payors (tests/e2e/test_official_clients_lab_methods.py).
    ("insurance.search_get_payor_info", "GET", "/v3/insurance/search/payor"),
    ("insurance.search_payor_info", "POST", "/v3/insurance/search/payor"),
    ("payor.create_payor", "POST", "/v3/payor"),
]


def test_the_clients_calls_we_serve_are_in_our_openapi_with_the_fields_it_requires(
    service: Service,
) -> None:
    document = create_team_api(service).openapi()
    calls = client_calls()
    found: list[str] = []
    for method_name, http_method, path in SERVED:
        # The list says what the client really calls.
        assert calls[method_name] == (http_method, shape(path)), method_name
        operation = document["paths"].get(path, {}).get(http_method.lower())
        if operation is None:
            found.append(f"{method_name}: {http_method} {path} is not in our document")
            continue
        resource, name = method_name.split(".")
        client_class = type(getattr(vital.Vital(api_key="-"), resource))
        returned = typing.get_type_hints(getattr(client_class, name))["return"]
        if returned is type(None):
            continue  # the client reads no body (user.patch: our 204)
        ok = [status for status in operation["responses"] if status.startswith("2")]
        content = operation["responses"][ok[0]].get("content", {}).get("application/json", {})
        found += gaps(document, returned, content.get("schema", {}), method_name)
    assert found == []


def test_the_list_names_every_served_client_call(service: Service) -> None:
    """Every call of the client that lands on an operation of our document is listed in
    SERVED (and so checked above): serving a new endpoint brings it into the check."""
    document = create_team_api(service).openapi()
    ours = {
        (method.upper(), shape(path))
        for path, operations in document["paths"].items()
        for method in operations
    }
    served = {name for name, (method, path) in client_calls().items() if (method, path) in ours}
    assert served == {name for name, _, _ in [*SERVED, *REFUSED]}
    calls = client_calls()
    assert [calls[name] for name, _, _ in REFUSED] == [(m, shape(p)) for _, m, p in REFUSED]
