"""Withings history benchmark (issue 28): two years of a person's Withings, as the fake
Withings serves it (adapters/makers/fake_withings.py, a real HTTP server on localhost, with
its page sizes: the intraday series a day a request, each night's states a request),
pulled and stored by the service (bench/maker_history.py runs it). Targets: under 60 s,
resident memory under 300 MB.

    .venv/bin/python bench/withings_history.py [--days 730] [--database-url URL] [--check]

It prints a report; `--check` exits 1 on a missed target or a pull that did not succeed.
"""

from __future__ import annotations

import sys

from healthledger.adapters.makers.fake_withings import running_fake_withings
from maker_history import Maker, main

WITHINGS = Maker(
    "withings", "Withings", running_fake_withings, "withings_api_url", "withings_history_days"
)

if __name__ == "__main__":
    sys.exit(main(WITHINGS, __doc__.split("\n")[0]))
