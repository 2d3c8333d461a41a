"""Fuzz both OpenAPI documents with schemathesis against a real server (`healthledger
serve`) on one database, with a fixed seed and a bounded number of examples.

    .venv/bin/python .ci/fuzz.py [--database-url URL] [--checks CHECKS]
                                 [--exclude-checks CHECKS] [--max-examples N]

Without --database-url the server runs on a SQLite file in a temporary directory; a
PostgreSQL URL gets a fresh schema, dropped at the end. The exit status is schemathesis's:
non-zero when a check failed (a 5xx with `not_a_server_error`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx
import sqlalchemy as sa

SEED = 17
# Path parameters pinned to what the server holds, so that requests reach past the 404
# of an unknown organization or team; the team deletion gets a team of its own.
CONFIG = """
[parameters]
"path.org_id" = "${LEDGER_ORG_ID}"
"path.team_id" = "${LEDGER_TEAM_ID}"
"path.user_id" = "${LEDGER_USER_ID}"

[[operations]]
include-method = "DELETE"
include-path = "/v1/org/{org_id}/team/{team_id}"
parameters = { "path.team_id" = "${LEDGER_SPARE_TEAM_ID}" }

# An event destination the fuzzer made (any host, a route "" that takes every type) would
# have the server connect out to it: creating and changing them is left to the tests
# (tests/integration/test_event_destinations.py holds their bad input).
[[operations]]
include-path-regex = "/event_destination"
include-method-regex = "POST|PATCH"
enabled = false
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fresh_schema(url: str) -> tuple[str, str]:
    schema = f"fuzz_{uuid.uuid4().hex[:12]}"
    with sa.create_engine(url).begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options={quote(f'-csearch_path={schema}')}", schema


def drop_schema(url: str, schema: str) -> None:
    with sa.create_engine(url).begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("--checks", default="all")
    parser.add_argument("--exclude-checks")
    parser.add_argument("--max-examples", type=int, default=30)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="healthledger-fuzz-"))
    database_url, schema = args.database_url, None
    if database_url is None:
        database_url = f"sqlite:///{workdir / 'ledger.db'}"
    elif database_url.startswith("postgresql"):
        database_url, schema = fresh_schema(args.database_url)
    team_port, management_port = free_port(), free_port()
    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": database_url,
        # Outside the database's directory, as the service requires.
        "HEALTHLEDGER_MASTER_KEY_FILE": str(workdir / "keys" / "master.key"),
        "HEALTHLEDGER_TEAM_API_PORT": str(team_port),
        "HEALTHLEDGER_MANAGEMENT_API_PORT": str(management_port),
        "HEALTHLEDGER_LINK_PORT": str(free_port()),
        "HEALTHLEDGER_LOG_LEVEL": "warning",
    }
    log = (workdir / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "healthledger.adapters.cli", "serve"],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    team = f"http://127.0.0.1:{team_port}"
    management = f"http://127.0.0.1:{management_port}"
    try:
        # A hang guard, not a pace: a start on the loaded machine took over 60 s (the
        # tests' running_server waits as long).
        deadline = time.monotonic() + 120
        for base in (team, management):
            while True:
                assert server.poll() is None, (workdir / "server.log").read_text()
                try:
                    httpx.get(f"{base}/openapi.json", timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server did not start"
                    time.sleep(0.2)
        # What the first run printed: the organization, the team and their two keys.
        printed = (workdir / "server.log").read_text()
        found = {}
        for name, label in (
            ("org", "organization"),
            ("team", "team   "),
            ("team_key", "team API key"),
            ("management_key", "management key"),
        ):
            match = re.search(rf"{label}\s+(\S+)", printed)
            assert match is not None, printed
            found[name] = match.group(1)
        admin = {"X-Management-Key": found["management_key"]}
        org = f"{management}/v1/org/{found['org']}"
        spare = httpx.post(f"{org}/team", json={"name": "Spare", "region": "us"}, headers=admin)
        httpx.put(f"{org}/team/{found['team']}/features/demographics", headers=admin)
        user = httpx.post(
            f"{team}/v2/user",
            json={"client_user_id": "fuzz-user"},
            headers={"x-service-api-key": found["team_key"]},
        )
        (workdir / "schemathesis.toml").write_text(CONFIG)
        fuzz_env = {
            **os.environ,
            "LEDGER_ORG_ID": found["org"],
            "LEDGER_TEAM_ID": found["team"],
            "LEDGER_SPARE_TEAM_ID": spare.json()["id"],
            "LEDGER_USER_ID": user.json()["user_id"],
            # Our serializers for media types schemathesis does not know (fuzz_hooks.py).
            "SCHEMATHESIS_HOOKS": "fuzz_hooks",
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])
            ),
        }
        status = 0
        for base, header in (
            (team, f"x-service-api-key: {found['team_key']}"),
            (management, f"X-Management-Key: {found['management_key']}"),
        ):
            where = f"{base}/openapi.json on {database_url.split(':')[0]}"
            # Schemathesis's report ends in a pytest-like "N warnings in Ns" line, which a
            # reader of the CI log (or a tool) takes for the test run's own summary: keep its
            # report for a failure and print one line of ours otherwise.
            run = subprocess.run(
                [
                    str(Path(sys.executable).parent / "schemathesis"),
                    "--config-file",
                    str(workdir / "schemathesis.toml"),
                    "run",
                    f"{base}/openapi.json",
                    "--header",
                    header,
                    "--checks",
                    args.checks,
                    *(["--exclude-checks", args.exclude_checks] if args.exclude_checks else []),
                    "--seed",
                    str(SEED),
                    "--max-examples",
                    str(args.max_examples),
                    "--workers",
                    "1",
                    "--no-color",
                ],
                env=fuzz_env,
                capture_output=True,
                text=True,
            )
            cases = re.search(r"Test cases:\s*\n\s*(.+)", run.stdout)
            if run.returncode:
                print(f"fuzz: FAILED {where}\n{run.stdout}{run.stderr}", flush=True)
            else:
                found = cases.group(1).strip() if cases else "no summary"
                print(f"fuzz: passed {where} ({found})", flush=True)
            status |= run.returncode
        if status:
            print("fuzz: the server's log:\n" + (workdir / "server.log").read_text()[-20_000:])
        return status
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
        log.close()
        if schema is not None:
            drop_schema(args.database_url, schema)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
