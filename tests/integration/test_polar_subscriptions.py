"""Our webhook at Polar (adapters/providers/polar_subscriptions.py, `healthledger makers
subscribe|unsubscribe`, docs/makers/polar.md#webhooks-in), on SQLite and PostgreSQL,
against the fake Polar (a real HTTP server) and the team API served on a real loopback
port: `subscribe` makes the webhook (Polar's PING reaches us first), keeps the key Polar
answers sealed, and the service verifies Polar's notifications with it at once; running
it again makes no second webhook; `unsubscribe` deletes it and forgets the key; Polar's
errors are clear failures with a non-zero exit and no secret printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_polar import PEOPLE, FakePolar, running_fake_polar
from healthledger.adapters.persistence.engine.schema import maker_webhook_secrets
from healthledger.adapters.providers.polar_webhooks import RESOURCES
from healthledger.adapters.settings import Settings
from sqlalchemy import select

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.oauth_browser import (
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    signed_in_user,
)
from tests.receivers import serving

PIA = PEOPLE["pia"]


@pytest.fixture
def polar(clock: Clock) -> Iterator[FakePolar]:
    # The fake's default key is not the one it will make: only a stored key verifies.
    with running_fake_polar(FakePolar(clock=clock, webhook_secret="not-made-yet")) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, polar: FakePolar, clock: Clock) -> Iterator[Service]:
    # No HEALTHLEDGER_POLAR_WEBHOOK_SIGNATURE_SECRET: the key comes from `subscribe`.
    with reads.maker_service(settings, clock, "polar", polar.base, polar_api_url=polar.base) as s:
        yield s


@pytest.fixture
def served(svc: Service) -> Iterator[str]:
    """The team API on a real loopback port: where the fake Polar calls us."""
    with serving(create_team_api(svc)) as base:
        yield base


@pytest.fixture
def cli_env(
    svc: Service, polar: FakePolar, served: str, monkeypatch: pytest.MonkeyPatch
) -> pytest.MonkeyPatch:
    """The CLI's environment: the same database and master key as `svc`, the fake's API."""
    settings = svc.settings
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))
    monkeypatch.setenv("HEALTHLEDGER_POLAR_API_URL", polar.base)
    monkeypatch.setenv("HEALTHLEDGER_PUBLIC_BASE_URL", served)
    monkeypatch.delenv("HEALTHLEDGER_POLAR_WEBHOOK_SIGNATURE_SECRET", raising=False)
    clients = {"polar": {"client_id": SERVICE_CLIENT, "client_secret": SERVICE_SECRET}}
    monkeypatch.setenv("HEALTHLEDGER_OAUTH_CLIENTS", json.dumps(clients))
    return monkeypatch


def run(*args: str) -> int:
    from healthledger.adapters.cli import main

    return main(["makers", *args])


def stored_rows(svc: Service) -> list[Any]:
    with svc.db.read() as conn:
        return list(conn.execute(select(maker_webhook_secrets)))


def webhook_calls(polar: FakePolar) -> list[tuple[str, str, int]]:
    return [r for r in polar.requests if r[1].startswith("/v3/webhooks")]


def test_subscribe_makes_the_webhook_and_its_key_verifies_notices_end_to_end(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    polar: FakePolar,
    clock: Clock,
    served: str,
    cli_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    signed_in_user(api, home, browser, "polar")
    svc.jobs.run_due_pulls()
    # Before any webhook: a notice signed with any key is refused.
    polar.webhook_url = f"{served}/makers/polar/webhook"
    assert polar.push("pia", "EXERCISE", "x0", clock()).status_code == 401

    assert run("subscribe", "polar") == 0
    printed = capsys.readouterr()
    assert f"polar created  webhook {polar.webhook_id}" in printed.out
    key = polar.webhook_secret
    assert key != "not-made-yet" and key not in printed.out + printed.err
    assert SERVICE_SECRET not in printed.out + printed.err
    # Polar PINGed our URL before it answered (we acknowledged it), made one webhook for
    # our URL and the events we read.
    assert polar.webhook_url == f"{served}/makers/polar/webhook"
    assert sorted(polar.webhook_events) == sorted(RESOURCES)
    assert [(m, s) for m, _, s in webhook_calls(polar)] == [("GET", 200), ("POST", 201)]
    # The key is kept sealed, never in clear.
    [row] = stored_rows(svc)
    assert row.provider == "polar" and row.webhook_id == polar.webhook_id
    assert key not in row.sealed_secret

    # The running service (another process's subscribe) verifies with the stored key.
    clock.advance(timedelta(days=1))
    newest = polar.unsynced_days(PIA)[-1]
    exercise = str(polar.exercise(PIA, newest)["id"])
    accepted = polar.push("pia", "EXERCISE", exercise, clock())
    assert accepted.status_code == 200 and accepted.json()["recorded"] == 1
    svc.jobs.run_due_pulls()
    assert polar.committed[f"exercises/{exercise}"] == 1
    # Signed otherwise, or not at all: 401.
    polar.webhook_secret = "another-key"
    forged = polar.push("pia", "EXERCISE", "x1", clock())
    assert forged.status_code == 401 and str(PIA.user_id) not in forged.text
    unsigned = polar.push("pia", "EXERCISE", "x1", clock(), signed=False)
    assert unsigned.status_code == 401


def test_subscribing_again_makes_no_second_webhook_and_unsubscribe_deletes_it(
    svc: Service,
    polar: FakePolar,
    cli_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run("subscribe") == 0
    first = polar.webhook_id
    assert run("subscribe") == 0
    assert "polar kept     webhook" in capsys.readouterr().out
    assert polar.webhook_id == first
    assert [m for m, _, _ in webhook_calls(polar)] == ["GET", "POST", "GET"]
    # Polar deactivated it (too many failed deliveries) and another URL was set by hand:
    # subscribe puts ours back and activates it, with the same key.
    key = polar.webhook_secret
    polar.webhook_active, polar.webhook_url = False, "https://elsewhere.example/hook"
    assert run("subscribe", "polar") == 0
    assert "polar updated  webhook" in capsys.readouterr().out
    assert polar.webhook_active and polar.webhook_url.endswith("/makers/polar/webhook")
    assert polar.webhook_secret == key and len(stored_rows(svc)) == 1

    assert run("unsubscribe", "polar") == 0
    assert f"polar deleted  webhook {first}" in capsys.readouterr().out
    assert polar.webhook_id is None and stored_rows(svc) == []
    assert ("DELETE", f"/v3/webhooks/{first}", 204) in polar.requests
    assert run("unsubscribe", "polar") == 0
    assert "polar no webhook" in capsys.readouterr().out
    # Made again: a new webhook and a new key, which replaces nothing stale.
    assert run("subscribe", "polar") == 0
    [row] = stored_rows(svc)
    assert row.webhook_id == polar.webhook_id != first


def test_two_runs_at_once_make_one_webhook_and_the_second_keeps_the_firsts_key(
    svc: Service, polar: FakePolar, cli_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("subscribe", "polar") == 0
    [made] = stored_rows(svc)
    # The second run read before the first created: its create is a 409, and it keeps
    # the webhook and the key the first stored.
    polar.race()
    assert run("subscribe", "polar") == 0
    assert "polar kept     webhook" in capsys.readouterr().out
    assert ("POST", "/v3/webhooks", 409) in polar.requests
    assert stored_rows(svc) == [made]


def test_the_stored_key_outlives_a_master_key_rotation(
    svc: Service, polar: FakePolar, served: str, cli_env: pytest.MonkeyPatch, clock: Clock
) -> None:
    assert run("subscribe", "polar") == 0
    assert svc.key_store.rotate_master_key() is not None
    ping = polar.push("pia", "SLEEP", "n1", clock())
    # Verified (an unknown person's notice is acknowledged and dropped), not refused.
    assert ping.status_code == 200
    # Another process, opening the rewrapped key with the new master key, reads it too.
    assert run("subscribe", "polar") == 0


def test_a_webhook_made_by_hand_is_kept_and_verified_with_the_setting(
    svc: Service,
    polar: FakePolar,
    served: str,
    cli_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The operator made the webhook at Polar by hand: its key is not ours to read.
    polar.webhook_id, polar.webhook_url = "hand1", f"{served}/makers/polar/webhook"
    polar.webhook_events = sorted(RESOURCES)
    assert run("subscribe", "polar") == 1
    failed = capsys.readouterr()
    assert "polar kept     webhook hand1" in failed.out
    assert "HEALTHLEDGER_POLAR_WEBHOOK_SIGNATURE_SECRET" in failed.err
    assert stored_rows(svc) == []
    # With its key in the setting, that is a working set-up.
    cli_env.setenv("HEALTHLEDGER_POLAR_WEBHOOK_SIGNATURE_SECRET", polar.webhook_secret)
    assert run("subscribe", "polar") == 0


@pytest.mark.parametrize("status", [500, 503])
def test_polars_errors_are_clear_failures_with_no_secret_printed(
    svc: Service,
    polar: FakePolar,
    cli_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    status: int,
) -> None:
    polar.fail(status, path="/v3/webhooks", method="POST")
    assert run("subscribe", "polar") == 1
    failed = capsys.readouterr()
    assert f"polar: Polar answered {status} (create)." in failed.err
    assert SERVICE_SECRET not in failed.out + failed.err
    assert polar.webhook_id is None and stored_rows(svc) == []
    # A client Polar does not know: 401, said as such, nothing made.
    cli_env.setenv(
        "HEALTHLEDGER_OAUTH_CLIENTS",
        json.dumps({"polar": {"client_id": SERVICE_CLIENT, "client_secret": "wrong-secret"}}),
    )
    assert run("subscribe", "polar") == 1
    refused = capsys.readouterr()
    assert "polar: Polar answered 401 (read)." in refused.err
    assert "wrong-secret" not in refused.out + refused.err
    assert run("unsubscribe", "polar") == 1
    assert "polar: Polar answered 401 (read)." in capsys.readouterr().err
    # Polar out of reach.
    cli_env.setenv("HEALTHLEDGER_POLAR_API_URL", "http://127.0.0.1:9")
    assert run("subscribe", "polar") == 1
    assert "polar: Polar could not be reached (read)." in capsys.readouterr().err


def test_a_notice_while_no_key_is_known_is_refused_but_a_ping_is_acknowledged(
    svc: Service, polar: FakePolar, served: str, clock: Clock
) -> None:
    polar.webhook_url = f"{served}/makers/polar/webhook"
    assert polar.push("pia", "SLEEP", "n1", datetime.now(UTC)).status_code == 401
    ping = polar.push("pia", "PING", "", clock())
    assert ping.status_code == 200 and ping.json()["recorded"] == 0
