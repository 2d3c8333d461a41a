"""Oura history benchmark (issue 28): two years of a person's Oura, as the fake Oura
serves it (adapters/makers/fake_oura.py, a real HTTP server on localhost, with its page
sizes), pulled and stored by the service (bench/maker_history.py runs it).

A fresh service on a SQLite file (or `--database-url`), the fake Oura, one person signed
in through the link page's OAuth flow (the link page and the team API in process, the fake
over TCP), then every historical pull run to its end: 730 days of every resource Oura
gives, 7-day chunks, every page. Targets: under 60 s, resident memory under 300 MB.

    .venv/bin/python bench/oura_history.py [--days 730] [--database-url URL] [--check]

It prints a report; `--check` exits 1 on a missed target or a pull that did not succeed.
"""

from __future__ import annotations

import sys

from healthledger.adapters.makers.fake_oura import running_fake_oura
from maker_history import Maker, main

OURA = Maker("oura", "Oura", running_fake_oura, "oura_api_url", "oura_history_days")

if __name__ == "__main__":
    sys.exit(main(OURA, __doc__.split("\n")[0]))
