"""Where the master key comes from: the environment, a command that prints it (a secrets
manager), or a file that is private and, by default, outside the database's directory.
Each source is checked against the database's data keys at start."""

from __future__ import annotations

import base64
import stat
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.keys.key_files import default_key_directory
from healthledger.adapters.persistence.keys.master_key import (
    CommandKeySource,
    MasterKeyError,
    master_key_id,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

from tests.conftest import Team

KEY = bytes(range(32))


@pytest.fixture(autouse=True)
def private_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default key directory (`default_key_directory()`), used where a test sets no key
    # file, is the test's own: never the home directory of whoever runs the tests.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


KEY_TEXT = base64.b64encode(KEY).decode()


def birth_date_of(service: Service, user_id: object) -> object:
    user = service.ledger.find(user_id)  # type: ignore[arg-type]
    assert user is not None
    sealed = user.sealed_birth_date  # type: ignore[attr-defined]
    return service.key_store.open(user.id, sealed[0])


def make_user(service: Service, team: Team, ctx: CommandContext, name: str) -> object:
    user = service.users.create_user(
        ctx, team.team_id, client_user_id=name, fallback_birth_date=date(1980, 5, 6)
    )
    return user.id


def key_script(tmp_path: Path, body: str) -> str:
    """A command (the test's own Python) that runs `body`: a stand-in for a secrets
    manager's client."""
    script = tmp_path / "secrets-client.py"
    script.write_text(body)
    return f"{sys.executable} {script}"


# -- the sources, in order --------------------------------------------------------------------


def test_the_environment_variable_holds_the_key_and_no_file_is_made(
    settings: Settings, ctx: CommandContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY", KEY_TEXT)
    from_env = Settings(database_url=settings.database_url)
    service = build_service(from_env)
    try:
        team = service.bootstrap()
        assert team is not None
        user_id = make_user(service, Team(team.team_id, ""), ctx, "env")
        assert birth_date_of(service, user_id) == "1980-05-06"
        assert service.key_store.master.key_id == master_key_id(KEY)
    finally:
        service.close()
    assert not from_env.master_key_file.exists()
    assert not settings.master_key_file.exists()
    # The variable wins over a key file that is configured too.
    both = settings.model_copy(update={"master_key": from_env.master_key})
    service = build_service(both)
    try:
        assert service.key_store.master.key_id == master_key_id(KEY)
    finally:
        service.close()
    assert not settings.master_key_file.exists()


def test_a_command_prints_the_key_and_wins_over_the_file(
    settings: Settings, ctx: CommandContext, tmp_path: Path
) -> None:
    command = key_script(tmp_path, f"print({KEY_TEXT!r})")
    service = build_service(settings.model_copy(update={"master_key_command": command}))
    try:
        assert service.key_store.master.key_id == master_key_id(KEY)
        team = service.bootstrap()
        assert team is not None
        user_id = make_user(service, Team(team.team_id, ""), ctx, "cmd")
        assert birth_date_of(service, user_id) == "1980-05-06"
    finally:
        service.close()
    assert not settings.master_key_file.exists()


def test_a_failing_command_is_named_with_its_status_never_its_output(tmp_path: Path) -> None:
    secret = "s3cr3t-token-printed-by-the-client"
    failing = key_script(
        tmp_path, f"import sys\nprint({secret!r})\nprint({secret!r}, file=sys.stderr)\nsys.exit(3)"
    )
    with pytest.raises(MasterKeyError) as raised:
        CommandKeySource(failing + " --token " + secret).load(create=False)
    message = str(raised.value)
    assert "exited with status 3" in message and sys.executable in message
    assert secret not in message and "--token" not in message

    garbage = key_script(tmp_path, f"print({secret!r})")
    with pytest.raises(MasterKeyError, match="is not base64") as raised:
        CommandKeySource(garbage).load(create=False)
    assert secret not in str(raised.value)

    with pytest.raises(MasterKeyError, match="could not be run"):
        CommandKeySource(str(tmp_path / "no-such-client")).load(create=False)

    slow = key_script(tmp_path, "import time\ntime.sleep(60)")
    with pytest.raises(MasterKeyError, match=r"did not finish within 0\.2 s"):
        CommandKeySource(slow, timeout=timedelta(seconds=0.2)).load(create=False)


def test_a_bad_key_in_the_environment_stops_the_command_line(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY", base64.b64encode(b"short").decode())
    assert main(["erase-due"]) == 1
    error = capsys.readouterr().err
    assert "HEALTHLEDGER_MASTER_KEY must hold 32 bytes" in error and "Traceback" not in error


# -- the key file -----------------------------------------------------------------------------


def test_the_default_key_file_is_private_and_outside_the_database_directory(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    assert default_key_directory() == config / "healthledger"
    settings = Settings(database_url=database_url)
    assert settings.master_key_file == config / "healthledger" / "master.key"
    build_service(settings).close()
    key_file = settings.master_key_file
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(config.stat().st_mode) == 0o700
    assert len(base64.b64decode(key_file.read_text())) == 32
    # The key file and its lock file (the signing key may sit beside them); no staged
    # or temporary key file is left.
    names = {p.name for p in key_file.parent.iterdir()}
    assert {".master.key.lock", "master.key"} <= names
    assert not any(name.endswith((".next", ".tmp")) for name in names)

    # Without XDG_CONFIG_HOME (or with a relative one, which the spec ignores): ~/.config.
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_key_directory() == tmp_path / "home" / ".config" / "healthledger"


def test_a_key_file_open_to_others_is_refused(
    settings: Settings, service: Service, team: Team
) -> None:
    key_file = settings.master_key_file
    for mode in (0o640, 0o604, 0o620):
        key_file.chmod(mode)
        with pytest.raises(MasterKeyError, match=f"not private: its mode is 0{mode:o}"):
            build_service(settings)
    key_file.chmod(0o600)
    build_service(settings).close()


def test_a_key_file_in_the_sqlite_database_directory_is_refused_unless_allowed(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = build_service(settings)
    service.close()
    if not service.db.is_sqlite:
        pytest.skip("PostgreSQL keeps no database file beside which a key could sit")
    database_file = service.db.sqlite_file
    assert database_file is not None
    beside = database_file.parent / "master.key"
    settings.master_key_file.rename(beside)
    # The signing key stays where it was (by default it follows the master key's file).
    moved = settings.model_copy(
        update={
            "master_key_file": beside,
            "signing_key_file": settings.master_key_file.parent / "healthledger.signing.key",
        }
    )
    with pytest.raises(MasterKeyError, match="in the database's own directory") as raised:
        build_service(moved)
    assert "HEALTHLEDGER_ALLOW_KEY_BESIDE_DATABASE" in str(raised.value)
    # The same through a relative path (the check compares resolved directories).
    monkeypatch.chdir(database_file.parent)
    relative = moved.model_copy(update={"master_key_file": Path("master.key")})
    with pytest.raises(MasterKeyError, match="in the database's own directory"):
        build_service(relative)
    build_service(moved.model_copy(update={"allow_key_beside_database": True})).close()


def test_a_missing_key_file_names_the_setting_and_the_former_default(
    settings: Settings,
    service: Service,
    team: Team,
    ctx: CommandContext,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_user(service, team, ctx, "needs-a-key")
    # Earlier versions kept the key in ./healthledger.master.key by default.
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    (workdir / "healthledger.master.key").write_text(KEY_TEXT)
    monkeypatch.chdir(workdir)
    elsewhere = settings.model_copy(update={"master_key_file": tmp_path / "keys" / "master.key"})
    with pytest.raises(MasterKeyError) as raised:
        build_service(elsewhere)
    message = str(raised.value)
    assert "HEALTHLEDGER_MASTER_KEY_FILE" in message and "healthledger.master.key" in message
    assert not elsewhere.master_key_file.exists()


def test_a_key_that_is_not_the_databases_is_refused_at_start(
    settings: Settings,
    service: Service,
    team: Team,
    ctx: CommandContext,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_user(service, team, ctx, "keyed")
    other = tmp_path / "other" / "master.key"
    other.parent.mkdir(mode=0o700)
    other.write_text(KEY_TEXT)
    other.chmod(0o600)
    with pytest.raises(MasterKeyError, match="does not open the database's data keys"):
        build_service(settings.model_copy(update={"master_key_file": other}))
    # After a rotation the database names its key: the message says which it wants.
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))
    assert main(["keys", "rotate-master"]) == 0
    current = master_key_id(base64.b64decode(settings.master_key_file.read_text()))
    with pytest.raises(MasterKeyError, match=f"wrapped by master key {current}"):
        build_service(settings.model_copy(update={"master_key_file": other}))
