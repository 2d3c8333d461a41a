"""Fitbit history benchmark (issue 28): two years of a person's Fitbit, as the fake Fitbit
serves it (adapters/makers/fake_fitbit.py, a real HTTP server on localhost, with Fitbit's
documented page sizes and range maxima: sleep 100 days a request, the activity time series
1095, HRV, breathing rate, SpO2 and skin temperature 30, weight and fat 31, the activity
log list 100 logs a page, the intraday heart rate a day a request at one-minute detail),
pulled and stored by the service (bench/maker_history.py runs it). Fitbit's hourly quota
(150 requests a person) is off in the fake here: the figure is our side's work; the
requests it prints say how many hours of quota the same history takes at Fitbit.
Targets: under 60 s, resident memory under 300 MB.

    .venv/bin/python bench/fitbit_history.py [--days 730] [--database-url URL] [--check]

It prints a report; `--check` exits 1 on a missed target or a pull that did not succeed.
"""

from __future__ import annotations

import sys

from healthledger.adapters.makers.fake_fitbit import running_fake_fitbit
from maker_history import Maker, main

FITBIT = Maker("fitbit", "Fitbit", running_fake_fitbit, "fitbit_api_url", "fitbit_history_days")

if __name__ == "__main__":
    sys.exit(main(FITBIT, __doc__.split("\n")[0]))
