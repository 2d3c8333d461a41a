"""The makers' sandbox in a browser (issue 28, testing against the makers here):
`healthledger serve --fake-makers` as a real process, a new user and a link token made
with the team API, and Debian's headless Chromium on the link page clicking "Sign in" at
Oura: through the fake Oura's authorization and back to the callback, which says the
connection is made; then the user's Oura data arrives, pulled by the server's own
scheduler from the fake, and the team API answers its sleep summaries and heart rate
(the fake's real-shaped documents, mapped). On SQLite: the pulls and their stored days
are the integration tests' subject on both databases; this one's is the browser's path.

And the refusal: `serve --fake-makers` for a service reached elsewhere than this machine
does not start; and `healthledger fake-makers` alone, whose printed settings reach them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.settings import Settings

from tests.conftest import Team
from tests.e2e.devtools import CHROMIUM, Browser
from tests.e2e.servers import running_server

# A week of history: enough to see data arrive, quick to pull.
HISTORY_DAYS = 7
DATA_TIMEOUT_SECONDS = 90

pytestmark = pytest.mark.sqlite_only("the browser's path through the link page and the fake")


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium; the test skips without it only outside CI (.ci/run installs it)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must have /usr/bin/chromium (.ci/run installs it)")
        pytest.skip("not installed: /usr/bin/chromium (apt-get install chromium)")
    return CHROMIUM


def poll(read: Any, timeout: float = DATA_TIMEOUT_SECONDS) -> Any:
    """`read()` until it answers something, or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = read()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError("the data did not arrive")


def test_a_new_user_signs_in_at_the_fake_oura_in_a_browser_and_their_data_arrives(
    settings: Settings,
    service: Service,
    team: Team,
    tmp_path: Path,
    chromium: Path,
) -> None:
    # The team is made here, in the server's database: its key is known.
    del service
    env = {
        "HEALTHLEDGER_OURA_HISTORY_DAYS": str(HISTORY_DAYS),
        "HEALTHLEDGER_PULL_POLL_INTERVAL": "1",
    }
    with running_server(settings, tmp_path, args=["--fake-makers"], env=env) as (
        base,
        _management,
        link,
        _output,
    ):
        api = httpx.Client(base_url=base, headers=team.headers, timeout=30)
        user = api.post("/v2/user", json={"client_user_id": "sandbox-person"})
        assert user.status_code == 200, user.text
        user_id = user.json()["user_id"]
        made = api.post("/v2/link/token", json={"user_id": user_id})
        assert made.status_code == 200, made.text
        page = f"{link}/?token={made.json()['link_token']}"

        browser = Browser(tmp_path / "profile", chromium)
        try:
            browser.open(page)
            assert "Oura" in browser.text()
            # The link page offers the sign-in at Oura: the sandbox's client is set.
            browser.click('form[action="oauth/start"] input[value="oura"] ~ button')
            landed, shown = browser.url, browser.text()
        finally:
            browser.close()
        # Back from the fake Oura through the team API's callback: connected.
        assert landed.startswith(f"{base}/v2/link/oauth/callback/oura?"), landed
        assert "Oura is connected" in shown, shown

        providers = api.get(f"/v2/user/providers/{user_id}").json()["providers"]
        assert [p["slug"] for p in providers] == ["oura"]

        # The scheduler pulls the week from the fake: sleep summaries and heart rate.
        today = datetime.now(UTC).date()
        window = {
            "start_date": (today - timedelta(days=HISTORY_DAYS)).isoformat(),
            "end_date": today.isoformat(),
        }

        def sleep() -> list[dict[str, Any]]:
            answer = api.get(f"/v2/summary/sleep/{user_id}", params=window)
            assert answer.status_code == 200, answer.text
            found: list[dict[str, Any]] = answer.json()["sleep"]
            return found if len(found) >= HISTORY_DAYS - 1 else []

        nights = poll(sleep)
        for night in nights:
            assert night["source"]["provider"] == "oura"
            # The fake's synthetic person "ava" lives at UTC+2; a night is 6.5 to 9 hours.
            assert night["timezone_offset"] == 2 * 3600
            assert 6.5 * 3600 <= night["duration"] <= 9 * 3600

        def heartrate() -> list[dict[str, Any]]:
            answer = api.get(f"/v2/timeseries/{user_id}/heartrate", params=window)
            assert answer.status_code == 200, answer.text
            found: list[dict[str, Any]] = answer.json()
            return found

        samples = poll(heartrate)
        # A sample every 5 minutes (the ring off an hour a day): days of them.
        assert len(samples) > 200 * (HISTORY_DAYS - 1)
        assert all(s["unit"] == "bpm" and 40 <= s["value"] <= 200 for s in samples)


def test_serve_with_fake_makers_is_refused_for_a_service_reached_elsewhere(
    settings: Settings, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": settings.database_url,
        "HEALTHLEDGER_MASTER_KEY_FILE": str(settings.master_key_file),
        "HEALTHLEDGER_PUBLIC_BASE_URL": "https://api.example.com",
    }
    done = subprocess.run(
        [sys.executable, "-m", "healthledger.adapters.cli", "serve", "--fake-makers"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "HEALTHLEDGER_PUBLIC_BASE_URL is not a loopback address" in done.stderr
    assert "Traceback" not in done.stderr
    # Refused before anything started: no fake, no service (its first run prints keys).
    assert done.stdout == ""


def test_fake_makers_runs_them_and_prints_the_settings_that_reach_them(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "healthledger.adapters.cli", "fake-makers", "--port", "0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    try:
        printed: dict[str, str] = {}
        for line in process.stdout:
            name, _, value = line.strip().partition("=")
            if name.startswith("HEALTHLEDGER_"):
                printed[name] = value.strip("'")
            if line.startswith("Signed in at once"):
                break
        assert set(printed) >= {
            "HEALTHLEDGER_OAUTH_MAKER_URLS",
            "HEALTHLEDGER_OAUTH_CLIENTS",
            "HEALTHLEDGER_OURA_API_URL",
        }
        # What the settings say reaches the fake Oura, as the sandbox client.
        settings = Settings(
            oauth_maker_urls=json.loads(printed["HEALTHLEDGER_OAUTH_MAKER_URLS"]),
            oauth_clients=json.loads(printed["HEALTHLEDGER_OAUTH_CLIENTS"]),
        )
        client = settings.oauth_clients["oura"]
        signed_in = httpx.get(
            f"{settings.oauth_maker_urls['oura']}/oura/authorize",
            params={
                "client_id": client.client_id,
                "redirect_uri": "http://127.0.0.1:9/callback",
                "response_type": "code",
            },
        )
        assert signed_in.status_code == 302
        assert signed_in.headers["location"].startswith("http://127.0.0.1:9/callback?code=")
        api = printed["HEALTHLEDGER_OURA_API_URL"]
        refused = httpx.get(f"{api}/v2/usercollection/personal_info")
        assert refused.status_code == 401  # Oura's data API, asking for a token
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert process.returncode == 0
