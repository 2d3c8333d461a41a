"""`healthledger serve` as a real process, for the e2e tests that talk to it over HTTP:
free local ports, the server started with a test's settings and stopped with SIGINT, and
the keys its first run prints."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
from healthledger.adapters.settings import Settings

from tests.ports import free_port

# The keys a first run prints (once, on the console).
KEY = re.compile(r"team API key\s+(hlk_\S+)")
MANAGEMENT_KEY = re.compile(r"management key\s+(hlm_\S+)")
# How long a server may take to answer before the test calls it hung: a guard against a
# start that never ends, not a measure of speed (the wait ends when the server answers).
# A start takes 10-15 s on this two-core machine alone (migrations, the zip codes read
# for the labs' areas), and took up to 41 s with the cores loaded: 30 s failed tests.
START_TIMEOUT = 120


@contextmanager
def running_server(
    settings: Settings,
    workdir: Path,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Iterator[tuple[str, str, str, list[str]]]:
    """`healthledger serve` (with `args`, and `env` over the test's settings) until the
    block ends: (team API, management API, link page, the console's lines once stopped)."""
    port, management_port, link_port = free_port(), free_port(), free_port()
    extra = dict(env or {})
    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": settings.database_url,
        "HEALTHLEDGER_MASTER_KEY_FILE": str(settings.master_key_file),
        "HEALTHLEDGER_TEAM_API_PORT": str(port),
        "HEALTHLEDGER_MANAGEMENT_API_PORT": str(management_port),
        "HEALTHLEDGER_LINK_PORT": str(link_port),
        "HEALTHLEDGER_LINK_URL": f"http://127.0.0.1:{link_port}",
        "HEALTHLEDGER_PUBLIC_BASE_URL": f"http://127.0.0.1:{port}",
        "HEALTHLEDGER_LOG_LEVEL": "warning",
        **extra,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "healthledger.adapters.cli", "serve", *args],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    management = f"http://127.0.0.1:{management_port}"
    link = f"http://127.0.0.1:{link_port}"
    # Before the wait: a server that does not start fails on its own message, not here.
    output: list[str] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT
        for url in (f"{base}/openapi.json", f"{management}/openapi.json", f"{link}/"):
            while True:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                try:
                    httpx.get(url, timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "server did not start"
                    time.sleep(0.1)
        yield base, management, link, output
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
        output.extend(out.splitlines())
        assert process.returncode == 0, out
