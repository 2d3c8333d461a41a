"""WHOOP history benchmark (issue 31): two years of a person's WHOOP, as the fake WHOOP
serves it (adapters/makers/fake_whoop.py, a real HTTP server on localhost, pages of 25
records, `nextToken` to the end), pulled and stored by the service (bench/maker_history.py
runs it). Targets: under 60 s, resident memory under 300 MB.

    .venv/bin/python bench/whoop_history.py [--days 730] [--database-url URL] [--check]

It prints a report; `--check` exits 1 on a missed target or a pull that did not succeed.
"""

from __future__ import annotations

import sys

from healthledger.adapters.makers.fake_whoop import running_fake_whoop
from maker_history import Maker, main

WHOOP = Maker("whoop_v2", "WHOOP", running_fake_whoop, "whoop_api_url", "whoop_history_days")

if __name__ == "__main__":
    sys.exit(main(WHOOP, __doc__.split("\n")[0]))
