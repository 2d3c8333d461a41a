"""A sleep's stream and a workout's stream by their ids (issue 34, docs/data.md#sessions)
through both official clients (`vital` 2.1.569 and `junction-api-sdk` 2.0.0):
`sleep.get_stream_by_sleep_id` and `workouts.get_by_workout_id`, the ids taken from the
clients' own `sleep.get` and `workouts.get`, against the team API under uvicorn with only
base_url changed, each answer parsed by the client's models and held to what our API
answers over plain HTTP; another team's id and an unknown one are the clients' 404s. On
both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import junction
import junction.types as junction_types
import pytest
import vital
import vital.types as vital_types
from healthledger.adapters.composition import Service
from junction.core.api_error import ApiError as JunctionApiError
from vital.core.api_error import ApiError as VitalApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team

pytestmark = CLIENTS_PARSE_ANSWERS

UNKNOWN = "00000000-0000-4000-8000-000000000000"


@pytest.fixture(params=["vital", "junction"])
def client(request: pytest.FixtureRequest, base_url: str, team: Team) -> Any:
    """Each official client as customers construct it: the key and our base_url."""
    if request.param == "vital":
        return vital.Vital(api_key=team.key, base_url=base_url, timeout=60)
    return junction.Junction(api_key=team.key, base_url=base_url, timeout=60)


def test_a_sleeps_and_a_workouts_stream_by_their_ids_through_the_client(
    client: Any, base_url: str, team: Team, other_team: Team, service: Service
) -> None:
    types = vital_types if isinstance(client, vital.Vital) else junction_types
    user = client.user.create(client_user_id="streams-e2e").user_id
    client.link.connect_demo_provider(user_id=user, provider="oura")
    assert service.jobs.run_due_pulls() > 0
    today = datetime.now(UTC).date()
    start, end = str(today - timedelta(days=14)), str(today)

    sleeps = client.sleep.get(user, start_date=start, end_date=end).sleep
    assert sleeps
    stream = client.sleep.get_stream_by_sleep_id(str(sleeps[0].id))
    assert isinstance(stream, types.ClientFacingSleepStream)
    plain = httpx.get(
        f"{base_url}/v2/timeseries/sleep/{sleeps[0].id}/stream", headers=team.headers
    ).json()
    assert stream.heartrate and plain["hypnogram"]
    assert [s.value for s in stream.heartrate] == [s["value"] for s in plain["heartrate"]]
    assert [s.value for s in stream.hrv or []] == [s["value"] for s in plain["hrv"]]
    if isinstance(client, vital.Vital):
        assert [(s.start, s.end, s.value) for s in stream.hypnogram] == [
            (datetime.fromisoformat(s["start"]), datetime.fromisoformat(s["end"]), s["value"])
            for s in plain["hypnogram"]
        ]
    else:  # junction's model has no hypnogram: it keeps the member as received
        assert stream.model_extra["hypnogram"] == plain["hypnogram"]
    # Within the night the summary names.
    assert all(
        sleeps[0].bedtime_start <= s.timestamp <= sleeps[0].bedtime_stop for s in stream.heartrate
    )

    workouts = client.workouts.get(user, start_date=start, end_date=end).workouts
    assert workouts
    for workout in workouts:
        found = client.workouts.get_by_workout_id(str(workout.id))
        assert isinstance(found, types.ClientFacingStream)
        plain = httpx.get(
            f"{base_url}/v2/timeseries/workouts/{workout.id}/stream", headers=team.headers
        ).json()
        assert (found.time, found.heartrate) == (plain["time"], plain["heartrate"])
        assert all(
            workout.time_start.timestamp() <= t <= workout.time_end.timestamp()
            for t in found.time or []
        )

    # Another team's client, and an unknown id: the client's 404.
    other = type(client)(api_key=other_team.key, base_url=base_url, timeout=60)
    for call, session in (
        (other.sleep.get_stream_by_sleep_id, str(sleeps[0].id)),
        (other.workouts.get_by_workout_id, str(workouts[0].id)),
        (client.sleep.get_stream_by_sleep_id, UNKNOWN),
        (client.workouts.get_by_workout_id, UNKNOWN),
    ):
        with pytest.raises((VitalApiError, JunctionApiError)) as refused:
            call(session)
        assert isinstance(refused.value, VitalApiError | JunctionApiError)
        assert refused.value.status_code == 404
