"""Apple Health uploads to `healthledger serve` as a real process (docs/makers/
apple_health.md): an upload waiting for its import when the server starts is run by the
server's import worker (an import survives a restart), and an export larger than the JSON
body limit is streamed over HTTP without a length and imported by the worker its commit
woke."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from healthledger.adapters.composition import build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_apple_health import ExportShape, write_export
from healthledger.adapters.settings import Settings

from tests.e2e.servers import running_server

SHAPE = ExportShape(first_day=date(2024, 10, 24), days=8, heart_every=1)


def chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as body:
        while chunk := body.read(64 * 1024):
            yield chunk


def ended(base: str, headers: dict[str, str], user_id: str, import_id: str) -> Any:
    """The import once it has ended (the server's worker runs it)."""
    deadline = time.monotonic() + 120
    while True:
        found = httpx.get(
            f"{base}/v2/user/{user_id}/import/apple_health/{import_id}", headers=headers
        ).json()
        if found["status"] in ("success", "failure"):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


def test_the_servers_worker_imports_an_upload_left_waiting_and_one_streamed_to_it(
    settings: Settings, tmp_path: Path
) -> None:
    export = tmp_path / "export.zip"
    write_export(export, SHAPE)
    limit = 64 * 1024  # the JSON body limit, which an upload is not held to
    assert export.stat().st_size > limit
    imports = tmp_path / "imports"
    # Uploaded while no server runs: recorded, its file kept, waiting for a worker.
    service = build_service(settings.model_copy(update={"import_dir": imports}))
    try:
        boot = service.bootstrap()
        assert boot is not None
        headers = {"x-service-api-key": boot.team_api_key.plain}
        with TestClient(create_team_api(service)) as api:
            user_id = api.post("/v2/user", json={"client_user_id": "e2e"}, headers=headers).json()[
                "user_id"
            ]
            waiting = api.post(
                f"/v2/user/{user_id}/import/apple_health",
                content=export.read_bytes(),
                headers={**headers, "content-type": "application/zip"},
            ).json()
        assert waiting["status"] == "received"
    finally:
        service.close()
    assert len(list(imports.glob("*.zip"))) == 1

    env = {"HEALTHLEDGER_IMPORT_DIR": str(imports), "HEALTHLEDGER_MAX_BODY_BYTES": str(limit)}
    with running_server(settings, tmp_path, env=env) as (base, _management, _link, _output):
        first = ended(base, headers, user_id, waiting["import_id"])
        assert first["status"] == "success", first
        assert first["counts"]["days_created"] > 8 * 15
        # The same export again, streamed without a length, over the JSON body limit.
        streamed = httpx.post(
            f"{base}/v2/user/{user_id}/import/apple_health",
            content=chunks(export),
            headers={**headers, "content-type": "application/zip"},
            timeout=60,
        )
        assert streamed.status_code == 202, streamed.text
        second = ended(base, headers, user_id, streamed.json()["import_id"])
        assert second["status"] == "success", second
        assert (second["counts"]["days_created"], second["counts"]["days_updated"]) == (0, 0)
        assert second["size_bytes"] == export.stat().st_size
        samples = httpx.get(
            f"{base}/v2/timeseries/{user_id}/heartrate",
            params={"start_date": "2024-10-28"},
            headers=headers,
        ).json()
        assert len(samples) == 24 * 60  # a sample a minute, a UTC day whole
    assert list(imports.glob("*.zip")) == []
