"""The Dexcom reader (adapters/providers/dexcom.py) against the fake Dexcom shipped with
the package (adapters/makers/fake_dexcom.py, a real HTTP server on localhost), on SQLite
and PostgreSQL: a person connects through the OAuth link flow, the pulls read every
window of their EGVs (at most 30 days a request, windows outside `dataRange` not asked),
glucose answers in mmol/L what the fake served; Dexcom's failures (429, 5xx, timeouts,
an expired token, a revoked grant, a window it refuses) take the pulls and the
connection where docs/makers/dexcom.md says; the daily sync polls what is new."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import httpx
import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.makers.fake_dexcom import (
    MAX_WINDOW,
    MG_DL_PER_MMOL_L,
    PEOPLE,
    TIME_FORMAT,
    FakeDexcom,
    running_fake_dexcom,
)
from healthledger.adapters.providers.dexcom import DexcomReader
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.providers import NON_RETRIABLE, ProviderError, PullTarget
from healthledger.domain.connections.resource_feeds import ResourceFeed

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.maker_reads import get, provider_status
from tests.integration.oauth_browser import (
    APP,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    outcome,
    signed_in_user,
)
from tests.stream_ids import stream_of_connection

GAIL = PEOPLE["gail"]  # mg/dL, on a phone
HISTORY_DAYS = 10


@pytest.fixture
def dexcom(clock: Clock) -> Iterator[FakeDexcom]:
    with running_fake_dexcom(FakeDexcom(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, dexcom: FakeDexcom, clock: Clock) -> Iterator[Service]:
    with reads.maker_service(
        settings,
        clock,
        "dexcom",
        dexcom.base,
        dexcom_api_url=dexcom.base,
        dexcom_history_days=HISTORY_DAYS,
    ) as built:
        yield built


def connect(api: Any, home: Team, browser: Browser) -> uuid.UUID:
    return signed_in_user(api, home, browser, "dexcom")


def feed(svc: Service, user_id: uuid.UUID) -> ResourceFeed:
    return reads.feed(svc, user_id, "dexcom", "glucose")


def past_days(clock: Clock) -> list[date]:
    today = clock().date()
    return [today - timedelta(days=n) for n in range(HISTORY_DAYS - 1, 0, -1)]


def glucose(api: Any, home: Team, user_id: uuid.UUID, days: list[date]) -> list[Any]:
    found: list[Any] = get(
        api,
        home,
        f"/v2/timeseries/{user_id}/glucose",
        start_date=str(days[0]),
        end_date=str(days[-1]),
    )
    return found


def served(fake: FakeDexcom, person: str, days: list[date]) -> list[tuple[datetime, float]]:
    """(instant, mmol/L) of every EGV the fake serves on the UTC days `days`."""
    found = []
    for day in days:
        for record in fake.egvs(PEOPLE[person], day):
            moment = datetime.strptime(record["systemTime"], TIME_FORMAT).replace(tzinfo=UTC)
            value = record["value"]
            mmol = value if record["unit"] == "mmol/L" else round(value / MG_DL_PER_MMOL_L, 1)
            found.append((moment, mmol))
    return found


def answered(samples: list[Any]) -> list[tuple[datetime, float]]:
    return [(datetime.fromisoformat(s["timestamp"]), s["value"]) for s in samples]


# -- the data, every window ---------------------------------------------------------------


def test_glucose_arrives_whole_in_mmol_per_litre_from_every_window(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    assert svc.jobs.run_due_pulls() > 0
    assert feed(svc, user_id).status == "success"
    assert provider_status(api, home, user_id)["status"] == "connected"
    # Dexcom's one scope covers glucose (its token answer names no scope: all asked).
    connection = svc.ledger.find(stream_of_connection(svc, user_id, "dexcom"))
    assert isinstance(connection, Connection)
    available = connection.resource_availability["glucose"]
    assert available["status"] == "available"
    assert available["scope_requirements"]["user_granted"]["required"] == ["offline_access"]
    days = past_days(clock)
    samples = glucose(api, home, user_id, days)
    assert answered(samples) == served(dexcom, "gail", days)
    assert len(samples) > 280 * len(days)  # every 5 minutes, whole days
    assert {s["unit"] for s in samples} == {"mmol/L"}
    # Every request's window within Dexcom's limit, in UTC without an offset; together
    # they cover the history with no gap.
    asked = [
        (datetime.fromisoformat(q["startDate"]), datetime.fromisoformat(q["endDate"]))
        for q in dexcom.data_requests()
    ]
    assert all(b.tzinfo is None and 0 < (e - b).days <= 30 for b, e in asked)
    covered = sorted(asked)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert covered[0][0].date() <= days[0] and covered[-1][1].date() > days[-1]
    # The data range read once per pull, not once per window.
    assert len(dexcom.data_requests("/v3/users/self/dataRange")) <= len(asked)


def test_a_reading_already_in_mmol_per_litre_is_kept(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    dexcom.default_person = "hugo"
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    days = past_days(clock)
    assert answered(glucose(api, home, user_id, days)) == served(dexcom, "hugo", days)


def test_windows_outside_the_data_range_are_not_asked(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    """Ines has worn a sensor for 20 days of a 60-day history: the windows before it are
    skipped on dataRange's word, and the rest read whole."""
    dexcom.default_person = "ines"
    reader = svc.oauth_makers["dexcom"]
    assert isinstance(reader, DexcomReader)
    reader.api_timeout = 10.0  # a 30-day window is 8,640 readings: not the 1 s of svc's
    user_id = connect(api, home, browser)
    target = PullTarget(
        user_id=user_id,
        provider="dexcom",
        resource="glucose",
        demo_failures={},
        connection_id=stream_of_connection(svc, user_id, "dexcom"),
    )
    today = clock().date()
    start = today - timedelta(days=60)
    found = reader.fetch(target, start, today - timedelta(days=1), clock(), 1)
    asked = [datetime.fromisoformat(q["startDate"]) for q in dexcom.data_requests()]
    worn_from = datetime.combine(today - timedelta(days=20), time(0))
    assert asked and all(a + timedelta(days=30) > worn_from for a in asked)
    assert len(asked) == 1  # 60 days: two windows, the first without a reading
    days = [today - timedelta(days=n) for n in range(20, 0, -1)]
    assert min(found) == days[0]
    assert [
        (datetime.fromisoformat(s["timestamp"]), s["value"])
        for d in sorted(found)
        for s in found[d]
    ] == served(dexcom, "ines", days)


def test_a_reader_asking_more_than_30_days_meets_dexcoms_400(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    reader = svc.oauth_makers["dexcom"]
    assert isinstance(reader, DexcomReader)
    reader.api_timeout = 10.0  # a 30-day window is 8,640 readings: not the 1 s of svc's
    target = PullTarget(
        user_id=user_id,
        provider="dexcom",
        resource="glucose",
        demo_failures={},
        connection_id=stream_of_connection(svc, user_id, "dexcom"),
    )
    today = clock().date()
    # The reader's own windows: 45 days are two requests, each within the limit.
    found = reader.fetch(target, today - timedelta(days=45), today - timedelta(days=1), clock(), 1)
    assert len(dexcom.data_requests()) == 2 and len(found) == 45
    # A reader that forgot the limit asks 45 days at once: Dexcom's 400 refuses the pull.
    reader.window_days = 45
    with pytest.raises(ProviderError) as refused:
        reader.fetch(target, today - timedelta(days=45), today - timedelta(days=1), clock(), 1)
    assert refused.value.code == NON_RETRIABLE
    assert [r[3] for r in dexcom.requests if r[1].endswith("/egvs")][-1] == 400
    # The fake's limit is Dexcom's: 30 days answered, a second more refused.
    begin = datetime.combine(today - timedelta(days=40), time(0))
    token = svc.provider_tokens.current(stream_of_connection(svc, user_id, "dexcom"))
    assert token is not None
    headers = {"Authorization": f"Bearer {token.tokens.access_token}"}
    for span, status in ((MAX_WINDOW, 200), (MAX_WINDOW + timedelta(seconds=1), 400)):
        params = {
            "startDate": begin.strftime(TIME_FORMAT),
            "endDate": (begin + span).strftime(TIME_FORMAT),
        }
        answer = httpx.get(f"{dexcom.base}/v3/users/self/egvs", params=params, headers=headers)
        assert answer.status_code == status


# -- Dexcom's failures ----------------------------------------------------------------------


def test_429_goes_retrying_then_succeeds_without_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    dexcom.fail(429, times=1, retry_after=600)  # longer than a fetch waits out
    svc.jobs.run_due_pulls()
    retrying = feed(svc, user_id)
    assert retrying.status == "retrying"
    assert reads.last_error(svc, user_id, "dexcom", "glucose") == "provider_rate_limit_exceeded"
    assert retrying.retry_at is not None and retrying.retry_at >= clock() + timedelta(seconds=600)
    clock.advance(timedelta(seconds=retrying.retry_at.timestamp() - clock().timestamp() + 1))
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id).status == "success"
    days = past_days(clock)
    samples = glucose(api, home, user_id, days)
    assert answered(samples) == served(dexcom, "gail", days)
    assert len({s["timestamp"] for s in samples}) == len(samples)


def test_5xx_and_timeouts_go_retrying_then_succeed(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    dexcom.fail(503, times=1)
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id).status == "retrying"
    assert reads.last_error(svc, user_id, "dexcom", "glucose") == "provider_unavailable"
    dexcom.default_person = "hugo"
    other = connect(api, home, browser)
    reads.times_out_after(svc, "dexcom", 1.0)
    dexcom.slow(2.5, times=1)
    svc.jobs.run_due_pulls()
    assert feed(svc, other).status == "retrying"
    assert reads.last_error(svc, other, "dexcom", "glucose") == "transport_failure"
    clock.advance(timedelta(hours=1))
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id).status == feed(svc, other).status == "success"
    days = past_days(clock)
    assert answered(glucose(api, home, user_id, days)) == served(dexcom, "gail", days)


def test_an_expired_access_token_is_refreshed_once(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    connection_id = stream_of_connection(svc, user_id, "dexcom")
    before = svc.provider_tokens.current(connection_id)
    assert before is not None
    clock.advance(timedelta(seconds=dexcom.expires_in + 60))
    svc.pulls.sync(feed(svc, user_id).id)
    refreshes = [r for r in dexcom.requests if r[2].get("grant_type") == "refresh_token"]
    assert [r[3] for r in refreshes] == [200]
    after = svc.provider_tokens.current(connection_id)
    assert after is not None and after.version == before.version + 1
    assert feed(svc, user_id).synced_at == clock()
    assert provider_status(api, home, user_id)["status"] == "connected"


def test_a_token_refused_before_its_expiry_is_refreshed_once_then_used(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom
) -> None:
    user_id = connect(api, home, browser)
    dexcom.fail(401, times=1)
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id).status == "success"
    refreshes = [r for r in dexcom.requests if r[2].get("grant_type") == "refresh_token"]
    assert [r[3] for r in refreshes] == [200]


def test_a_revoked_grant_puts_the_connection_in_error_until_the_person_signs_in_again(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    dexcom.revoke("gail")
    svc.jobs.run_due_pulls()
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "error"
    assert provider["error_details"]["error_type"] == "token_refresh_failed"
    events = list(svc.ledger.events.get(stream_of_connection(svc, user_id, "dexcom")))
    assert [type(e).__name__ for e in events].count("Errored") == 1
    assert feed(svc, user_id).status == "failure"
    refreshes = [r for r in dexcom.requests if r[2].get("grant_type") == "refresh_token"]
    assert [r[3] for r in refreshes] == [400]
    dexcom.restore("gail")
    again = api.post(
        "/v2/link/token", json={"user_id": str(user_id), "redirect_url": APP}, headers=home.headers
    )
    assert again.status_code == 200, again.text
    _, answer = browser.sign_in(again.json()["link_token"], "dexcom")
    assert outcome(answer) == {"state": "success"}
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id).status == "success"
    days = past_days(clock)
    assert answered(glucose(api, home, user_id, days)) == served(dexcom, "gail", days)


# -- revisions and the daily sync -------------------------------------------------------------


def test_a_revised_value_updates_and_never_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    glucose_feed = feed(svc, user_id)
    day = glucose_feed.newest_day
    assert day is not None
    before = dexcom.egvs(GAIL, day)
    dexcom.revise("gail", day)
    after = dexcom.egvs(GAIL, day)
    assert [r["recordId"] for r in after] == [r["recordId"] for r in before]
    assert [r["value"] for r in after] != [r["value"] for r in before]
    clock.advance(timedelta(minutes=5))
    synced = svc.pulls.sync(glucose_feed.id)
    assert synced is not None and day in synced[1]  # updated, not created
    samples = glucose(api, home, user_id, [day])
    assert answered(samples) == served(dexcom, "gail", [day])
    assert len({s["timestamp"] for s in samples}) == len(samples)  # none twice


def test_the_daily_sync_polls_what_is_new(
    svc: Service, api: Any, home: Team, browser: Browser, dexcom: FakeDexcom, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    asked_before = len(dexcom.data_requests())
    clock.advance(timedelta(days=1, hours=1))
    svc.jobs.sync_connected_feeds()
    assert len(dexcom.data_requests()) > asked_before
    yesterday = clock().date() - timedelta(days=1)
    samples = glucose(api, home, user_id, [yesterday])
    assert answered(samples) == served(dexcom, "gail", [yesterday])
    assert len(samples) > 280


def test_the_composition_root_reads_both_dexcom_entries_with_the_reader(svc: Service) -> None:
    assert isinstance(svc.oauth_makers["dexcom"], DexcomReader)
    assert isinstance(svc.oauth_makers["dexcom_v3"], DexcomReader)
