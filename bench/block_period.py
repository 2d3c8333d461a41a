"""Which period a health data block should cover (ADR 0033): two years of one user's
demo heart rate (a minute apart) written as blocks of a week, a month, a quarter and a
year, and for each: the stored bytes per sample, the time to open every block of the two
years (decrypt and decode the items), and what a daily sync writes (the block of the day
it adds, sealed: merged and written again).

    .venv/bin/python bench/block_period.py [--days 730]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from healthledger.adapters.persistence.health_data import blocks
from healthledger.adapters.persistence.health_data.blocks import StoredPayload
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget

LAST_DAY = date(2026, 2, 28)
NOW = datetime(2026, 3, 1, tzinfo=UTC)
PERIODS: dict[str, Callable[[date], date]] = {
    "week": lambda d: d - timedelta(days=d.weekday()),
    "month": lambda d: d.replace(day=1),
    "quarter": lambda d: d.replace(month=(d.month - 1) // 3 * 3 + 1, day=1),
    "year": lambda d: d.replace(month=1, day=1),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=730)
    args = parser.parse_args()
    target = PullTarget(uuid.UUID(int=1), "oura", "heartrate", {})
    first = LAST_DAY - timedelta(days=args.days - 1)
    days: dict[date, Any] = DemoProvider().fetch(target, first, LAST_DAY, NOW, 1)
    samples = sum(len(v) for v in days.values())
    aead = AESGCM(AESGCM.generate_key(bit_length=256))
    print(f"{samples:,} samples over {args.days} days")
    print("period    blocks  bytes/sample  open all (ms)  a daily sync writes (kB)")
    for name, period_of in PERIODS.items():
        grouped: dict[date, dict[date, StoredPayload]] = {}
        for day, value in days.items():
            payload = StoredPayload(value, NOW, NOW, "0" * 64)
            grouped.setdefault(period_of(day), {})[day] = payload
        sealed = []
        for held in grouped.values():
            nonce = os.urandom(12)
            sealed.append(nonce + aead.encrypt(nonce, blocks.encode(held), None))
        started = time.perf_counter()
        for data in sealed:
            blocks.decode(aead.decrypt(data[:12], data[12:], None))
        opened = time.perf_counter() - started
        # The last day added to its block by a sync: the block merged and sealed again.
        last = grouped[period_of(LAST_DAY)]
        before = blocks.decode(blocks.encode({d: p for d, p in last.items() if d != LAST_DAY}))
        rewritten = blocks.merged(before, {LAST_DAY: last[LAST_DAY]})
        stored = sum(len(s) for s in sealed)
        print(
            f"{name:8} {len(sealed):7} {stored / samples:13.2f} {opened * 1000:14.1f} "
            f"{len(rewritten) / 1000:25.1f}"
        )


if __name__ == "__main__":
    main()
