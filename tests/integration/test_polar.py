"""The Polar reader (adapters/providers/polar.py) against the fake Polar shipped with the
package (adapters/makers/fake_polar.py, a real HTTP server on localhost), on SQLite and
PostgreSQL: a person connects (Basic client authentication, `x_user_id`), is registered
with Polar at the sign-in, and the pulls read the exercise and activity transactions,
sleep and nightly recharge; a transaction is committed only once its records are stored,
so a failure before that leaves it for Polar to serve again, and the retry stores each
exercise once. Polar's failures (429, 5xx, a revoked token, a person unregistered or
without consent) take the pulls and the connection where docs/makers/polar.md says."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.makers.fake_polar import PEOPLE, FakePolar, running_fake_polar
from healthledger.adapters.providers.polar import PolarReader
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.resource_feeds import ResourceFeed

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.maker_reads import get, provider_status
from tests.integration.oauth_browser import (
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    clear_copies,
    signed_in_user,
)
from tests.stream_ids import stream_of_connection

PIA = PEOPLE["pia"]
# What Polar's API gives us; the catalog's other Polar resources succeed with nothing.
READ = {
    "workouts",
    "activity",
    "steps",
    "profile",
    "body",
    "weight",
    "sleep",
    "hrv",
    "respiratory_rate",
}


@pytest.fixture
def polar(clock: Clock) -> Iterator[FakePolar]:
    with running_fake_polar(FakePolar(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, polar: FakePolar, clock: Clock) -> Iterator[Service]:
    with reads.maker_service(
        settings, clock, "polar", polar.base, polar_api_url=polar.base
    ) as built:
        yield built


def connect(api: Any, home: Team, browser: Browser) -> uuid.UUID:
    return signed_in_user(api, home, browser, "polar")


def feed(svc: Service, user_id: uuid.UUID, resource: str) -> ResourceFeed:
    return reads.feed(svc, user_id, "polar", resource)


def statuses(svc: Service, user_id: uuid.UUID) -> dict[str, str | None]:
    return reads.statuses(svc, user_id, "polar")


def last_error(svc: Service, user_id: uuid.UUID, resource: str) -> str:
    return reads.last_error(svc, user_id, "polar", resource)


def window(days: list[date]) -> dict[str, str]:
    return {"start_date": str(days[0]), "end_date": str(days[-1])}


def workouts(api: Any, home: Team, user_id: uuid.UUID, polar: FakePolar) -> list[dict[str, Any]]:
    found = get(api, home, f"/v2/summary/workouts/{user_id}", **window(polar.unsynced_days(PIA)))
    return list(found["workouts"])


def served_exercises(polar: FakePolar) -> dict[str, dict[str, Any]]:
    return {str(e["id"]): e for e in (polar.exercise(PIA, d) for d in polar.unsynced_days(PIA))}


def exercises_committed(polar: FakePolar) -> list[int]:
    return [n for path, n in polar.committed.items() if path.startswith("exercises/")]


def retry(svc: Service, clock: Clock) -> None:
    clock.advance(timedelta(hours=1))
    svc.jobs.run_due_pulls()


# -- the data, and the transactions committed once stored -------------------------------------


def test_polar_data_arrives_and_each_transaction_is_committed_once_after_it_is_stored(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    # Registered with Polar at the sign-in; Polar's user id from the token answer.
    assert polar.is_registered("pia")
    assert provider_status(api, home, user_id)["external_user_id"] == str(PIA.user_id)
    assert svc.jobs.run_due_pulls() > 0
    assert set(statuses(svc, user_id).values()) == {"success"}
    days = polar.unsynced_days(PIA)

    # Workouts keyed by Polar's exercise ids, with its calories and heart rate.
    served = served_exercises(polar)
    ours = workouts(api, home, user_id, polar)
    assert {w["provider_id"]: w["calories"] for w in ours} == {
        key: e["calories"] for key, e in served.items()
    }
    assert {w["provider_id"]: w["max_hr"] for w in ours} == {
        key: e["heart-rate"]["maximum"] for key, e in served.items()
    }
    # Every exercise, activity and the physical information committed exactly once.
    assert sorted(exercises_committed(polar)) == [1] * len(days)
    assert set(polar.committed.values()) == {1}
    assert len(polar.committed) == 2 * len(days) + 1

    # Daily activity: Polar's active steps of each day.
    activity = get(api, home, f"/v2/summary/activity/{user_id}", **window(days))
    assert {a["calendar_date"]: a["steps"] for a in activity["activity"]} == {
        str(d): polar.activity(PIA, d)["active-steps"] for d in days
    }
    # Sleep (28 nights), and the nightly recharge's HRV and breathing rate.
    nights = [d for d in days if d >= clock().date() - timedelta(days=27)]
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(nights))
    assert {s["calendar_date"]: s["deep"] for s in sleeps["sleep"]} == {
        str(d): polar.night(PIA, d)["deep_sleep"] for d in nights
    }
    hrv = get(api, home, f"/v2/timeseries/{user_id}/hrv", **window(nights))
    assert [s["value"] for s in hrv] == [
        polar.recharge(PIA, d)["heart_rate_variability_avg"] for d in nights
    ]

    # A day on, the daily syncs (a resource at a time: activity, then steps, from one
    # activity transaction) read the new day's records: each committed once, after both
    # resources that read it stored it; nothing committed again or doubled. A day and an
    # hour on in UTC is two days on in Helsinki when it is past 23:00 there (Pia's days
    # are Helsinki's): the days that came due are counted, not assumed to be one.
    before = polar.today(PIA)
    clock.advance(timedelta(days=1, hours=1))
    came_due = (polar.today(PIA) - before).days
    assert came_due in (1, 2)
    svc.jobs.sync_connected_feeds()
    assert set(polar.committed.values()) == {1}
    assert len(polar.committed) == 2 * (len(days) + came_due) + 1
    newest = polar.unsynced_days(PIA)[-1]
    again = workouts(api, home, user_id, polar)
    assert len(again) == len({w["provider_id"] for w in again}) == len(served)
    assert str(polar.exercise(PIA, newest)["id"]) in {w["provider_id"] for w in again}
    steps = get(api, home, f"/v2/timeseries/{user_id}/steps", start_date=str(newest))
    assert sum(s["value"] for s in steps) == sum(
        s["steps"] for s in polar.step_samples(PIA, newest)["samples"]
    )
    assert clear_copies(svc, polar.issued) == set()


def test_a_failure_before_the_commit_leaves_the_transaction_to_be_served_again_stored_once(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar, clock: Clock
) -> None:
    """The records stored, then the commit fails (a crash between the two is the same for
    Polar): Polar serves them again in the next transaction, and our store, keyed by the
    exercise ids, takes them as the same workouts."""
    user_id = connect(api, home, browser)
    polar.fail(503, times=1, path="exercise-transactions/", method="PUT")
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "retrying"
    assert last_error(svc, user_id, "workouts") == "provider_unavailable"
    assert exercises_committed(polar) == []
    stored = workouts(api, home, user_id, polar)
    assert len(stored) == len(served_exercises(polar))  # stored before the commit
    retry(svc, clock)
    assert feed(svc, user_id, "workouts").status == "success"
    ours = workouts(api, home, user_id, polar)
    assert sorted(w["provider_id"] for w in ours) == sorted(served_exercises(polar))
    assert sorted(exercises_committed(polar)) == [1] * len(ours)


def test_a_failure_mid_transaction_commits_nothing_and_the_retry_stores_each_exercise_once(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    third = sorted(served_exercises(polar))[2]
    polar.fail(500, times=1, path=f"/exercises/{third}", method="GET")
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "retrying"
    assert last_error(svc, user_id, "workouts") == "provider_unavailable"
    assert exercises_committed(polar) == [] and workouts(api, home, user_id, polar) == []
    # Not the other transactions' business: activity was stored and committed.
    assert feed(svc, user_id, "activity").status == "success"
    retry(svc, clock)
    ours = workouts(api, home, user_id, polar)
    assert len(ours) == len({w["provider_id"] for w in ours}) == len(served_exercises(polar))
    assert sorted(exercises_committed(polar)) == [1] * len(ours)


def test_records_on_days_outside_the_windows_read_leave_the_transaction_uncommitted(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar, clock: Clock
) -> None:
    """Polar serves exercises older than the pull's 28 days (a watch synced late): they
    are not stored, so the transaction is not committed (committing would drop them at
    Polar); what the window covers is stored all the same."""
    polar.history_days = 40
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "success"
    assert exercises_committed(polar) == []
    served = served_exercises(polar)
    stored = {w["provider_id"] for w in workouts(api, home, user_id, polar)}
    assert stored < set(served) and len(stored) >= 27


def test_429_goes_retrying_then_succeeds(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    polar.fail(429, times=1, path="exercise-transactions", method="POST")
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "retrying"
    assert last_error(svc, user_id, "workouts") == "provider_rate_limit_exceeded"
    assert feed(svc, user_id, "sleep").status == "success"
    retry(svc, clock)
    assert feed(svc, user_id, "workouts").status == "success"
    assert len(workouts(api, home, user_id, polar)) == len(served_exercises(polar))


def test_a_revoked_token_puts_the_connection_in_error(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar
) -> None:
    user_id = connect(api, home, browser)
    polar.revoke("pia")
    svc.jobs.run_due_pulls()
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "error"
    assert provider["error_details"]["error_type"] == "token_refresh_failed"
    events = list(svc.ledger.events.get(stream_of_connection(svc, user_id, "polar")))
    assert [type(e).__name__ for e in events].count("Errored") == 1
    found = statuses(svc, user_id)
    assert {found[r] for r in READ} == {"failure"}
    assert polar.committed == {}


def test_a_person_polar_forgot_is_registered_again_and_one_without_consent_fails_clearly(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    polar.unregister("pia")  # a registration lost (or one Polar could not take at sign-in)
    svc.jobs.run_due_pulls()
    assert polar.is_registered("pia")
    assert set(statuses(svc, user_id).values()) == {"success"}
    # A person who withdrew Polar's data sharing consent: 403, a refusal, not retried.
    polar.refuse_consent("pia")
    other = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    found = statuses(svc, other)
    assert {found[r] for r in READ} == {"failure"}
    assert last_error(svc, other, "workouts") == "non_retriable_error"
    assert provider_status(api, home, other)["status"] == "connected"


def test_the_composition_root_reads_polar_with_the_reader(svc: Service) -> None:
    adapter = svc.pulls.adapter_for("polar", False)
    assert isinstance(adapter, PolarReader)


def test_deregistration_deletes_the_person_at_polar_with_the_user_id_kept_with_the_grant(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar
) -> None:
    """Our DELETE of the connection (the revocation job, ADR 0030): Polar's `DELETE
    /v3/users/{user-id}`, the id kept sealed with the grant at the sign-in (the job has
    only the grant); Polar then refuses the token. Polar down: tried again; the person
    gone already (its token refused, 401): done."""
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    stored = svc.provider_tokens.current(stream_of_connection(svc, user_id, "polar"))
    assert stored is not None and stored.tokens.account == str(PEOPLE["pia"].user_id)
    assert str(PEOPLE["pia"].user_id) not in repr(stored.tokens)
    polar.fail(503, path=f"/v3/users/{PEOPLE['pia'].user_id}", method="DELETE")
    assert api.delete(f"/v2/user/{user_id}/polar", headers=home.headers).status_code == 200
    assert svc.jobs.revoke_grants() == 0  # Polar down: owed still
    assert polar.deregistered == []
    reader = svc.pulls.adapter_for("polar", False)
    assert isinstance(reader, PolarReader)
    reader.revoke(stored.team_id, stored.client_id, stored.tokens)  # as the retry will
    assert polar.deregistered == ["pia"]
    deleted = [(m, s) for m, p, s in polar.requests if m == "DELETE"]
    assert deleted == [("DELETE", 503), ("DELETE", 204)]
    reader.revoke(stored.team_id, stored.client_id, stored.tokens)  # gone already: done
    assert [s for m, p, s in polar.requests if m == "DELETE"][-1] == 401
