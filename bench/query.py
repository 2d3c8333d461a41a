"""Aggregate query benchmark (issues 18 and 32): one user's two years of heart rate at
one sample a minute (about 1,000,000 samples, as the demo device reports them: off the
wrist to charge once a day), stored as the pull engine stores them (the store's `store`,
30 days a call), queried grouped by day for mean, min, max and newest. With `--users 10`
nine other users' two years are stored in the same database first (10,000,000 samples):
the query on one must not pay for the others.

Figures, in one run:

- **the whole query, JSON out** (`HealthQueries.run` and the JSON body, in a fresh
  process: the data were written by another), against the **baseline**: DuckDB answering
  the same query from the same samples in one zstd Parquet file on disk, opened per query
  (a new connection, `read_parquet`, the same JSON body). Target: at most 2x (the median
  of `--repeat` runs of each, alternated);
- open and aggregate apart, the aggregate against DuckDB over the samples already in
  memory as Arrow;
- **resident memory**: the peak RSS of the process that answers the query. Target: under
  300 MB;
- **stored bytes per sample**: the user's sealed blocks against the Parquet file (target:
  at most 1.5x), and what the same days took one sealed base64 JSON text a day (the
  format before issue 32);
- **ingest**: the user's 730 days stored (`store`, 30 days a call) against raw pyarrow
  and raw sqlite3 / psycopg writing the same samples as sealed zstd Parquet blocks, one
  transaction a call. Target: at most 2x.

    .venv/bin/python bench/query.py [--days 730] [--users 1] [--repeat 6]
                                    [--database-url URL] [--ingest-only] [--check]

With `--database-url` naming a PostgreSQL database, the run uses a new schema of it,
dropped afterwards. At its end it runs `bench/timeseries_read.py` (the timeseries read
figure) on the same database kind. `--ingest-only` stops after the ingest figure (for
repeating it; the query, memory and bytes figures need the rest). `--check` exits 1 on a
missed target.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from support import fresh_schema, libpq_url

AGGREGATE_TARGET = 2.0
RSS_TARGET_MB = 300
BYTES_TARGET = 1.5
INGEST_TARGET = 2.0
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
    "arg_max(value, ts) FROM {samples} GROUP BY day ORDER BY day"
)


def settings_for(database_url: str, keys: Path) -> Any:
    from healthledger.adapters.settings import Settings

    return Settings(
        database_url=database_url,
        master_key_file=keys / "master.key",
        signing_key_file=keys / "signing.key",
    )


@contextlib.contextmanager
def database(url: str | None, workdir: Path) -> Iterator[str]:
    """A fresh SQLite file; or, given a PostgreSQL URL, a new schema of it (dropped after)."""
    if url is None or not url.startswith("postgresql"):
        yield url or f"sqlite:///{workdir / 'ledger.db'}"
        return
    with fresh_schema(url, "bench") as schema_url:
        yield schema_url


def chunks_of(user_id: uuid.UUID, days: int) -> list[dict[date, Any]]:
    """The user's demo heart rate over `days` days, in the calls the store gets."""
    from healthledger.adapters.providers.demo import DemoProvider
    from healthledger.domain.connections.providers import PullTarget

    target = PullTarget(user_id, "oura", "heartrate", {})
    now = datetime.combine(LAST_DAY + timedelta(days=1), clock_time(0), UTC)
    first = LAST_DAY - timedelta(days=days - 1)
    found = []
    for offset in range(0, days, STORE_DAYS):
        start = first + timedelta(days=offset)
        end = min(start + timedelta(days=STORE_DAYS - 1), LAST_DAY)
        found.append(DemoProvider().fetch(target, start, end, now, 1))
    return found


def write_history(database_url: str, keys: Path, days: int, users: int) -> dict[str, Any]:
    """A team and `users` users with `days` days of demo heart rate each, stored as the
    pulls store them; the first user is the one queried. Figures of the first user's
    writes: samples, seconds, stored bytes (and the old format's)."""
    from healthledger.adapters.composition import build_service
    from healthledger.adapters.persistence.engine.schema import health_data
    from healthledger.adapters.persistence.keys.key_store import canonical_json
    from healthledger.domain.context import CommandContext

    service = build_service(settings_for(database_url, keys))
    try:
        boot = service.bootstrap()
        if boot is None:
            raise RuntimeError("the benchmark needs an empty database")
        ctx = CommandContext.system("bench:query")
        made = [
            service.users.create_user(ctx, boot.team_id, client_user_id=f"bench-query-{n}").id
            for n in range(users)
        ]
        # The others first: the queried user's blocks are the newest rows.
        for other in made[1:]:
            for chunk in chunks_of(other, days):
                service.health_data.store(other, "oura", {"heartrate": chunk})
        user = made[0]
        chunks = chunks_of(user, days)
        started = time.perf_counter()
        for chunk in chunks:
            service.health_data.store(user, "oura", {"heartrate": chunk})
        store_s = time.perf_counter() - started
        raw_s = raw_ingest(database_url, chunks)
        h = health_data.c
        with service.db.read() as conn:
            stored_bytes = conn.execute(
                sa.select(sa.func.sum(sa.func.length(h.sealed))).where(
                    h.user_id == user, h.replaced_at.is_(None)
                )
            ).scalar_one()
        cipher = service.key_store.cipher(user)
        assert cipher is not None
        old_bytes = sum(
            len(cipher.seal_bytes(canonical_json(samples)))
            for chunk in chunks
            for samples in chunk.values()
        )
        return {
            "team": str(boot.team_id),
            "user": str(user),
            "stored": sum(len(samples) for chunk in chunks for samples in chunk.values()),
            "store_s": store_s,
            "raw_store_s": raw_s,
            "stored_bytes": stored_bytes,
            "old_bytes": old_bytes,
        }
    finally:
        service.close()


def raw_ingest(database_url: str, chunks: list[dict[date, Any]]) -> float:
    """The baseline of the ingest: the same samples as zstd Parquet blocks (one per month
    a call touches), sealed with AES-GCM, inserted with the driver alone, one transaction
    a call; no digests, no merge, no versions."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aead = AESGCM(AESGCM.generate_key(bit_length=256))
    ddl = "CREATE TABLE raw_blocks (period TEXT, n INTEGER, sealed {blob})"
    insert = "INSERT INTO raw_blocks VALUES ({0}, {0}, {0})"
    if database_url.startswith("sqlite"):
        path = sa.make_url(database_url).database
        conn: Any = sqlite3.connect(f"{path}.raw.db")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(ddl.format(blob="BLOB"))
        insert = insert.format("?")
    else:
        import psycopg

        conn = psycopg.connect(libpq_url(database_url))
        conn.execute(ddl.format(blob="bytea"))
        conn.commit()
        insert = insert.format("%s")
    started = time.perf_counter()
    for n, chunk in enumerate(chunks):
        rows = []
        by_month: dict[date, list[dict[str, Any]]] = {}
        for day, samples in sorted(chunk.items()):
            by_month.setdefault(day.replace(day=1), []).extend(samples)
        for month, samples in by_month.items():
            table = pa.Table.from_pylist(samples)
            table = table.set_column(
                table.schema.get_field_index("timestamp"),
                "timestamp",
                table["timestamp"].cast(pa.timestamp("us", tz="UTC")),
            )
            data = io.BytesIO()
            pq.write_table(table, data, compression="zstd")
            nonce = os.urandom(12)
            rows.append(
                (f"{month}:{n}", len(samples), nonce + aead.encrypt(nonce, data.getvalue(), None))
            )
        cursor = conn.cursor()
        cursor.executemany(insert, rows)
        conn.commit()
    took = time.perf_counter() - started
    conn.close()
    return took


def ingest_line(written: dict[str, Any], days: int) -> str:
    """The ingest figure: our store against raw pyarrow + the driver."""
    ratio = written["store_s"] / written["raw_store_s"]
    return (
        f"ingest, {days} days stored:       {written['store_s']:8.2f} s    "
        f"(raw pyarrow + driver {written['raw_store_s']:.2f} s: {ratio:.2f}x, "
        f"target <= {INGEST_TARGET}x)"
    )


def ingest_report(written: dict[str, Any], days: int, check: bool) -> int:
    """The ingest figure alone (`--ingest-only`)."""
    met = written["store_s"] / written["raw_store_s"] <= INGEST_TARGET
    print(
        f"  {ingest_line(written, days)} {'ok' if met else 'MISSED'}; load {os.getloadavg()[0]:.2f}"
    )
    return 1 if check and not met else 0


def peak_rss_mb() -> float:
    """This process's peak resident memory. VmHWM, not getrusage's ru_maxrss: Linux keeps
    ru_maxrss across exec, so a child would report its parent's peak at the fork."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(database_url: str, keys: Path, team: str, user: str, days: int, repeat: int) -> dict:
    """In a fresh process: the whole query and its baseline over a Parquet file, open and
    aggregate apart, the peak RSS."""
    import duckdb
    import pyarrow.parquet as pq
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
    ours_body = json_body(queries.run(team_id, user_id, request))
    first_query = time.perf_counter() - started
    query_rss = peak_rss_mb()
    # The baseline's file: the same samples (UTC, no zone), zstd Parquet on disk.
    with queries.opened(team_id, user_id, request) as opened:
        (heart_rate,) = opened.tables.values()
        samples = opened.con.sql(
            f"SELECT __index AS ts, value FROM ({heart_rate.source})", params=heart_rate.params
        ).to_arrow_table()
    parquet_path = keys / "samples.parquet"
    pq.write_table(samples, parquet_path, compression="zstd")
    rows = samples.num_rows

    def baseline_query() -> bytes:
        con = duckdb.connect(config={"threads": queries.threads})
        try:
            source = f"read_parquet('{parquet_path}')"
            return json_body([con.sql(BASELINE_SQL.format(samples=source)).to_arrow_table()])
        finally:
            con.close()

    wholes, parquets, opens, aggregates, in_memory = [], [], [], [], []
    for _ in range(repeat):
        started = time.perf_counter()
        mine = json_body(queries.run(team_id, user_id, request))
        wholes.append(time.perf_counter() - started)
        started = time.perf_counter()
        theirs = baseline_query()
        parquets.append(time.perf_counter() - started)
    assert mine == ours_body
    # The same answer as DuckDB's over the file (the day labels apart: ours say UTC).
    for ours, expected in zip(
        list(json.loads(mine)["results"][0]["table"].values())[1:],
        list(json.loads(theirs)["results"][0]["table"].values())[1:],
        strict=True,
    ):
        assert all(
            a == b or math.isclose(a, b, rel_tol=1e-12) for a, b in zip(ours, expected, strict=True)
        )
    baseline = duckdb.connect(config={"threads": queries.threads})
    baseline.register("samples", samples)
    with queries.opened(team_id, user_id, request) as opened:
        opens.append(opened.open_seconds)
        for _ in range(repeat):
            started = time.perf_counter()
            (table,) = opened.results()
            aggregates.append(time.perf_counter() - started)
            started = time.perf_counter()
            baseline.sql(BASELINE_SQL.format(samples="samples")).to_arrow_table()
            in_memory.append(time.perf_counter() - started)
    baseline.close()
    service.close()
    whole, parquet = statistics.median(wholes), statistics.median(parquets)
    return {
        "samples": rows,
        "groups": table.num_rows,
        "whole_s": whole,
        "parquet_s": parquet,
        "ratio": whole / parquet,
        "open_s": statistics.median(opens),
        "aggregate_s": statistics.median(aggregates),
        "in_memory_s": statistics.median(in_memory),
        "first_query_s": first_query,
        "parquet_bytes": parquet_path.stat().st_size,
        "service_rss_mb": service_rss,
        "peak_rss_mb": query_rss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--ingest-only", action="store_true", help="the ingest figure only")
    parser.add_argument(
        "--measure", nargs=3, metavar=("KEYS", "TEAM", "USER"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.measure:
        keys, team, user = args.measure
        figures = measure(args.database_url, Path(keys), team, user, args.days, args.repeat)
        print(json.dumps(figures))
        return 0
    with (
        tempfile.TemporaryDirectory() as tmp,
        database(args.database_url, Path(tmp)) as database_url,
    ):
        keys = Path(tmp) / "keys"
        started = time.perf_counter()
        written = write_history(database_url, keys, args.days, args.users)
        took = time.perf_counter() - started
        kind = "PostgreSQL" if database_url.startswith("postgresql") else "SQLite"
        print(
            f"{kind}: stored {args.users} user(s) x {args.days} days; the queried one "
            f"{written['stored']:,} samples ({took:.1f} s in all)"
        )
        if args.ingest_only:
            return ingest_report(written, args.days, args.check)
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
                written["team"],
                written["user"],
            ],
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            sys.stderr.write(child.stderr)
            return 1
        figures = json.loads(child.stdout.strip().splitlines()[-1])
    per_sample = written["stored_bytes"] / written["stored"]
    parquet_per_sample = figures["parquet_bytes"] / figures["samples"]
    bytes_ratio = per_sample / parquet_per_sample
    ingest_ratio = written["store_s"] / written["raw_store_s"]
    ok = {
        "ratio": figures["ratio"] <= AGGREGATE_TARGET,
        "rss": figures["peak_rss_mb"] < RSS_TARGET_MB,
        "bytes": bytes_ratio <= BYTES_TARGET,
        "ingest": ingest_ratio <= INGEST_TARGET,
    }

    def verdict(name: str) -> str:
        return "ok" if ok[name] else "MISSED"

    print(
        f"aggregate query over {figures['samples']:,} heart-rate samples, by day "
        f"({figures['groups']} groups): mean, min, max, newest; load {os.getloadavg()[0]:.2f}\n"
        f"  the whole query, JSON out:        {figures['whole_s'] * 1000:8.1f} ms\n"
        f"  DuckDB over a zstd Parquet file:  {figures['parquet_s'] * 1000:8.1f} ms\n"
        f"  ratio ours/Parquet:               {figures['ratio']:8.2f}  "
        f"(target <= {AGGREGATE_TARGET}) {verdict('ratio')}\n"
        f"  of ours: open (read, decrypt):    {figures['open_s'] * 1000:8.1f} ms, "
        f"aggregate {figures['aggregate_s'] * 1000:.1f} ms (DuckDB over Arrow in memory "
        f"{figures['in_memory_s'] * 1000:.1f} ms)\n"
        f"  peak RSS, query answered:         {figures['peak_rss_mb']:8.1f} MB "
        f"(target < {RSS_TARGET_MB}) {verdict('rss')}; "
        f"{figures['service_rss_mb']:.1f} MB with the service built, before the query\n"
        f"  stored bytes per sample:          {per_sample:8.2f}  (zstd Parquet "
        f"{parquet_per_sample:.2f}: {bytes_ratio:.2f}x, target <= {BYTES_TARGET}x) "
        f"{verdict('bytes')}; a sealed JSON text a day: "
        f"{written['old_bytes'] / written['stored']:.2f}\n"
        f"  {ingest_line(written, args.days)} {verdict('ingest')}"
    )
    missed = not all(ok.values())
    # The timeseries read figure (the summaries and timeseries getters' benchmark).
    other = Path(__file__).with_name("timeseries_read.py")
    if other.exists() and args.users == 1:
        spec = importlib.util.spec_from_file_location("timeseries_read", other)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        given = ["--database-url", args.database_url] if args.database_url else []
        module.main([*given, *(["--check"] if args.check else [])])
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
