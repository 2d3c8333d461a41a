"""Aggregate query benchmark (issue 18): one user's two years of heart rate at one sample
a minute (about 1,000,000 samples, as the demo device reports them: off the wrist to
charge once a day), stored sealed one row a day as the pull engine stores them (the
store's `store`), queried grouped by day for mean, min, max and newest.

Figures, in one run:

- **open**: reading the user's 730 sealed rows, decrypting them and parsing the samples
  into DuckDB's table (`HealthQueries.opened`);
- **aggregate**: the query's plan over the opened table (`OpenedQuery.results`), against
  the **baseline**: DuckDB computing the same (`time_bucket` by day, avg, min, max,
  arg_max) over the same samples already in memory as an Arrow table. Target: aggregate
  within 2x the baseline (the median of `--repeat` runs of each, alternated);
- **resident memory**: the peak RSS of the process that answers the query (a fresh
  process: the data were written by another). Target: under 300 MB.

    .venv/bin/python bench/query.py [--days 730] [--repeat 6] [--database-url URL] [--check]

At its end it runs `bench/timeseries_read.py` (the timeseries read figure) when that file
exists. `--check` exits 1 on a missed target.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from pathlib import Path
from typing import Any

AGGREGATE_TARGET = 2.0
RSS_TARGET_MB = 300
LAST_DAY = date(2026, 2, 28)
STORE_DAYS = 30  # days stored per call, as a pull's chunk windows store them

QUERY = {
    "select": [
        {"group_key": 0},
        {"func": "mean", "arg": {"timeseries": "heartrate", "field": "value"}},
        {"func": "min", "arg": {"timeseries": "heartrate", "field": "value"}},
        {"func": "max", "arg": {"timeseries": "heartrate", "field": "value"}},
        {"func": "newest", "arg": {"timeseries": "heartrate", "field": "value"}},
    ],
    "group_by": [{"date_trunc": {"value": 1, "unit": "day"}, "arg": {"index": "timeseries"}}],
}
BASELINE_SQL = (
    "SELECT time_bucket(INTERVAL 1 DAY, ts) AS day, avg(value), min(value), max(value), "
    "arg_max(value, ts) FROM samples GROUP BY day ORDER BY day"
)


def settings_for(database_url: str, keys: Path) -> Any:
    from healthledger.adapters.settings import Settings

    return Settings(
        database_url=database_url,
        master_key_file=keys / "master.key",
        signing_key_file=keys / "signing.key",
    )


def write_history(database_url: str, keys: Path, days: int) -> tuple[str, str, int]:
    """A team, a user and `days` days of demo heart rate, stored sealed; (team, user,
    samples stored)."""
    from healthledger.adapters.composition import build_service
    from healthledger.adapters.providers.demo import DemoProvider
    from healthledger.domain.connections.providers import PullTarget
    from healthledger.domain.context import CommandContext

    service = build_service(settings_for(database_url, keys))
    try:
        boot = service.bootstrap()
        if boot is None:
            raise RuntimeError("the benchmark needs an empty database")
        ctx = CommandContext.system("bench:query")
        user = service.users.create_user(ctx, boot.team_id, client_user_id="bench-query")
        target = PullTarget(user.id, "oura", "heartrate", {})
        now = datetime.combine(LAST_DAY + timedelta(days=1), clock_time(0), UTC)
        first = LAST_DAY - timedelta(days=days - 1)
        stored = 0
        for offset in range(0, days, STORE_DAYS):
            start = first + timedelta(days=offset)
            end = min(start + timedelta(days=STORE_DAYS - 1), LAST_DAY)
            chunk = DemoProvider().fetch(target, start, end, now, 1)
            stored += sum(len(samples) for samples in chunk.values())
            service.health_data.store(user.id, "oura", {"heartrate": chunk})
        return str(boot.team_id), str(user.id), stored
    finally:
        service.close()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(database_url: str, keys: Path, team: str, user: str, days: int, repeat: int) -> dict:
    """In a fresh process: open and aggregate, the baseline, the peak RSS."""
    import duckdb
    from healthledger.adapters.answers.health_queries import HealthQueries, json_body
    from healthledger.adapters.composition import build_service
    from healthledger.adapters.persistence.health_data.batches import HealthDataBatches
    from healthledger.domain.health_queries.query import AggregateQueryRequest

    service = build_service(settings_for(database_url, keys))
    service_rss = peak_rss_mb()
    queries = HealthQueries(
        HealthDataBatches(service.db, service.key_store), list(service.catalog), service.clock
    )
    request = AggregateQueryRequest.model_validate(
        {
            "timeframe": {
                "type": "relative",
                "anchor": LAST_DAY.isoformat(),
                "past": {"value": days, "unit": "day"},
            },
            "queries": [QUERY],
        }
    )
    team_id, user_id = uuid.UUID(team), uuid.UUID(user)
    # The query as the endpoint runs it, first: the process's peak RSS is then its own.
    started = time.perf_counter()
    json_body(queries.run(team_id, user_id, request))
    first_query = time.perf_counter() - started
    query_rss = peak_rss_mb()
    opens, aggregates, baselines, answers = [], [], [], []
    rows = groups = 0
    for _ in range(max(1, repeat // 3)):
        with queries.opened(team_id, user_id, request) as opened:
            opens.append(opened.open_seconds)
            (name,) = [t.name for t in opened.tables.values()]
            rows = opened.con.sql(f"SELECT count(*) FROM {name}").fetchall()[0][0]
            # The baseline's samples: the same, as DuckDB's fastest form (UTC, no zone).
            samples = opened.con.sql(f"SELECT __index AS ts, value FROM {name}").to_arrow_table()
            baseline = duckdb.connect(config={"threads": queries.threads})
            baseline.register("samples", samples)
            for _ in range(repeat):
                started = time.perf_counter()
                (table,) = opened.results()
                aggregates.append(time.perf_counter() - started)
                started = time.perf_counter()
                expected = baseline.sql(BASELINE_SQL).to_arrow_table()
                baselines.append(time.perf_counter() - started)
                started = time.perf_counter()
                json_body([table])
                answers.append(time.perf_counter() - started)
            groups = table.num_rows
            # The same answer as DuckDB's over the samples in memory.
            for ours, theirs in zip(table.columns[1:], expected.columns[1:], strict=True):
                assert all(
                    math.isclose(a, b, rel_tol=1e-12)
                    for a, b in zip(ours.to_pylist(), theirs.to_pylist(), strict=True)
                )
            baseline.close()
            del samples
    service.close()
    aggregate, base = statistics.median(aggregates), statistics.median(baselines)
    return {
        "samples": rows,
        "groups": groups,
        "open_s": statistics.median(opens),
        "aggregate_s": aggregate,
        "baseline_s": base,
        "ratio": aggregate / base,
        "json_s": statistics.median(answers),
        "first_query_s": first_query,
        "service_rss_mb": service_rss,
        "peak_rss_mb": query_rss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    parser.add_argument("--check", action="store_true")
    parser.add_argument(
        "--measure", nargs=3, metavar=("KEYS", "TEAM", "USER"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.measure:
        keys, team, user = args.measure
        figures = measure(args.database_url, Path(keys), team, user, args.days, args.repeat)
        print(json.dumps(figures))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        database_url = args.database_url or f"sqlite:///{Path(tmp) / 'ledger.db'}"
        keys = Path(tmp) / "keys"
        started = time.perf_counter()
        team, user, stored = write_history(database_url, keys, args.days)
        took = time.perf_counter() - started
        print(f"stored {stored:,} samples in {args.days} sealed rows ({took:.1f} s)")
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--database-url",
                database_url,
                "--days",
                str(args.days),
                "--repeat",
                str(args.repeat),
                "--measure",
                str(keys),
                team,
                user,
            ],
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            sys.stderr.write(child.stderr)
            return 1
        figures = json.loads(child.stdout.strip().splitlines()[-1])
    ok_ratio = figures["ratio"] <= AGGREGATE_TARGET
    ok_rss = figures["peak_rss_mb"] < RSS_TARGET_MB
    print(
        f"aggregate query over {figures['samples']:,} heart-rate samples, by day "
        f"({figures['groups']} groups): mean, min, max, newest\n"
        f"  open (read, decrypt, parse):  {figures['open_s'] * 1000:8.1f} ms\n"
        f"  aggregate (ours):             {figures['aggregate_s'] * 1000:8.1f} ms\n"
        f"  baseline (DuckDB over Arrow): {figures['baseline_s'] * 1000:8.1f} ms\n"
        f"  ratio ours/baseline:          {figures['ratio']:8.2f}  (target <= {AGGREGATE_TARGET}) "
        f"{'ok' if ok_ratio else 'MISSED'}\n"
        f"  JSON answer:                  {figures['json_s'] * 1000:8.1f} ms\n"
        f"  the whole query, JSON out:    {figures['first_query_s'] * 1000:8.1f} ms\n"
        f"  peak RSS, query answered:     {figures['peak_rss_mb']:8.1f} MB "
        f"(target < {RSS_TARGET_MB}) {'ok' if ok_rss else 'MISSED'}; "
        f"{figures['service_rss_mb']:.1f} MB with the service built, before the query"
    )
    missed = not (ok_ratio and ok_rss)
    # The timeseries read figure (the summaries and timeseries getters' benchmark).
    other = Path(__file__).with_name("timeseries_read.py")
    if other.exists():
        spec = importlib.util.spec_from_file_location("timeseries_read", other)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main(["--check"] if args.check else [])
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
