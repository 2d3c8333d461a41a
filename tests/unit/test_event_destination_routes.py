"""An event destination's routing table (issue 35): the longest matching prefix wins, an
event type no prefix matches is not published there, and the table's rules."""

from __future__ import annotations

import pytest
from healthledger.domain.webhooks.event_destinations import (
    MAX_ROUTES,
    NATS,
    RABBITMQ,
    Route,
    route_for,
    routes_problem,
    settings_problem,
)

pytestmark = pytest.mark.unit

TABLE = [
    Route("daily.data.", "daily"),
    Route("daily.data.sleep", "sleep"),
    Route("daily.data.sleep_cycle", "cycles"),
    Route("labtest.", "labs"),
]


@pytest.mark.parametrize(
    ("event_type", "target"),
    [
        ("daily.data.activity.created", "daily"),
        ("daily.data.sleep.created", "sleep"),
        ("daily.data.sleep_cycle.updated", "cycles"),
        ("labtest.result.critical", "labs"),
        ("provider.connection.created", None),
        ("historical.data.sleep.created", None),
    ],
)
def test_the_longest_matching_prefix_wins(event_type: str, target: str | None) -> None:
    assert route_for(TABLE, event_type) == target
    assert route_for(list(reversed(TABLE)), event_type) == target  # whatever the order


def test_an_empty_prefix_catches_what_no_other_route_takes() -> None:
    table = [*TABLE, Route("", "everything")]
    assert route_for(table, "provider.connection.created") == "everything"
    assert route_for(table, "daily.data.sleep.created") == "sleep"


def test_the_table_rules() -> None:
    assert routes_problem(RABBITMQ, TABLE) is None
    assert routes_problem(NATS, TABLE) is None
    assert routes_problem(RABBITMQ, []) is not None
    assert routes_problem(RABBITMQ, [Route("a", "x")] * 2) is not None  # a prefix twice
    many = [Route(f"user.{i}", "x") for i in range(MAX_ROUTES + 1)]
    assert routes_problem(RABBITMQ, many) is not None
    for subject in ("a.*", "a.>", "a..b", "a b", ".a", ""):
        assert routes_problem(NATS, [Route("user.", subject)]) is not None, subject
    assert routes_problem(RABBITMQ, [Route("user.", "a b")]) is not None


def test_the_connection_settings_of_each_kind() -> None:
    assert settings_problem(RABBITMQ, {"host": "mq.example.com", "exchange": "e"}) is None
    assert settings_problem(NATS, {"host": "nats.example.com", "stream": "S"}) is None
    assert settings_problem("kafka", {"host": "h"}) == (
        "kind",
        "kind must be one of rabbitmq, nats.",
    )
    assert settings_problem(RABBITMQ, {"host": "h"}) is not None  # no exchange
    assert settings_problem(NATS, {"host": "h", "exchange": "e"}) is not None
    assert settings_problem(RABBITMQ, {"host": "h", "exchange": "e", "port": 0}) is not None
    assert settings_problem(RABBITMQ, {"host": "h", "exchange": "e", "password": "p"}) is not None
