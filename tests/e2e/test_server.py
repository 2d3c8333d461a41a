"""`healthledger serve` as a real process: first run, a real HTTP server, restart."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from healthledger.adapters.reference import provider_catalog
from healthledger.adapters.settings import Settings

KEY = re.compile(r"team API key\s+(hlk_\S+)")
MANAGEMENT_KEY = re.compile(r"management key\s+(hlm_\S+)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_server(settings: Settings, workdir: Path) -> Iterator[tuple[str, str, str, list[str]]]:
    port, management_port, link_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": settings.database_url,
        "HEALTHLEDGER_MASTER_KEY_FILE": str(settings.master_key_file),
        "HEALTHLEDGER_TEAM_API_PORT": str(port),
        "HEALTHLEDGER_MANAGEMENT_API_PORT": str(management_port),
        "HEALTHLEDGER_LINK_PORT": str(link_port),
        "HEALTHLEDGER_LINK_URL": f"http://127.0.0.1:{link_port}",
        "HEALTHLEDGER_LOG_LEVEL": "warning",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "healthledger.adapters.cli", "serve"],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    management = f"http://127.0.0.1:{management_port}"
    link = f"http://127.0.0.1:{link_port}"
    try:
        deadline = time.monotonic() + 30
        for url in (f"{base}/openapi.json", f"{management}/openapi.json", f"{link}/"):
            while True:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                try:
                    httpx.get(url, timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "server did not start"
                    time.sleep(0.1)
        output: list[str] = []
        yield base, management, link, output
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
        output.extend(out.splitlines())
        assert process.returncode == 0, out


def test_first_run_prints_the_key_once_and_the_api_serves_over_http(
    settings: Settings, tmp_path: Path
) -> None:
    with running_server(settings, tmp_path) as (base, management, link, output):
        pass
    keys = [m.group(1) for line in output if (m := KEY.search(line))]
    management_keys = [m.group(1) for line in output if (m := MANAGEMENT_KEY.search(line))]
    assert len(keys) == 1 and len(management_keys) == 1
    key = keys[0]

    with running_server(settings, tmp_path) as (base, management, link, output):
        headers = {"x-service-api-key": key}
        created = httpx.post(f"{base}/v2/user", json={"client_user_id": "http-1"}, headers=headers)
        assert created.status_code == 200
        user_id = created.json()["user_id"]
        assert httpx.get(f"{base}/v2/user/{user_id}", headers=headers).json()["client_user_id"] == (
            "http-1"
        )
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
    # A later start prints nothing secret.
    assert not any("hlk_" in line or "hlm_" in line for line in output)
