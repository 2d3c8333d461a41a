"""`healthledger rebuild` killed (SIGKILL) in the middle, then run again: it resumes where
the killed one's last committed batch left off, and the read models come out as the log
made them (ADR 0021)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.projections.rebuild import unfinished_rebuild
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

from tests.conftest import Team
from tests.integration.populated import events_after, read_models, write_a_log


def test_a_killed_rebuild_is_resumed_by_the_next_to_the_same_read_models(
    settings: Settings,
    service: Service,
    team: Team,
    other_team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_a_log(service, team, other_team, ctx)
    for n in range(60):  # enough batches of one event for the kill to land mid-way
        service.users.create_user(ctx, team.team_id, client_user_id=f"more-{n}")
    before = read_models(service)
    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": settings.database_url,
        "HEALTHLEDGER_MASTER_KEY_FILE": str(settings.master_key_file),
    }
    rebuilding = subprocess.Popen(
        [
            *(sys.executable, "-m", "healthledger.adapters.cli", "rebuild"),
            *("--batch-events", "1", "--commit-events", "1"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while (unfinished_rebuild(service.db) or 0) < 20:
            assert rebuilding.poll() is None, "the rebuild ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(rebuilding.pid, signal.SIGKILL)
    finally:
        rebuilding.wait(timeout=30)
    stopped_at = unfinished_rebuild(service.db)
    assert stopped_at is not None and stopped_at >= 20
    assert read_models(service) == before  # the live read models never changed

    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))
    assert main(["rebuild"]) == 0
    out = capsys.readouterr().out
    # It went on from the killed one's last committed batch, or a later one it reached
    # between our look and the kill.
    resumed = int(out.rsplit("resumed after event ", 1)[1].split()[0])
    assert resumed >= stopped_at
    assert f"from {events_after(service, resumed)} events" in out
    assert read_models(service) == before
    assert unfinished_rebuild(service.db) is None
