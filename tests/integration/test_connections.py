"""Provider connections through the team API: demo connect, list, deregister, and what a
user's deletion does to them (deregistered at once, never restored by undo)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import connections, stored_events
from healthledger.domain.connections.connection import Connection
from healthledger.domain.context import CommandContext
from sqlalchemy import func, select

from tests.conftest import Team, create_user
from tests.stream_ids import stream_of_connection

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def connect(client: TestClient, team: Team, user_id: str, provider: str) -> int:
    response = client.post(
        "/v2/link/connect/demo",
        json={"user_id": user_id, "provider": provider},
        headers=team.headers,
    )
    return response.status_code


def providers(client: TestClient, team: Team, user_id: str) -> list[dict]:
    response = client.get(f"/v2/user/providers/{user_id}", headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()["providers"]


def test_a_demo_connection_is_listed_in_the_spec_shape(
    service: Service, client: TestClient, team: Team
) -> None:
    user = create_user(client, team, "c1")
    answer = client.post(
        "/v2/link/connect/demo",
        json={"user_id": user["user_id"], "provider": "oura"},
        headers=team.headers,
    )
    assert answer.status_code == 200
    assert answer.json() == {"success": True, "detail": "Connected a demo Oura device."}
    (item,) = providers(client, team, user["user_id"])
    assert set(item) == {
        "name", "slug", "logo", "status", "created_on", "resource_availability",
        "error_details", "external_user_id",
    }  # fmt: skip
    assert (item["slug"], item["name"], item["status"]) == ("oura", "Oura", "connected")
    assert item["error_details"] is None
    assert item["external_user_id"].startswith("demo-oura-")
    oura = service.catalog["oura"]
    assert set(item["resource_availability"]) == set(oura.supported_resources)
    sleep = item["resource_availability"]["sleep"]
    assert sleep["status"] == "available"
    assert set(sleep["scope_requirements"]) == {"user_granted", "user_denied"}
    assert set(sleep["scope_requirements"]["user_granted"]) == {"required", "optional"}

    resolved = client.get(f"/v2/user/{user['user_id']}", headers=team.headers).json()
    # `provider` for the official client; `source`, the spec's, its deprecated duplicate.
    described = {"logo": oura.logo, "name": "Oura", "slug": "oura"}
    assert resolved["connected_sources"] == [
        {"created_on": item["created_on"], "provider": described, "source": described}
    ]
    listed = client.get("/v2/user", headers=team.headers).json()["users"]
    assert listed[0]["connected_sources"] == resolved["connected_sources"]


def test_bad_connects_are_refused_and_change_nothing(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    user = create_user(client, team, "c2")
    assert connect(client, team, user["user_id"], "fitbit") == 200
    before = service.recorder.max_notification_id()
    assert connect(client, team, user["user_id"], "fitbit") == 409  # twice
    assert connect(client, team, user["user_id"], "garmin") == 422  # no demo device
    assert connect(client, team, user["user_id"], "nokia") == 422  # unknown slug
    assert connect(client, other_team, user["user_id"], "oura") == 404  # another team's user
    missing = "00000000-0000-0000-0000-000000000000"
    assert connect(client, team, missing, "oura") == 404
    assert service.recorder.max_notification_id() == before


def test_deregister_one_connection_and_connect_again(
    service: Service, client: TestClient, team: Team
) -> None:
    user = create_user(client, team, "c3")
    uid = user["user_id"]
    assert connect(client, team, uid, "oura") == 200
    assert connect(client, team, uid, "withings") == 200
    gone = client.delete(f"/v2/user/{uid}/oura", headers=team.headers)
    assert (gone.status_code, gone.json()) == (200, {"success": True})
    assert [p["slug"] for p in providers(client, team, uid)] == ["withings"]
    assert client.delete(f"/v2/user/{uid}/oura", headers=team.headers).status_code == 404
    assert client.delete(f"/v2/user/{uid}/garmin", headers=team.headers).status_code == 404
    unknown = client.delete(f"/v2/user/{uid}/nokia", headers=team.headers)
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["path", "provider"]
    assert connect(client, team, uid, "oura") == 200
    assert sorted(p["slug"] for p in providers(client, team, uid)) == ["oura", "withings"]
    history = [
        type(e).__name__
        for e in service.ledger.events.get(stream_of_connection(service, uid, "oura"))
    ]
    assert history == ["Created", "Deregistered", "Reconnected"]


def test_deleting_a_user_deregisters_every_connection_at_once_and_undo_restores_none(
    service: Service, client: TestClient, team: Team
) -> None:
    user = create_user(client, team, "c4")
    uid = user["user_id"]
    for provider in ("oura", "fitbit", "freestyle_libre"):
        assert connect(client, team, uid, provider) == 200
    before = service.recorder.max_notification_id() or 0
    assert client.delete(f"/v2/user/{uid}", headers=team.headers).status_code == 200
    # One transaction: the deletion, the claim's release and the three deregistrations.
    written = service.recorder.select_notifications(before + 1, 100)
    assert [n.topic for n in written].count("healthledger:Connection.Deregistered.v1") == 3
    assert len(written) == 5
    reasons = {
        service.ledger.mapper.to_domain_event(n).reason  # type: ignore[attr-defined]
        for n in written
        if n.topic == "healthledger:Connection.Deregistered.v1"
    }
    assert reasons == {"user_deleted"}
    with service.db.read() as conn:
        live = conn.execute(
            select(func.count())
            .select_from(connections)
            .where(connections.c.status != "deregistered")
        ).scalar_one()
    assert live == 0
    assert client.get(f"/v2/user/providers/{uid}", headers=team.headers).status_code == 404

    undo = client.post("/v2/user/undo_delete", params={"user_id": uid}, headers=team.headers)
    assert undo.status_code == 200
    assert providers(client, team, uid) == []
    assert client.get(f"/v2/user/{uid}", headers=team.headers).json()["connected_sources"] == []


def test_erasure_removes_connections_and_their_provider_ids(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    with freeze_time(T0):
        user = service.users.create_user(ctx, team.team_id, client_user_id="c5")
        service.connections.connect_demo(ctx, team.team_id, user.id, "oura", ["sleep"])
        service.users.delete_user(ctx, team.team_id, user.id)
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 1
    with service.db.read() as conn:
        assert (
            conn.execute(
                select(func.count())
                .select_from(connections)
                .where(connections.c.user_id == user.id)
            ).scalar_one()
            == 0
        )
        states = conn.execute(
            select(stored_events.c.state).where(
                stored_events.c.originator_id == stream_of_connection(service, user.id, "oura")
            )
        ).scalars()
        raw = b"".join(bytes(s) for s in states)
    assert b"demo-oura" not in raw  # the provider's id for the user was sealed


def test_the_sweep_deregisters_a_connection_that_raced_the_deletion(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    user = service.users.create_user(ctx, team.team_id, client_user_id="c6")
    service.users.delete_user(ctx, team.team_id, user.id)
    # A connect that passed its "user is live" check just before the deletion commits.
    late = Connection.connect_new(
        ctx,
        datetime.now(UTC),
        id=stream_of_connection(service, user.id, "oura"),
        user_id=user.id,
        team_id=team.team_id,
        provider="oura",
        sealed_external_user_id=None,
        resource_availability={},
        demo=True,
    )
    service.ledger.save(late)
    assert service.connection_queries.gone_users_with_live_connections() == [user.id]
    service.jobs.sweep_erasures()
    assert service.connection_queries.gone_users_with_live_connections() == []
    reloaded = service.ledger.find(late.id)
    assert isinstance(reloaded, Connection) and not reloaded.is_live
