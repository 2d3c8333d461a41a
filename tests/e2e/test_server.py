"""`healthledger serve` as a real process: first run, a real HTTP server, restart."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from healthledger.adapters.reference import provider_catalog
from healthledger.adapters.settings import Settings

from tests.e2e.servers import KEY, MANAGEMENT_KEY, running_server

# A team's identifier of a person (e-mail addresses are refused; a name is not).
CUID = "grace-hopper-1906"


def test_first_run_prints_the_key_once_and_the_api_serves_over_http(
    settings: Settings, tmp_path: Path
) -> None:
    with running_server(settings, tmp_path) as (base, management, link, output):
        pass
    keys = [m.group(1) for line in output if (m := KEY.search(line))]
    management_keys = [m.group(1) for line in output if (m := MANAGEMENT_KEY.search(line))]
    assert len(keys) == 1 and len(management_keys) == 1
    key = keys[0]

    # At INFO, with uvicorn's access log, as an operator would run it.
    with running_server(settings, tmp_path, env={"HEALTHLEDGER_LOG_LEVEL": "info"}) as (
        base,
        management,
        link,
        output,
    ):
        headers = {"x-service-api-key": key}
        created = httpx.post(f"{base}/v2/user", json={"client_user_id": CUID}, headers=headers)
        assert created.status_code == 200
        user_id = created.json()["user_id"]
        assert httpx.get(f"{base}/v2/user/{user_id}", headers=headers).json()["client_user_id"] == (
            CUID
        )
        resolved = httpx.get(f"{base}/v2/user/resolve/{CUID}", headers=headers)
        assert resolved.status_code == 200 and resolved.json()["user_id"] == user_id
        assert (
            httpx.get(f"{base}/v2/user", headers={"x-service-api-key": "nope"}).status_code == 401
        )
        assert httpx.get(f"{base}/docs").status_code == 200
        # The management API answers on its own port, with its own OpenAPI document.
        mheaders = {"X-Management-Key": management_keys[0]}
        teams = httpx.get(
            f"{management}/v1/org/0f6c2d1e-8b0a-5e59-9d53-3c1f4a7b2e10/team", headers=mheaders
        )
        assert teams.status_code == 200 and len(teams.json()["teams"]) == 1
        assert "/v1/org/{org_id}/team" in httpx.get(f"{management}/openapi.json").json()["paths"]
        assert "/v2/user" not in httpx.get(f"{management}/openapi.json").json()["paths"]
        # The link page answers on its own port, at the address link_web_url names.
        issued = httpx.post(f"{base}/v2/link/token", json={"user_id": user_id}, headers=headers)
        web_url = issued.json()["link_web_url"]
        assert web_url.startswith(f"{link}/?token=hll_")
        page = httpx.get(web_url)
        assert page.status_code == 200 and "Default team" in page.text
        connected = httpx.post(
            f"{link}/connect", data={"token": issued.json()["link_token"], "provider": "oura"}
        )
        assert connected.status_code == 200 and "Oura is connected" in connected.text
        # The server's own pull worker, woken by the connect, completes every pull.
        deadline = time.monotonic() + 60
        while True:
            introspected = httpx.get(
                f"{base}/v2/introspect/historical_pull",
                params={"user_id": user_id},
                headers=headers,
            ).json()
            pulled = introspected["data"][0]["provider"]["oura"]["pulled"]
            statuses = {pull["status"] for pull in pulled.values()}
            if statuses == {"success"}:
                break
            assert time.monotonic() < deadline, statuses
            time.sleep(0.2)
        (oura,) = [entry for entry in provider_catalog() if entry.slug == "oura"]
        assert set(pulled) == set(oura.supported_resources)
        sleep = httpx.get(
            f"{base}/v2/summary/sleep/{user_id}",
            params={"start_date": "2026-01-01"},
            headers=headers,
        )
        assert sleep.status_code == 200
    # A later start prints nothing secret, and its access log no person's identifier nor
    # link token (the resolve path's tail and the query strings redacted).
    assert not any("hlk_" in line or "hlm_" in line or "hll_" in line for line in output)
    assert any('"GET /v2/user/resolve/[redacted] HTTP/1.1" 200' in line for line in output)
    # A path that names a kind of health data names no one (the user's id beside "sleep").
    assert any(
        '"GET /v2/summary/sleep/[redacted]?[redacted] HTTP/1.1" 200' in line for line in output
    )
    assert not any(f"/sleep/{user_id}" in line for line in output)
    assert any('"GET /?[redacted] HTTP/1.1" 200' in line for line in output)
    assert not any(CUID in line or "grace-hopper" in line for line in output)
