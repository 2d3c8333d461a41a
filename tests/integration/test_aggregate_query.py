"""POST /aggregate/v1/user/{user_id}/query (endpoint 10, closed beta) through the ASGI app,
on SQLite and PostgreSQL: answers held to a plain-Python computation over the store's
`read` on many random queries (seeded), the Parquet tarball, the provider priority, the
summary tables, the closed-beta switch, content negotiation, and bad or hostile input
(a 4xx, never a 500; no text of a caller reaches a database as SQL)."""

from __future__ import annotations

import io
import math
import random
import statistics
import tarfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.answers import health_queries
from healthledger.adapters.answers.health_queries import PARQUET_MEDIA_TYPE, SOURCES
from healthledger.adapters.composition import Service
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.context import CommandContext
from healthledger.domain.health_queries.tables import SERIES_FIELDS, SUMMARY_TABLES

from tests.conftest import Team, create_user

# freezegun reads every loaded module's attributes, which imports the official client's
# lazy models (loaded by another test of the session) with its fake datetime: they hold
# no clock of ours (as in tests/e2e/test_official_client.py).

TODAY = datetime.now(UTC).date()
HEART = {"timeseries": "heartrate", "field": "value"}
DAILY = {"date_trunc": {"value": 1, "unit": "day"}, "arg": {"index": "timeseries"}}
CTX = CommandContext.system("test:aggregate")


def enable(service: Service, team: Team) -> Team:
    service.teams.set_feature(CTX, team.team_id, "aggregate_query", True)
    return team


@pytest.fixture
def beta(service: Service, team: Team) -> Team:
    return enable(service, team)


@pytest.fixture
def user_id(client: TestClient, beta: Team) -> str:
    return str(create_user(client, beta, "aggregate-1")["user_id"])


def post(
    client: TestClient,
    team: Team,
    user_id: str,
    queries: list[dict[str, Any]],
    *,
    anchor: date = TODAY,
    past: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    accept: str | None = None,
) -> Any:
    body: dict[str, Any] = {
        "timeframe": {
            "type": "relative",
            "anchor": anchor.isoformat(),
            "past": past or {"value": 14, "unit": "day"},
        },
        "queries": queries,
    }
    if config is not None:
        body["config"] = config
    headers = {**team.headers, **({"accept": accept} if accept is not None else {})}
    return client.post(f"/aggregate/v1/user/{user_id}/query", json=body, headers=headers)


def tables(response: Any) -> list[dict[str, list[Any]]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return [result["table"] for result in response.json()["results"]]


def stamp(moment: datetime, offset_hours: int = 0) -> str:
    """An ISO 8601 text of the instant, written at a UTC offset."""
    return moment.astimezone(timezone(timedelta(hours=offset_hours))).isoformat()


def month_before(moment: datetime) -> datetime:
    """The same day a month earlier (the month's last day if it has no such day)."""
    year, month = (moment.year, moment.month - 1) if moment.month > 1 else (moment.year - 1, 12)
    for day in range(moment.day, 0, -1):
        try:
            return moment.replace(year=year, month=month, day=day)
        except ValueError:
            continue
    raise AssertionError("unreachable")


# -- the reference: the same answers in plain Python, from the store's read ----------------


@dataclass(frozen=True)
class Sample:
    at: datetime
    provider: str
    value: float
    type: str | None
    timezone_offset: int


def stored_samples(service: Service, user_id: str, providers: list[str]) -> list[Sample]:
    found = []
    for provider in providers:
        days = service.health_data.read(
            uuid.UUID(user_id), provider, "heartrate", date(2000, 1, 1), TODAY
        )
        for samples in days.values():
            for sample in samples:
                written = datetime.fromisoformat(sample["timestamp"])
                offset = written.utcoffset()
                assert offset is not None
                found.append(
                    Sample(
                        written.astimezone(UTC),
                        provider,
                        float(sample["value"]),
                        sample.get("type"),
                        int(offset.total_seconds()),
                    )
                )
    return found


ORIGIN = datetime(2000, 1, 3, tzinfo=UTC)
MINUTES = {"minute": 1, "hour": 60, "day": 1440, "week": 10080}


def bucket(moment: datetime, value: int, unit: str) -> datetime:
    if unit in MINUTES:
        width = timedelta(minutes=value * MINUTES[unit])
        return ORIGIN + ((moment - ORIGIN) // width) * width
    months = value * (12 if unit == "year" else 1)
    index = (moment.year - 2000) * 12 + moment.month - 1
    start = (index // months) * months
    return datetime(2000 + start // 12, start % 12 + 1, 1, tzinfo=UTC)


# A where as (its text, its predicate over a sample: True, False or None for unknown).
Where = tuple[str, Callable[[Sample], bool | None]]


def random_comparison(rng: random.Random, window_start: datetime) -> Where:
    kind = rng.choice(["value", "value", "type", "provider", "time", "offset", "literal"])
    if kind == "value":
        op = rng.choice(["=", "!=", "<", "<=", ">", ">="])
        limit = rng.choice([rng.randint(50, 170), round(rng.uniform(50, 170), 1)])
        compare = {
            "=": lambda a, b: a == b,
            "!=": lambda a, b: a != b,
            "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b,
        }[op]
        if rng.random() < 0.5:
            return f"value {op} {limit}", lambda s: compare(s.value, limit)
        flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        return f"{limit} {flipped} value", lambda s: compare(s.value, limit)
    if kind == "type":
        wanted = rng.choice(["resting", "active"])
        if rng.random() < 0.5:
            return f"type = '{wanted}'", lambda s: None if s.type is None else s.type == wanted
        return f"type != '{wanted}'", lambda s: None if s.type is None else s.type != wanted
    if kind == "provider":
        wanted = rng.choice(["oura", "fitbit"])
        return f"source_provider = '{wanted}'", lambda s: s.provider == wanted
    if kind == "time":
        since = window_start + timedelta(hours=rng.randint(0, 200))
        return f"timestamp >= '{since.isoformat()}'", lambda s: s.at >= since
    if kind == "offset":
        return "timezone_offset = 7200", lambda s: s.timezone_offset == 7200
    return "1 = 1", lambda s: True


def random_where(rng: random.Random, window_start: datetime, depth: int = 0) -> Where:
    roll = rng.random()
    if depth >= 2 or roll < 0.4:
        return random_comparison(rng, window_start)
    if roll < 0.55:
        text, negated = random_where(rng, window_start, depth + 1)
        return f"NOT ({text})", lambda s: None if (r := negated(s)) is None else not r
    parts = [random_where(rng, window_start, depth + 1) for _ in range(rng.randint(2, 3))]
    joiner = rng.choice(["AND", "OR"])
    text = f" {joiner} ".join(f"({t})" for t, _ in parts)

    def test(s: Sample) -> bool | None:
        results = [t(s) for _, t in parts]
        if joiner == "AND":
            return False if False in results else (None if None in results else True)
        return True if True in results else (None if None in results else False)

    return text, test


FUNCTIONS = ["min", "max", "mean", "median", "stddev", "count", "sum", "oldest", "newest"]


def aggregate(func: str, column: list[tuple[datetime, Any]]) -> Any:
    values = [v for _, v in column if v is not None]
    if func == "count":
        return len(values)
    if not values:
        return None
    if func == "oldest":
        return min((at, v) for at, v in column if v is not None)[1]
    if func == "newest":
        return max((at, v) for at, v in column if v is not None)[1]
    if func == "stddev":
        return statistics.stdev(values) if len(values) > 1 else None
    functions: dict[str, Callable[[list[Any]], Any]] = {
        "min": min,
        "max": max,
        "mean": statistics.fmean,
        "median": statistics.median,
        "sum": math.fsum,
    }
    return functions[func](values)


@dataclass
class RandomQuery:
    body: dict[str, Any]
    where: Where | None
    keys: list[tuple[str, Any]]  # (kind, parameter) per group_by item
    selects: list[tuple[str, str, str]]  # (output name, func, column)


def random_query(rng: random.Random, window_start: datetime) -> RandomQuery:
    group_by: list[dict[str, Any]] = []
    keys: list[tuple[str, Any]] = []
    if rng.random() < 0.8:
        value, unit = rng.randint(1, 3), rng.choice(["hour", "day", "day", "week", "month"])
        group_by.append(
            {"date_trunc": {"value": value, "unit": unit}, "arg": {"index": "timeseries"}}
        )
        keys.append(("trunc", (value, unit)))
    if rng.random() < 0.3:
        part = rng.choice(["hour", "weekday", "day"])
        group_by.append({"date_part": part, "arg": {"index": "timeseries"}})
        keys.append(("part", part))
    if rng.random() < 0.3:
        column = rng.choice(["type", "source_provider"])
        group_by.append({"timeseries": "heartrate", "field": column})
        keys.append(("column", column))
    rng.shuffle(group_by_order := list(range(len(group_by))))
    group_by = [group_by[i] for i in group_by_order]
    keys = [keys[i] for i in group_by_order]
    selects: list[tuple[str, str, str]] = []
    select: list[dict[str, Any]] = []
    if keys:
        select.append({"group_key": "*"})
    taken: dict[str, int] = {}
    for func in rng.sample(FUNCTIONS, rng.randint(1, 4)):
        column = "type" if func in ("count", "oldest", "newest") and rng.random() < 0.3 else "value"
        select.append({"func": func, "arg": {"timeseries": "heartrate", "field": column}})
        count = taken.get(func, 0)
        taken[func] = count + 1
        selects.append((func if count == 0 else f"{func}.{count}", func, column))
    where = random_where(rng, window_start) if rng.random() < 0.7 else None
    body: dict[str, Any] = {"select": select, "group_by": group_by or None}
    if where is not None:
        body["where"] = where[0]
    return RandomQuery(body, where, keys, selects)


def expected_table(
    query: RandomQuery,
    samples: list[Sample],
    start: datetime,
    end: datetime,
    ranks: dict[str, int],
) -> dict[str, list[Any]]:
    rows = [s for s in samples if start <= s.at < end]
    if query.where is not None:
        rows = [s for s in rows if query.where[1](s) is True]

    def key_of(s: Sample) -> tuple[Any, ...]:
        found: list[Any] = []
        for kind, parameter in query.keys:
            if kind == "trunc":
                found.append(bucket(s.at, *parameter))
            elif kind == "part":
                found.append(
                    {"hour": s.at.hour, "weekday": s.at.isoweekday(), "day": s.at.day}[parameter]
                )
            else:
                found.append(s.type if parameter == "type" else s.provider)
        return tuple(found)

    if ("column", "source_provider") not in query.keys:
        # The first provider by rank wins each bucket: the date_trunc's, else the day.
        trunc = next((p for k, p in query.keys if k == "trunc"), None)

        def time_bucket(s: Sample) -> Any:
            return bucket(s.at, *trunc) if trunc else s.at.date()

        best: dict[Any, int] = {}
        for s in rows:
            best[time_bucket(s)] = min(best.get(time_bucket(s), 99), ranks[s.provider])
        rows = [s for s in rows if ranks[s.provider] == best[time_bucket(s)]]

    groups: dict[tuple[Any, ...], list[Sample]] = {}
    for s in rows:
        groups.setdefault(key_of(s), []).append(s)
    if not query.keys:
        groups = {(): rows}
    ordered = sorted(groups, key=lambda k: tuple((v is None, v if v is not None else 0) for v in k))
    table: dict[str, list[Any]] = {f"group_key.{n}": [] for n in range(len(query.keys))}
    for name, _, _ in query.selects:
        table[name] = []
    for group_key in ordered:
        for n, value in enumerate(group_key):
            table[f"group_key.{n}"].append(
                value.isoformat() if isinstance(value, datetime) else value
            )
        for name, func, column in query.selects:
            values = [(s.at, s.value if column == "value" else s.type) for s in groups[group_key]]
            table[name].append(aggregate(func, values))
    return table


def assert_same(got: dict[str, list[Any]], expected: dict[str, list[Any]], what: str) -> None:
    assert list(got) == list(expected), what
    for name in expected:
        assert len(got[name]) == len(expected[name]), (what, name)
        for ours, theirs in zip(got[name], expected[name], strict=True):
            if isinstance(theirs, float):
                assert ours is not None and math.isclose(
                    ours, theirs, rel_tol=1e-9, abs_tol=1e-9
                ), (what, name, ours, theirs)
            else:
                assert ours == theirs, (what, name, ours, theirs)


def random_history(rng: random.Random, first: date, days: int) -> dict[date, list[dict[str, Any]]]:
    """Heart rate at random minutes (distinct instants), some written at +02:00, some
    classified, int and float values."""
    history: dict[date, list[dict[str, Any]]] = {}
    for n in range(days):
        day = first + timedelta(days=n)
        minutes = sorted(rng.sample(range(1440), rng.randint(15, 60)))
        samples = []
        for minute in minutes:
            moment = datetime.combine(day, time(0), UTC) + timedelta(minutes=minute)
            value: float = (
                rng.randint(40, 180) if rng.random() < 0.5 else round(rng.uniform(40, 180), 2)
            )
            sample: dict[str, Any] = {
                "timestamp": stamp(moment, 2 if rng.random() < 0.2 else 0),
                "value": value,
                "unit": "bpm",
            }
            if rng.random() < 0.6:
                sample["type"] = rng.choice(["resting", "active"])
            samples.append(sample)
        history[day] = samples
    return history


def test_random_queries_equal_a_plain_computation_over_the_stored_samples(
    service: Service, client: TestClient, beta: Team, user_id: str
) -> None:
    rng = random.Random(18)
    first = TODAY - timedelta(days=40)
    # Two providers over overlapping days: the priority decides per bucket.
    service.health_data.store(
        uuid.UUID(user_id), "oura", {"heartrate": random_history(rng, first, 41)}
    )
    service.health_data.store(
        uuid.UUID(user_id),
        "fitbit",
        {"heartrate": random_history(rng, first + timedelta(days=10), 31)},
    )
    samples = stored_samples(service, user_id, ["oura", "fitbit"])
    catalog = list(service.catalog)
    checked = 0
    for _ in range(8):
        anchor = TODAY - timedelta(days=rng.randint(0, 5))
        past: dict[str, Any] = rng.choice(
            [
                {"value": rng.randint(1, 40), "unit": "day"},
                {"value": rng.randint(12, 600), "unit": "hour"},
                {"value": rng.randint(1, 5), "unit": "week"},
                {"value": 1, "unit": "month"},
            ]
        )
        end = datetime.combine(anchor + timedelta(days=1), time(0), UTC)
        if past["unit"] == "month":
            start = month_before(end)
        else:
            start = end - timedelta(**{f"{past['unit']}s": past["value"]})
        overrides = rng.choice([None, ["fitbit"], ["fitbit", "oura"], ["withings", "oura"]])
        ranks = {slug: n for n, slug in enumerate(dict.fromkeys([*(overrides or []), *catalog]))}
        queries = [random_query(rng, start) for _ in range(rng.randint(1, 10))]
        response = post(
            client,
            beta,
            user_id,
            [q.body for q in queries],
            anchor=anchor,
            past=past,
            config={"provider_priority_overrides": overrides} if overrides else None,
        )
        for number, (query, got) in enumerate(zip(queries, tables(response), strict=True)):
            expected = expected_table(query, samples, start, end, ranks)
            assert_same(got, expected, f"query {number}: {query.body}")
            checked += 1
    assert checked >= 30


# -- Parquet ------------------------------------------------------------------------------


def parquet_files(response: Any) -> dict[str, pa.Table]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == PARQUET_MEDIA_TYPE
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as tar:
        return {
            member.name: pq.read_table(io.BytesIO(tar.extractfile(member).read()))  # type: ignore[union-attr]
            for member in tar.getmembers()
        }


def test_the_parquet_tarball_holds_one_typed_file_per_query_equal_to_the_json(
    service: Service, client: TestClient, beta: Team, user_id: str
) -> None:
    store_demo(service, user_id, "oura", ["heartrate", "sleep"], days=6)
    queries: list[dict[str, Any]] = [
        {
            "select": [
                {"group_key": 0},
                {"func": "mean", "arg": HEART},
                {"func": "count", "arg": HEART},
            ],
            "group_by": [DAILY],
        },
        {
            "select": [
                {"index": "sleep"},
                {"sleep": "duration_second"},
                {"sleep": "session_end"},
                {"sleep": "source_provider"},
            ]
        },
        {"select": [{"func": "max", "arg": HEART}], "where": "value > 1000"},
    ]
    files = parquet_files(post(client, beta, user_id, queries, accept=PARQUET_MEDIA_TYPE))
    assert sorted(files) == ["0.parquet", "1.parquet", "2.parquet"]
    daily = files["0.parquet"]
    assert daily.schema.field("group_key.0").type == pa.timestamp("us", tz="UTC")
    assert daily.schema.field("mean").type == pa.float64()
    assert daily.schema.field("count").type == pa.int64()
    sleep = files["1.parquet"]
    assert sleep.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert sleep.schema.field("duration_second").type == pa.int64()
    assert sleep.schema.field("source_provider").type == pa.string()
    assert files["2.parquet"].to_pylist() == [{"max": None}]
    json_tables = tables(post(client, beta, user_id, queries))
    for number, table in enumerate(json_tables):
        parquet = files[f"{number}.parquet"].to_pydict()
        assert list(parquet) == list(table)
        for name, values in table.items():
            assert [
                v.isoformat() if isinstance(v, datetime) else v for v in parquet[name]
            ] == values
    assert len(json_tables[0]["mean"]) >= 5


# -- the summary tables, from what the pulls stored -----------------------------------------


def store_demo(
    service: Service, user_id: str, provider: str, resources: list[str], days: int
) -> None:
    now = datetime.now(UTC)
    target = {r: PullTarget(uuid.UUID(user_id), provider, r, {}) for r in resources}
    data = {
        r: DemoProvider().fetch(target[r], TODAY - timedelta(days=days), TODAY, now, 1)
        for r in resources
    }
    service.health_data.store(uuid.UUID(user_id), provider, data)


def test_summary_tables_compute_their_columns_from_the_stored_summaries(
    service: Service, client: TestClient, beta: Team, user_id: str
) -> None:
    store_demo(service, user_id, "oura", ["sleep", "activity", "workouts", "meal", "body"], days=9)
    read = {
        resource: service.health_data.read(
            uuid.UUID(user_id), "oura", resource, TODAY - timedelta(days=20), TODAY
        )
        for resource in ("sleep", "activity", "workouts", "meal", "body")
    }
    end = datetime.combine(TODAY + timedelta(days=1), time(0), UTC)
    start = end - timedelta(days=7)
    sleep, activity, workouts, meals, body = tables(
        post(
            client,
            beta,
            user_id,
            [
                {
                    "select": [
                        {"sleep": "session_start"},
                        {"sleep": "duration_second"},
                        {"sleep": "hrv_mean_rmssd"},
                        {"sleep": "stage_deep_second"},
                        {"sleep": "type"},
                    ]
                },
                {
                    "select": [
                        {"activity": "date"},
                        {"activity": "steps"},
                        {"activity": "heart_rate_resting"},
                        {"activity": "intensity_high_second"},
                    ]
                },
                {
                    "select": [
                        {"workout": "sport_slug"},
                        {"workout": "sport_name"},
                        {"workout": "duration_active_second"},
                        {"workout": "heart_rate_maximum"},
                    ]
                },
                {
                    "select": [
                        {"group_key": 0},
                        {"func": "sum", "arg": {"meal": "calories"}},
                        {"func": "count", "arg": {"meal": "total_fat_gram"}},
                    ],
                    "group_by": [{"meal": "name"}],
                },
                {
                    "select": [
                        {"func": "mean", "arg": {"body": "weight_kilogram"}},
                        {"func": "newest", "arg": {"body": "fat_mass_percentage"}},
                    ]
                },
            ],
            past={"value": 7, "unit": "day"},
        )
    )
    nights = sorted(
        (datetime.fromisoformat(s["bedtime_start"]), s)
        for s in read["sleep"].values()
        if start <= datetime.fromisoformat(s["bedtime_start"]) < end
    )
    assert sleep == {
        "session_start": [at.isoformat() for at, _ in nights],
        "duration_second": [s["duration"] for _, s in nights],
        "hrv_mean_rmssd": [s["average_hrv"] for _, s in nights],
        "stage_deep_second": [s["deep"] for _, s in nights],
        "type": ["long_sleep"] * len(nights),
    }
    assert nights
    days = sorted((d, a) for d, a in read["activity"].items() if start.date() <= d)
    assert activity == {
        "date": [d.isoformat() for d, _ in days],
        "steps": [a["steps"] for _, a in days],
        "heart_rate_resting": [float(a["heart_rate"]["resting_bpm"]) for _, a in days],
        "intensity_high_second": [a["high"] * 60 for _, a in days],
    }
    sessions = sorted(
        (datetime.fromisoformat(w["time_start"]), w)
        for day in read["workouts"].values()
        for w in day
        if start <= datetime.fromisoformat(w["time_start"]) < end
    )
    assert workouts == {
        "sport_slug": [w["sport"] for _, w in sessions],
        "sport_name": [w["sport"].replace("_", " ").capitalize() for _, w in sessions],
        "duration_active_second": [
            int((datetime.fromisoformat(w["time_end"]) - at).total_seconds()) for at, w in sessions
        ],
        "heart_rate_maximum": [float(w["max_hr"]) for _, w in sessions],
    }
    eaten: dict[str, list[dict[str, Any]]] = {}
    for day in read["meal"].values():
        for meal in day:
            if start <= datetime.fromisoformat(meal["timestamp"]) < end:
                eaten.setdefault(meal["name"], []).append(meal)
    assert meals == {
        "group_key.0": sorted(eaten),
        "sum": [float(sum(m["energy"]["value"] for m in eaten[n])) for n in sorted(eaten)],
        "count": [len(eaten[n]) for n in sorted(eaten)],
    }
    weighed = sorted((d, b) for d, b in read["body"].items() if start.date() <= d)
    if weighed:
        assert body["mean"][0] == pytest.approx(statistics.fmean(b["weight"] for _, b in weighed))
        assert body["newest"] == [weighed[-1][1]["fat"]]
    else:
        assert body == {"mean": [None], "newest": [None]}


def test_interval_and_blood_pressure_samples(
    service: Service, client: TestClient, beta: Team, user_id: str
) -> None:
    moment = datetime.combine(TODAY - timedelta(days=1), time(9), UTC)
    service.health_data.store(
        uuid.UUID(user_id),
        "withings",
        {
            "steps": {
                moment.date(): [
                    {
                        "timestamp": stamp(moment),
                        "start": stamp(moment),
                        "end": stamp(moment + timedelta(minutes=30)),
                        "value": 800,
                        "unit": "count",
                    },
                    {
                        "timestamp": stamp(moment + timedelta(hours=1), 2),
                        "start": stamp(moment + timedelta(hours=1), 2),
                        "end": stamp(moment + timedelta(hours=2), 2),
                        "value": 1200,
                        "unit": "count",
                    },
                ]
            },
            "blood_pressure": {
                moment.date(): [
                    {"timestamp": stamp(moment), "systolic": 121, "diastolic": 79, "unit": "mmHg"},
                    {
                        "timestamp": stamp(moment + timedelta(hours=3)),
                        "systolic": 131,
                        "diastolic": 85,
                        "unit": "mmHg",
                    },
                ]
            },
        },
    )
    steps, pressure = tables(
        post(
            client,
            beta,
            user_id,
            [
                {
                    "select": [
                        {"index": "timeseries"},
                        {"timeseries": "steps", "field": "duration"},
                        {"timeseries": "steps", "field": "timezone_offset"},
                        {"timeseries": "steps", "field": "source_type"},
                    ]
                },
                {
                    "select": [
                        {
                            "func": "max",
                            "arg": {"timeseries": "blood_pressure", "field": "systolic"},
                        },
                        {
                            "func": "mean",
                            "arg": {"timeseries": "blood_pressure", "field": "diastolic"},
                        },
                    ],
                    "where": "diastolic < 100",
                },
            ],
        )
    )
    assert steps == {
        "timestamp": [moment.isoformat(), (moment + timedelta(hours=1)).isoformat()],
        "duration": [1800.0, 3600.0],
        "timezone_offset": [0, 7200],
        "source_type": ["multiple_sources", "multiple_sources"],
    }
    assert pressure == {"max": [131.0], "mean": [82.0]}


def test_every_column_of_every_table_is_computed_by_the_engine() -> None:
    for name, table in SUMMARY_TABLES.items():
        assert set(table.columns) <= set(SOURCES[name].columns), name
    for fields in SERIES_FIELDS.values():
        assert set(fields) <= set(SOURCES["timeseries"].columns)


# -- provider priority ------------------------------------------------------------------------


def same_hours(provider: str, value: int) -> dict[str, Any]:
    day = TODAY - timedelta(days=1)
    moments = [datetime.combine(day, time(hour), UTC) for hour in range(8, 12)]
    return {
        "heartrate": {
            day: [{"timestamp": stamp(m), "value": value, "unit": "bpm"} for m in moments]
        }
    }


def test_the_first_provider_in_the_priority_wins_each_bucket(
    service: Service, client: TestClient, beta: Team, user_id: str
) -> None:
    service.health_data.store(uuid.UUID(user_id), "fitbit", same_hours("fitbit", 70))
    service.health_data.store(uuid.UUID(user_id), "oura", same_hours("oura", 50))
    query = {"select": [{"func": "mean", "arg": HEART}, {"func": "count", "arg": HEART}]}
    hourly = {
        "select": [{"group_key": 0}, {"func": "mean", "arg": HEART}],
        "group_by": [{"date_trunc": {"value": 1, "unit": "hour"}, "arg": {"index": "timeseries"}}],
    }
    both = {
        "select": [{"group_key": 0}, {"func": "count", "arg": HEART}],
        "group_by": [{"source": "source_provider"}],
    }
    # The catalog lists oura before fitbit.
    default, default_hourly, by_provider = tables(
        post(client, beta, user_id, [query, hourly, both])
    )
    assert default == {"mean": [50.0], "count": [4]}
    assert default_hourly["mean"] == [50.0] * 4
    assert by_provider == {"group_key.0": ["fitbit", "oura"], "count": [4, 4]}
    overridden, overridden_hourly = tables(
        post(
            client,
            beta,
            user_id,
            [query, hourly],
            config={"provider_priority_overrides": ["fitbit"]},
        )
    )
    assert overridden == {"mean": [70.0], "count": [4]}
    assert overridden_hourly["mean"] == [70.0] * 4
    # The where comes first: the provider left is the winner.
    (filtered,) = tables(
        post(client, beta, user_id, [{**query, "where": "source_provider = 'fitbit'"}])
    )
    assert filtered == {"mean": [70.0], "count": [4]}


# -- who may ask, and in what form --------------------------------------------------------------

SIMPLE = [{"select": [{"func": "count", "arg": HEART}]}]


def test_a_team_without_the_switch_is_refused_whatever_it_sends(
    client: TestClient, team: Team
) -> None:
    user = create_user(client, team, "no-beta")["user_id"]
    for accept in (None, PARQUET_MEDIA_TYPE):
        refused = post(client, team, user, SIMPLE, accept=accept)
        assert refused.status_code == 403
        assert refused.json()["detail"]["error_type"] == "FEATURE_NOT_ENABLED"
    malformed = client.post(
        f"/aggregate/v1/user/{user}/query", json={"nonsense": True}, headers=team.headers
    )
    assert malformed.status_code == 403


def test_unknown_other_teams_pending_and_erased_users_are_404(
    service: Service, client: TestClient, beta: Team, other_team: Team, user_id: str
) -> None:
    enable(service, other_team)
    theirs = create_user(client, other_team, "theirs")["user_id"]
    assert post(client, beta, theirs, SIMPLE).status_code == 404
    assert post(client, beta, str(uuid.uuid4()), SIMPLE).status_code == 404
    assert (
        client.post(
            "/aggregate/v1/user/not-a-uuid/query", headers=beta.headers, json={}
        ).status_code
        == 422
    )
    assert post(client, other_team, theirs, SIMPLE).status_code == 200
    assert client.delete(f"/v2/user/{user_id}", headers=beta.headers).status_code == 200
    pending = post(client, beta, user_id, SIMPLE)
    assert pending.status_code == 404 and "scheduled for deletion" in pending.json()["detail"]
    with freeze_time(datetime.now(UTC) + timedelta(days=8)):
        assert service.users.erase_user(CTX, uuid.UUID(user_id)) is True
    assert post(client, beta, user_id, SIMPLE).status_code == 404


# (accept, answered): the media type answered, or None for a 406.
ACCEPTS: list[tuple[str | None, str | None]] = [
    (None, "application/json"),
    ("*/*", "application/json"),
    ("application/json", "application/json"),
    ("application/*;q=0.5", "application/json"),
    (f"{PARQUET_MEDIA_TYPE}", PARQUET_MEDIA_TYPE),
    (f"application/json;q=0.4, {PARQUET_MEDIA_TYPE};q=0.9", PARQUET_MEDIA_TYPE),
    (f"*/*, {PARQUET_MEDIA_TYPE}", PARQUET_MEDIA_TYPE),
    (f"{PARQUET_MEDIA_TYPE};q=0, text/html, */*;q=0.1", "application/json"),
    ("text/html", None),
    ("application/xml, text/csv", None),
    (f"{PARQUET_MEDIA_TYPE};q=0", None),
]


def test_content_negotiation(client: TestClient, beta: Team, user_id: str) -> None:
    # Read-only queries: every Accept header against the one user.
    for accept, answered in ACCEPTS:
        case = accept
        response = post(client, beta, user_id, SIMPLE, accept=accept)
        if answered is None:
            assert response.status_code == 406, (case, response.text)
            assert PARQUET_MEDIA_TYPE in response.json()["detail"], (case, response.text)
        else:
            assert response.status_code == 200, (case, response.text)
            assert response.headers["content-type"] == answered, case


# -- bad and hostile input ------------------------------------------------------------------------


def problem(response: Any) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    (found,) = response.json()["detail"]
    return found


# (queries, loc, says): each one problem at loc, saying says, the input redacted.
BAD_QUERIES: list[tuple[list[Any], list[Any], str]] = [
    (
        [{"select": [{"timeseries": "nope", "field": "value"}]}],
        ["body", "queries", 0, "select", 0],
        "Unknown timeseries resource",
    ),
    (
        [{"select": [{"sleep": "snoring"}]}],
        ["body", "queries", 0, "select", 0],
        "Unknown sleep column",
    ),
    (
        [{"select": [{"func": "mean", "arg": {"sleep": "state"}}]}],
        ["body", "queries", 0, "select", 0, "func"],
        "mean applies to numbers",
    ),
    (
        [{"select": [{"func": "sum", "arg": {"timeseries": "heartrate", "field": "type"}}]}],
        ["body", "queries", 0, "select", 0, "func"],
        "sum applies",
    ),
    (
        [
            {
                "select": [{"func": "mean", "arg": HEART}],
                "group_by": [
                    {"date_trunc": {"value": 0, "unit": "day"}, "arg": {"index": "timeseries"}}
                ],
            }
        ],
        ["body", "queries", 0, "group_by", 0],
        "greater than or equal to 1",
    ),
    (
        [{"select": [HEART], "where": "value > 1 OR 1 = 1; DROP TABLE users"}],
        ["body", "queries", 0, "where"],
        "position 19",
    ),
    (
        [{"select": [HEART], "where": "value = (SELECT 1)"}],
        ["body", "queries", 0, "where"],
        "position 9",
    ),
    (
        [{"select": [HEART], "where": "pg_sleep(10) = 1"}],
        ["body", "queries", 0, "where"],
        "position 9",
    ),
    (
        [{"select": [HEART], "where": "users.user_id = 'x'"}],
        ["body", "queries", 0, "where"],
        "position 6",
    ),
    (
        [{"select": [HEART], "where": "read_csv = '/etc/passwd'"}],
        ["body", "queries", 0, "where"],
        "Unknown column 'read_csv'",
    ),
    (
        [{"select": [HEART], "where": '"value" > 1'}],
        ["body", "queries", 0, "where"],
        "position 1",
    ),
    (
        [{"select": [HEART], "where": "value > 1\u0000"}],
        ["body", "queries", 0, "where"],
        "position 10",
    ),
    (
        [{"select": [HEART], "where": "(" * 50 + "value > 1" + ")" * 50}],
        ["body", "queries", 0, "where"],
        "nested deeper",
    ),
    (
        [{"select": [HEART], "where": "value > 'a''; DROP TABLE users; --'"}],
        ["body", "queries", 0, "where"],
        "Expected a number",
    ),
    ([{"select": [HEART]}] * 11, ["body", "queries"], "at most 10"),
]


def test_bad_queries_are_422_naming_where(client: TestClient, beta: Team, user_id: str) -> None:
    # Read-only refusals: every case against the one user.
    for index, (queries, loc, says) in enumerate(BAD_QUERIES):
        case = (index, says)
        response = post(client, beta, user_id, queries)
        assert response.status_code == 422, (case, response.text)
        problems = response.json()["detail"]
        assert len(problems) == 1, (case, problems)
        (found,) = problems
        assert found["loc"][: len(loc)] == loc, (case, found)
        assert says in found["msg"], (case, found)
        assert found["input"] == "[redacted]", (case, found)


def test_bad_timeframes_are_422(client: TestClient, beta: Team, user_id: str) -> None:
    # Tomorrow as of the test itself, not of the module's import: a run that crosses
    # midnight would otherwise ask about today.
    tomorrow = datetime.now(UTC).date() + timedelta(days=1)
    future = problem(post(client, beta, user_id, SIMPLE, anchor=tomorrow))
    assert future["loc"] == ["body", "timeframe", "anchor"] and "future" in future["msg"]
    for value in (0, -1):
        found = problem(post(client, beta, user_id, SIMPLE, past={"value": value, "unit": "day"}))
        assert found["loc"] == ["body", "timeframe", "past", "value"]
    for anchor, past in (
        (date(1, 1, 1), {"value": 2, "unit": "day"}),
        (date(1899, 12, 31), {"value": 1, "unit": "month"}),
    ):
        early = problem(post(client, beta, user_id, SIMPLE, anchor=anchor, past=past))
        assert early["loc"] == ["body", "timeframe", "anchor"] and "1900" in early["msg"]
    assert problem(post(client, beta, user_id, SIMPLE, past={"value": 30, "unit": "year"}))[
        "loc"
    ] == ["body", "timeframe", "past", "value"]
    assert problem(post(client, beta, user_id, SIMPLE, past={"value": 1, "unit": "decade"}))[
        "loc"
    ] == ["body", "timeframe", "past", "unit"]


@pytest.mark.parametrize(
    "where",
    [
        "value > " + "9" * 1990,
        "value < -1e999",
        "type = 'nul\u0000inside'",
        "timestamp > '0001-01-01'",
        "timestamp < '9999-12-31T23:59:59+14:00'",
    ],
)
def test_extreme_literals_are_answered(
    client: TestClient, beta: Team, user_id: str, where: str
) -> None:
    (found,) = tables(
        post(client, beta, user_id, [{"select": [{"func": "count", "arg": HEART}], "where": where}])
    )
    assert found == {"count": [0]}


def test_a_string_literal_is_data_not_sql(
    service: Service, client: TestClient, beta: Team, user_id: str
) -> None:
    service.health_data.store(uuid.UUID(user_id), "oura", same_hours("oura", 60))
    hostile = "x'; DROP TABLE health_data; SELECT '"
    (found,) = tables(
        post(
            client,
            beta,
            user_id,
            [
                {
                    "select": [{"func": "count", "arg": HEART}],
                    "where": f"type = '{hostile.replace(chr(39), chr(39) * 2)}' OR value = 60",
                }
            ],
        )
    )
    assert found == {"count": [4]}
    # Everything is still there.
    assert service.health_data.count(uuid.UUID(user_id)) == 1
    assert client.get(f"/v2/user/{user_id}", headers=beta.headers).status_code == 200


def test_an_oversized_body_is_413(
    service: Service, client: TestClient, beta: Team, user_id: str
) -> None:
    where = "value > 1 OR " * (service.settings.max_body_bytes // 12)
    response = post(client, beta, user_id, [{"select": [HEART], "where": where + "value > 1"}])
    assert response.status_code == 413


def test_an_ungrouped_answer_is_bounded(
    service: Service, client: TestClient, beta: Team, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.health_data.store(uuid.UUID(user_id), "oura", same_hours("oura", 60))
    monkeypatch.setattr(health_queries, "MAX_ROWS", 3)
    found = problem(
        post(
            client,
            beta,
            user_id,
            [{"select": [{"func": "count", "arg": HEART}]}, {"select": [HEART]}],
        )
    )
    assert found["loc"] == ["body", "queries", 1] and "more than 3 rows" in found["msg"]
    # Within the bound, the rows are answered in time order.
    before = datetime.combine(TODAY - timedelta(days=1), time(11), UTC).isoformat()
    query = {"select": [{"index": "timeseries"}, HEART], "where": f"timestamp < '{before}'"}
    (rows,) = tables(post(client, beta, user_id, [query]))
    assert rows["value"] == [60.0] * 3
    assert rows["timestamp"] == sorted(rows["timestamp"])


def test_the_operation_is_documented(service: Service) -> None:
    from healthledger.adapters.http.team_api import create_team_api

    operation = create_team_api(service).openapi()["paths"]["/aggregate/v1/user/{user_id}/query"][
        "post"
    ]
    assert set(operation["responses"]) >= {"200", "401", "403", "404", "406", "422"}
    assert PARQUET_MEDIA_TYPE in operation["responses"]["200"]["content"]
