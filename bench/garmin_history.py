"""Garmin history benchmark (issue 31): two years of a person's Garmin, as the fake Garmin
delivers it (adapters/makers/fake_garmin.py, a real HTTP server on localhost): the history
pull asks Garmin's backfill (90 days a request, six summary types), the fake pushes the
summaries to our webhook (the team API on a loopback port; up to 500 kB of records a
POST), and the worker stores every delivery (bench/maker_history.py runs it). Targets:
under 60 s from the first backfill to the last delivery stored, resident memory under
300 MB.

    .venv/bin/python bench/garmin_history.py [--days 730] [--database-url URL] [--check]

It prints a report; `--check` exits 1 on a missed target or a pull that did not succeed.
"""

from __future__ import annotations

import sys

from healthledger.adapters.makers.fake_garmin import FakeGarmin, running_fake_garmin
from maker_history import Maker, main

GARMIN = Maker(
    "garmin",
    "Garmin",
    # Delivered when the benchmark says (`deliver()`), not by the sandbox's timer threads.
    lambda: running_fake_garmin(FakeGarmin(keep_sent=False)),
    "garmin_api_url",
    "garmin_history_days",
    delivers=True,
)

if __name__ == "__main__":
    sys.exit(main(GARMIN, __doc__.split("\n")[0]))
