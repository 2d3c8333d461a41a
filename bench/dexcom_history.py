"""Dexcom history benchmark (issue 31): two years of a person's glucose at Dexcom, as the
fake Dexcom serves it (adapters/makers/fake_dexcom.py, a real HTTP server on localhost: an
estimated glucose value every 5 minutes, 210,000 of them; the reader asks a 7-day chunk in
one window, Dexcom allowing 30), pulled and stored by the service (bench/maker_history.py
runs it). Targets: under 60 s, resident memory under 300 MB.

    .venv/bin/python bench/dexcom_history.py [--days 730] [--database-url URL] [--check]

It prints a report; `--check` exits 1 on a missed target or a pull that did not succeed.
"""

from __future__ import annotations

import sys

from healthledger.adapters.makers.fake_dexcom import running_fake_dexcom
from maker_history import Maker, main

DEXCOM = Maker("dexcom", "Dexcom", running_fake_dexcom, "dexcom_api_url", "dexcom_history_days")

if __name__ == "__main__":
    sys.exit(main(DEXCOM, __doc__.split("\n")[0]))
