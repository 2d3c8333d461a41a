"""Calls of the team API that many tests make on their way to what they check: a demo
connection, a user's providers, a provider's historical pulls. Each asserts the call
succeeded and returns its answer's JSON."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import Team


def connect(
    client: TestClient, team: Team, user_id: str, provider: str, **extra: Any
) -> dict[str, Any]:
    response = client.post(
        "/v2/link/connect/demo",
        json={"user_id": user_id, "provider": provider, **extra},
        headers=team.headers,
    )
    assert response.status_code == 200, response.text
    return response.json()


def provider_status(client: TestClient, team: Team, user_id: str) -> dict[str, Any]:
    response = client.get(f"/v2/user/providers/{user_id}", headers=team.headers)
    assert response.status_code == 200
    (item,) = response.json()["providers"]
    return item


def pulls_of(client: TestClient, team: Team, user_id: str, provider: str) -> dict[str, Any]:
    response = client.get(
        "/v2/introspect/historical_pull",
        params={"user_id": user_id, "provider": provider},
        headers=team.headers,
    )
    assert response.status_code == 200, response.text
    (item,) = response.json()["data"]
    return item["provider"][provider]
