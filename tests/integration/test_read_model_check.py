"""`healthledger verify --read-models` (issue 30 §3): the read models rebuilt from the log
into a scratch copy and compared with the live ones; a read model changed behind the
log's back (every pending erasure deleted, so those users would never be erased) is named
row by row. On both databases."""

from __future__ import annotations

import pytest
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.integrity.read_model_check import (
    EXTRA,
    MISSING,
    ReadModelCheck,
    check_read_models,
)
from healthledger.adapters.persistence.projections.rebuild import unfinished_rebuild
from healthledger.adapters.settings import Settings
from sqlalchemy import text

from tests.conftest import Team
from tests.integration.test_chain import execute, write_log


@pytest.fixture(autouse=True)
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))


def check(service: Service) -> ReadModelCheck:
    return check_read_models(service.read_models, service.recorder, service.ledger.mapper)


def test_read_models_as_the_log_makes_them_pass_and_changed_rows_are_named(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    made = write_log(service, team, users=4)
    result = check(service)
    assert result.differences == [], [d.describe() for d in result.differences]
    assert result.events > 0 and result.rows_compared > 0
    assert unfinished_rebuild(service.db) is None  # the scratch copy is gone
    capsys.readouterr()
    assert main(["verify", "--read-models"]) == 0
    assert "read models: " in capsys.readouterr().out

    # Every pending erasure deleted: the sweep would never erase those users.
    execute(service, text("DELETE FROM pending_erasures"))
    execute(service, text("UPDATE users SET status = 'active' WHERE status <> 'active'"))
    found = check(service).differences
    missing = [d for d in found if d.table == "pending_erasures"]
    assert [d.kind for d in missing] == [MISSING]
    assert next(iter(missing[0].key.values())) in {made[-1], str(made[-1]), made[-1].hex}
    assert any(d.table == "users" and "status" in d.columns for d in found), found
    capsys.readouterr()
    assert main(["verify", "--read-models"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: pending_erasures (" in out and "missing from the live table" in out, out
    assert EXTRA not in [d.kind for d in missing]
