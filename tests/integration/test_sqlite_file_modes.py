"""The SQLite database holds personal data: the service creates its file, and SQLite its
-wal and -shm files, readable and writable by the owner only (issue 30 §4), whatever the
umask. An existing file keeps its mode."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from healthledger.adapters.composition import build_service
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.sqlite import create_private
from healthledger.adapters.settings import Settings
from sqlalchemy.engine import make_url


@pytest.fixture
def usual_umask() -> Iterator[None]:
    # The usual umask, which would make a new file 0644.
    before = os.umask(0o022)
    yield
    os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_and_its_wal_and_shm_are_0600(tmp_path: Path, usual_umask: None) -> None:
    path = tmp_path / "database" / "ledger.db"
    path.parent.mkdir()
    service = build_service(
        Settings(database_url=f"sqlite:///{path}", master_key_file=tmp_path / "master.key")
    )
    try:
        service.bootstrap()  # writes: the WAL and its index are in use
        files = [path, path.with_name("ledger.db-wal"), path.with_name("ledger.db-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: oct(mode(f)) for f in files} == {f.name: "0o600" for f in files}
    finally:
        service.close()


def test_the_receivers_database_is_0600_too(tmp_path: Path, usual_umask: None) -> None:
    path = tmp_path / "mirror.db"
    db = Database(f"sqlite:///{path}")
    try:
        with db.write() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        assert oct(mode(path)) == "0o600"
        assert oct(mode(path.with_name("mirror.db-wal"))) == "0o600"
    finally:
        db.dispose()


def test_an_existing_file_keeps_its_mode(tmp_path: Path, usual_umask: None) -> None:
    path = tmp_path / "old.db"
    path.touch(mode=0o640)
    create_private(make_url(f"sqlite:///{path}"))
    assert oct(mode(path)) == "0o640"


def test_nothing_is_created_where_sqlite_would_refuse(tmp_path: Path) -> None:
    create_private(make_url(f"sqlite:///{tmp_path / 'missing' / 'x.db'}"))
    assert not (tmp_path / "missing").exists()
    create_private(make_url("sqlite:///file:x.db?mode=memory&uri=true"))
    assert not Path("file:x.db").exists()
