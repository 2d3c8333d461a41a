"""Timeseries read benchmark (issue 18): one day of 1,440 heart-rate samples read through
`GET /v2/timeseries/{user_id}/heartrate`, against a bare FastAPI endpoint that returns the
same list of samples from memory. Target: ours at least 80% of the bare endpoint's
requests per second (issue 32; 50% before).

Both apps are served by uvicorn on 127.0.0.1 in threads of this process and read by the
same httpx client, one request to each in turn (so that a load spike on this shared
machine falls on both); a round's figure per side is the median request's rate, the
ratio the median round's. Ours is the real team API (`create_team_api(build_service(...))`)
on a fresh SQLite file (or, with `--database-url` naming a PostgreSQL database, a new
schema of it, dropped after the run): the key checked, the user checked, the
user's key unwrapped and the day's block opened, on every request. The samples are
stored as the pull engine stores them (the store's `store`).

    .venv/bin/python bench/timeseries_read.py [--requests 200] [--rounds 5] [--database-url URL]

`main()` returns the figures (bench/query.py calls it) and prints a report; `--check`
makes a missed target exit 1.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from healthledger.adapters.composition import build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from support import fresh_schema

TARGET = 0.80
DAY = date(2026, 3, 1)
SAMPLES = 1440
READY_TIMEOUT = 30.0


def day_of_samples() -> list[dict[str, Any]]:
    """A day of heart rate at one sample a minute, as the demo devices store it."""
    midnight = datetime.combine(DAY, datetime.min.time(), UTC)
    return [
        {
            "timestamp": (midnight + timedelta(minutes=m)).isoformat(),
            "value": 60 + (m * 7919) % 41,
            "unit": "bpm",
        }
        for m in range(SAMPLES)
    ]


def bare_app(samples: list[dict[str, Any]]) -> FastAPI:
    """The same path and parameters, answered from memory."""
    app = FastAPI()

    @app.get("/v2/timeseries/{user_id}/heartrate")
    def heartrate(user_id: str, start_date: str) -> Any:
        return samples

    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def database(url: str | None, workdir: Path) -> Iterator[str]:
    """A fresh SQLite file; or, given a PostgreSQL URL, a new schema of that database
    (first on the search path), dropped afterwards: the run leaves nothing behind."""
    if url is None or not url.startswith("postgresql"):
        yield url or f"sqlite:///{workdir / 'ledger.db'}"
        return
    with fresh_schema(url, "bench") as schema_url:
        yield schema_url


@contextmanager
def served(app: Any) -> Iterator[str]:
    """The app under uvicorn in a thread of this process; its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, name=f"bench-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + READY_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("a server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def latencies(
    client: httpx.Client, urls: Sequence[str], params: dict[str, str], n: int
) -> list[list[float]]:
    """Each URL's request latencies (seconds), requests interleaved one by one, so that
    a load spike on the machine falls on every side alike."""
    found: list[list[float]] = [[] for _ in urls]
    for _ in range(n):
        for index, url in enumerate(urls):
            started = time.perf_counter()
            response = client.get(url, params=params)
            found[index].append(time.perf_counter() - started)
            if response.status_code != 200:
                raise RuntimeError(f"{url}: {response.status_code} {response.text[:200]}")
    return found


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="per side and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    samples = day_of_samples()
    with (
        tempfile.TemporaryDirectory() as tmp,
        database(args.database_url, Path(tmp)) as database_url,
    ):
        settings = Settings(
            database_url=database_url, master_key_file=Path(tmp) / "keys" / "master.key"
        )
        service = build_service(settings)
        try:
            boot = service.bootstrap()
            if boot is None:
                raise RuntimeError("the benchmark needs an empty database")
            ctx = CommandContext.system("bench:timeseries")
            user = service.users.create_user(ctx, boot.team_id, client_user_id="bench-1")
            service.health_data.store(user.id, "oura", {"heartrate": {DAY: samples}})
            path = f"/v2/timeseries/{user.id}/heartrate"
            params = {"start_date": DAY.isoformat()}
            headers = {"x-service-api-key": boot.team_api_key.plain}
            ours_rates, bare_rates = [], []
            with (
                served(create_team_api(service)) as ours,
                served(bare_app(samples)) as bare,
                httpx.Client(headers=headers, timeout=30) as client,
            ):
                # Both answer the same samples (ours passes the stored JSON on as it is).
                mine = client.get(ours + path, params=params).json()
                theirs = client.get(bare + path, params=params).json()
                if mine != theirs or len(mine) != SAMPLES:
                    raise RuntimeError("the two endpoints do not answer the same samples")
                latencies(client, [ours + path, bare + path], params, 30)  # warm up both
                for _ in range(args.rounds):
                    mine_s, bare_s = latencies(
                        client, [ours + path, bare + path], params, args.requests
                    )
                    # Medians: a request that met a spike of the machine's load does not
                    # decide the figure.
                    ours_rates.append(1 / statistics.median(mine_s))
                    bare_rates.append(1 / statistics.median(bare_s))
        finally:
            service.close()
    ratios = [o / b for o, b in zip(ours_rates, bare_rates, strict=True)]
    figures = {
        "samples": SAMPLES,
        "ours_per_s": statistics.median(ours_rates),
        "bare_per_s": statistics.median(bare_rates),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "target": TARGET,
    }
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(
        f"timeseries read, one day of {SAMPLES} samples: ours {figures['ours_per_s']:.0f}/s, "
        f"bare FastAPI from memory {figures['bare_per_s']:.0f}/s, ratio "
        f"{figures['ratio']:.0%} (rounds {figures['ratio_min']:.0%}..{figures['ratio_max']:.0%}; "
        f"target >= {TARGET:.0%})"
    )
    if args.check and figures["ratio"] < TARGET:
        sys.exit(1)
    return figures


if __name__ == "__main__":
    main()
