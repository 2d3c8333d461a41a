"""A fake-Dexcom user read through the official Python client `vital` (issue 31): the
person signs in at the fake Dexcom (adapters/makers/fake_dexcom.py, a real local HTTP
server) through the link page's OAuth flow, the pulls read the Dexcom API v3 there, and the
client's glucose getters parse what the fake served (mg/dL as mmol/L, at systemTime). On
both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_dexcom import (
    MG_DL_PER_MMOL_L,
    PEOPLE,
    TIME_FORMAT,
    FakeDexcom,
    running_fake_dexcom,
)
from healthledger.adapters.settings import Settings

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.integration.oauth_browser import (
    API,
    APP,
    LINK,
    SERVICE,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    a_browser,
    outcome,
)

pytestmark = CLIENTS_PARSE_ANSWERS

GAIL = PEOPLE["gail"]  # mg/dL


@pytest.fixture
def dexcom() -> Iterator[FakeDexcom]:
    with running_fake_dexcom(FakeDexcom(default_person="gail")) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def service(settings: Settings, dexcom: FakeDexcom) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": dexcom.base,
            "dexcom_api_url": dexcom.base,
            "dexcom_history_days": 5,
            "oauth_clients": {"dexcom": SERVICE},
        }
    )
    built = build_service(configured)
    yield built
    built.close()


def test_the_official_client_reads_a_fake_dexcom_users_glucose(
    api: vital.Vital, base_url: str, team: Team, service: Service, dexcom: FakeDexcom
) -> None:
    user_id = str(api.user.create(client_user_id="oc-dexcom").user_id)
    token = httpx.post(
        f"{base_url}/v2/link/token",
        json={"user_id": user_id, "redirect_url": APP},
        headers=team.headers,
    ).json()["link_token"]
    browser = a_browser(service)
    try:
        _, answer = browser.sign_in(token, "dexcom")
    finally:
        browser.client.close()
    assert outcome(answer) == {"state": "success"}
    assert service.jobs.run_due_pulls() > 0

    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in range(4, 1, -1)]
    served = [
        (
            datetime.strptime(r["systemTime"], TIME_FORMAT).replace(tzinfo=UTC).timestamp(),
            round(r["value"] / MG_DL_PER_MMOL_L, 1),
        )
        for d in days
        for r in dexcom.egvs(GAIL, d)
    ]
    assert len(served) > 280 * len(days)
    samples = api.vitals.glucose(user_id, start_date=str(days[0]), end_date=str(days[-1]))
    assert [(s.timestamp.timestamp(), s.value) for s in samples] == served
    assert {s.unit for s in samples} == {"mmol/L"}
    grouped = api.vitals.glucose_grouped(
        user_id, start_date=str(days[0]), end_date=str(days[-1])
    ).groups
    assert list(grouped) == ["dexcom"]
    [group] = grouped["dexcom"]
    assert group.source.provider == "dexcom"
    assert len(group.data) == len(served)
