"""Order transactions through the team API, on both databases: each order is its own
transaction (no re-draws here), under the order's id; its read, results and result report
are the order's, now and `as_of` (the report refuses `as_of` as the order's does);
another team's, an unknown or a malformed id are refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

from fastapi.testclient import TestClient
from freezegun import freeze_time

from tests.conftest import Team
from tests.integration import test_deletion_report as pdf_tools
from tests.integration.test_lab_documents import text_of
from tests.integration.test_orders import T0, complete, placed, step
from tests.integration.test_orders import settings as orders_settings
from tests.integration.test_orders import team as orders_team
from tests.integration.test_orders import user as orders_user

# The orders' fixtures (no lab failure or cancellation; a user with demographics).
settings = orders_settings
team = orders_team
user = orders_user
tools = pdf_tools.tools


def get(client: TestClient, team: Team, path: str, **params: Any) -> Any:
    return client.get(f"/v3/order_transaction/{path}", params=params, headers=team.headers)


def test_an_order_is_its_own_transaction(client: TestClient, team: Team, user: str) -> None:
    recorded: list[tuple[datetime, dict[str, Any]]] = []
    with freeze_time(T0) as frozen:
        order = placed(client, team, user)["id"]
        first = get(client, team, order)
        assert first.status_code == 200, first.text
        answer = first.json()
        assert answer["id"] == order and answer["team_id"] == str(team.team_id)
        assert answer["status"] == "active"
        (summary,) = answer["orders"]
        assert summary["id"] == order and summary["origin"] == "initial"
        assert summary["parent_id"] is None and summary["last_status"] == "ordered"
        recorded.append((T0, answer))
        frozen.tick(timedelta(hours=2))
        step(client, team, order)
        now = datetime.now(UTC)
        moved = get(client, team, order).json()
        the_order = client.get(f"/v3/order/{order}", headers=team.headers).json()
        low_level = the_order["detailed_status"].rsplit(".", 1)[-1]
        assert low_level != "ordered" and moved["orders"][0]["last_status"] == low_level
        assert moved["orders"][0]["updated_at"] == the_order["updated_at"]
        assert moved["orders"][0]["last_status_created_at"].startswith(now.isoformat()[:16])
        recorded.append((now, moved))
        # No results yet: the order's 409, for the results and their report.
        assert get(client, team, f"{order}/result").status_code == 409
        assert get(client, team, f"{order}/result/pdf").status_code == 409
        frozen.tick(timedelta(hours=1))
        complete(client, team, order, "abnormal")
        done = get(client, team, order).json()
        assert done["status"] == "completed"
        assert done["orders"][0]["last_status"] == "completed"
        results = get(client, team, f"{order}/result")
        assert results.status_code == 200, results.text
        assert (
            results.json() == client.get(f"/v3/order/{order}/result", headers=team.headers).json()
        )
        assert results.json()["metadata"]["interpretation"] == "abnormal"
        frozen.tick(timedelta(hours=1))
        # As it was: the read as of each instant, the results as of before they came.
        for instant, then in recorded:
            past = get(client, team, order, as_of=instant.isoformat())
            assert past.status_code == 200 and past.json() == then, instant
        early = get(client, team, f"{order}/result", as_of=recorded[-1][0].isoformat())
        assert early.status_code == 409
        before = get(client, team, order, as_of=(T0 - timedelta(seconds=1)).isoformat())
        assert before.status_code == 404


def test_the_transactions_report_is_the_orders(
    client: TestClient, team: Team, user: str, tools: pdf_tools.Tools, tmp_path: Path
) -> None:
    with freeze_time(T0) as frozen:
        order = placed(client, team, user)["id"]
        complete(client, team, order)
        frozen.tick(timedelta(hours=1))
        report = get(client, team, f"{order}/result/pdf")
        assert report.status_code == 200, report.text
        assert report.headers["content-type"] == "application/pdf"
        theirs = client.get(f"/v3/order/{order}/result/pdf", headers=team.headers)
        refused = get(client, team, f"{order}/result/pdf", as_of=T0.isoformat())
    ours = text_of(report.content, tools, tmp_path, "transaction")
    assert ours == text_of(theirs.content, tools, tmp_path, "order")
    assert "Ada Lovelace" in ours or "Lovelace" in ours
    assert refused.status_code == 422


def test_a_cancelled_order_is_a_cancelled_transaction(
    client: TestClient, team: Team, user: str
) -> None:
    with freeze_time(T0):
        order = placed(client, team, user)["id"]
        cancelled = client.post(f"/v3/order/{order}/cancel", headers=team.headers)
        assert cancelled.status_code == 200
    answer = get(client, team, order).json()
    assert answer["status"] == "cancelled" and answer["orders"][0]["last_status"] == "cancelled"


def test_unknown_other_teams_and_malformed_transactions_are_refused(
    client: TestClient, team: Team, other_team: Team, user: str
) -> None:
    with freeze_time(T0):
        order = placed(client, team, user)["id"]
    for path in ("", "/result", "/result/pdf"):
        assert get(client, other_team, f"{order}{path}").status_code == 404, path
        assert get(client, team, f"{uuid4()}{path}").status_code == 404, path
        malformed = get(client, team, f"not-a-uuid{path}")
        assert malformed.status_code in (404, 422), path
        assert "detail" in malformed.json()
        assert client.get(f"/v3/order_transaction/{order}{path}").status_code == 401
