"""Where the master key comes from: an environment variable, a command that prints it (a
secrets manager's client), or a file outside the database's directory.

The master key wraps every user's data key (`key_store.py`). It never enters the
database, and by default it never sits beside it either: a copy of the database's
directory (a backup, a volume snapshot) must not carry the key that opens it.

A source also takes part in a rotation of the master key (`KeyStore.rotate_master_key`):
the new key is `stage`d durably before the rewrapped data keys commit, then the source
`commit_staged` (the file source puts it in place of the old key, which it destroys) or,
if the rotation does not commit, `discard_staged`. Only the file source can do this on its
own; the others hand the new key to the operator (`new_key_file`), who stores it in the
secrets manager.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import hmac
import os
import shlex
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from healthledger.adapters.persistence.keys.key_files import (
    PRIVATE_FILE_MODE,
    default_key_directory,
    destroy_file,
    exposure,
    make_private_directory,
    sync_directory,
    write_private_file,
)

KEY_BYTES = 32
MASTER_KEY_VARIABLE = "HEALTHLEDGER_MASTER_KEY"
MASTER_KEY_COMMAND_VARIABLE = "HEALTHLEDGER_MASTER_KEY_COMMAND"
MASTER_KEY_FILE_VARIABLE = "HEALTHLEDGER_MASTER_KEY_FILE"
ALLOW_BESIDE_VARIABLE = "HEALTHLEDGER_ALLOW_KEY_BESIDE_DATABASE"
# How long the key command may take: a secrets manager's client makes a network call.
COMMAND_TIMEOUT = timedelta(seconds=30)
# The file name of the key before this release made the default the key directory: named
# in the error that a missing key file gives, so that an operator finds it.
FORMER_DEFAULT_FILE = Path("healthledger.master.key")


class MasterKeyError(RuntimeError):
    pass


def default_master_key_file() -> Path:
    return default_key_directory() / "master.key"


def master_key_id(key: bytes) -> str:
    """The key's public name: which master key wrapped the data keys, recorded with each
    rotation, without revealing anything of the key."""
    return hmac.new(key, b"healthledger-master-key-id", hashlib.sha256).hexdigest()[:16]


def new_master_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def encoded(key: bytes) -> bytes:
    return base64.b64encode(key) + b"\n"


def decoded(text: str | bytes, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MasterKeyError(f"{where} is not base64") from exc
    if len(key) != KEY_BYTES:
        raise MasterKeyError(f"{where} must hold {KEY_BYTES} bytes (base64)")
    return key


class MasterKeySource:
    """Where the master key comes from. `name` says which setting, for messages (never
    the key, nor a command's output)."""

    name: str
    # Whether a rotation can put the new key in place by itself (the scheduler's).
    rotates_unattended: bool = False

    def load(self, *, create: bool) -> bytes:
        """The key. `create`: make one if there is none (only for a database that holds
        no data key yet: pointing a database at the wrong key must not mint another)."""
        raise MasterKeyError(f"{self.name} cannot give a key")

    def load_current(self, key_id: str) -> bytes | None:
        """The key named `key_id` as the source gives it now (after a rotation another
        process made), or None if it gives another one."""
        key = self.load(create=False)
        return key if master_key_id(key) == key_id else None

    @contextmanager
    def rotating(self) -> Iterator[None]:
        """Held around a whole rotation: stage, the rewrap's transaction, commit."""
        yield

    def settle(self, current_key_id: str | None) -> None:
        """Finish or undo a rotation that a crash cut short, given the id of the key the
        database's latest rotation names."""

    def stage(self, key: bytes) -> None:
        raise MasterKeyError(f"{self.name} cannot take a new key")

    def commit_staged(self) -> None:
        pass

    def discard_staged(self) -> None:
        pass

    def after_rotation(self) -> str:
        """What the operator must do now (printed by `keys rotate-master`)."""
        return ""


@dataclass
class FileKeySource(MasterKeySource):
    """The key in a file: base64 on one line, mode 0600, in a private directory. The only
    source that rotates unattended: the new key is written beside the old one
    (`<file>.next`), the old file's bytes are overwritten once the rotation committed, and
    the new file takes its place. A crash between the two is settled at the next start
    (`settle`). A lock file in the same directory (`flock`) keeps two processes of this
    machine from rotating the same file at once."""

    path: Path
    # SQLite: the database file's directory, where the key may not sit (unless allowed).
    database_directory: Path | None = None
    allow_beside_database: bool = False
    rotates_unattended: bool = True
    name: str = field(init=False)
    # Whether this thread holds the lock file (a rotation settles under the lock it holds).
    holding: threading.local = field(default_factory=threading.local, init=False, repr=False)

    def __post_init__(self) -> None:
        self.name = f"{MASTER_KEY_FILE_VARIABLE} ({self.path})"

    @property
    def staged_path(self) -> Path:
        return self.path.with_name(self.path.name + ".next")

    def check_location(self) -> None:
        if self.database_directory is None or self.allow_beside_database:
            return
        directory = self.path.absolute().parent.resolve()
        if directory == self.database_directory.resolve():
            raise MasterKeyError(
                f"the master key file {self.path} is in the database's own directory: a copy "
                "or backup of that directory would hold both the wrapped data keys and the "
                f"key that opens them. Move it (the default is {default_master_key_file()}) "
                f"and set {MASTER_KEY_FILE_VARIABLE}, or set {ALLOW_BESIDE_VARIABLE}=true"
            )

    def load(self, *, create: bool) -> bytes:
        self.check_location()
        if not self.path.exists():
            if not create:
                raise MasterKeyError(self._missing())
            with self._locked():
                write_private_file(self.path, encoded(new_master_key()), replace=False)
        return self._read(self.path)

    def load_current(self, key_id: str) -> bytes | None:
        # Read only (no lock): a rotation in another process may be replacing the file
        # right now, overwriting the old one first; the staged key is read meanwhile.
        for _attempt in range(3):
            for path in (self.path, self.staged_path):
                try:
                    key = self._read(path)
                except (FileNotFoundError, MasterKeyError):
                    continue
                if master_key_id(key) == key_id:
                    return key
        return None

    @contextmanager
    def rotating(self) -> Iterator[None]:
        with self._locked():
            yield

    def settle(self, current_key_id: str | None) -> None:
        if not self.staged_path.exists():
            return
        with self._locked():
            try:
                staged = self._read(self.staged_path)
            except FileNotFoundError:
                return  # another process settled it meanwhile
            except MasterKeyError:
                staged = None
            if staged is not None and master_key_id(staged) == current_key_id:
                self.commit_staged()  # the rotation committed: finish it
            else:
                destroy_file(self.staged_path)  # it did not: the old key still stands

    def stage(self, key: bytes) -> None:
        write_private_file(self.staged_path, encoded(key), replace=True)

    def commit_staged(self) -> None:
        # The old key's bytes are overwritten in place first (the replace then drops the
        # file): a crash after it leaves the staged key, which `settle` puts in place.
        if self.path.exists():
            size = self.path.stat().st_size
            with self.path.open("r+b") as handle:
                handle.write(os.urandom(size))
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(self.staged_path, self.path)
        sync_directory(self.path.parent)

    def discard_staged(self) -> None:
        destroy_file(self.staged_path)

    def after_rotation(self) -> str:
        return (
            f"The new master key replaced the old one in {self.path}; the old key was "
            "overwritten. Running processes that read this file pick the new key up by "
            "themselves."
        )

    def _read(self, path: Path) -> bytes:
        problem = exposure(path)
        if problem is not None:
            raise MasterKeyError(f"the master key file {path} is not private: {problem}")
        return decoded(path.read_bytes(), f"the master key file {path}")

    def _missing(self) -> str:
        message = (
            f"the master key file {self.path} does not exist, but the database holds data "
            f"keys wrapped by a master key: set {MASTER_KEY_FILE_VARIABLE} to its file"
        )
        if FORMER_DEFAULT_FILE.exists() and FORMER_DEFAULT_FILE.absolute() != self.path:
            message += (
                f" (./{FORMER_DEFAULT_FILE} is here, where earlier versions kept it by "
                f"default: move it to {self.path}, or set {MASTER_KEY_FILE_VARIABLE})"
            )
        return message

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if getattr(self.holding, "active", False):
            yield
            return
        make_private_directory(self.path.parent)
        lock = self.path.with_name(f".{self.path.name}.lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        try:
            # Two descriptors conflict even in one process: threads take turns too.
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.holding.active = True
            try:
                yield
            finally:
                self.holding.active = False
        finally:
            os.close(fd)  # closing the descriptor releases the lock


class HandedOverKey(MasterKeySource):
    """A source the service cannot write to (the environment, a secrets manager): a
    rotation writes the new key to a file of the operator's choosing (`new_key_file`),
    which the operator stores in the source and then destroys."""

    def __init__(self) -> None:
        self.new_key_file: Path | None = None

    def stage(self, key: bytes) -> None:
        if self.new_key_file is None:
            raise MasterKeyError(
                f"the master key comes from {self.name}, which this service cannot write: "
                "give --new-key-file PATH to receive the new key, then store it there"
            )
        if not write_private_file(self.new_key_file, encoded(key), replace=False):
            raise MasterKeyError(f"{self.new_key_file} exists: name a new file for the new key")

    def discard_staged(self) -> None:
        if self.new_key_file is not None:
            destroy_file(self.new_key_file)

    def after_rotation(self) -> str:
        return (
            f"The data keys are now wrapped by the new master key, written to "
            f"{self.new_key_file}. Now: store it in place of the old key in {self.name}, "
            f"then destroy {self.new_key_file} (shred -u) and every other copy of the old "
            "key. Until then, processes that load the key from the old value cannot open "
            "personal data."
        )


class EnvironmentKeySource(HandedOverKey):
    """HEALTHLEDGER_MASTER_KEY: the key itself, base64. A process cannot read a changed
    environment: after a rotation, processes started with the old value must restart."""

    def __init__(self, value: str) -> None:
        super().__init__()
        self.name = MASTER_KEY_VARIABLE
        self.value = value

    def load(self, *, create: bool) -> bytes:
        return decoded(self.value, MASTER_KEY_VARIABLE)

    def after_rotation(self) -> str:
        return super().after_rotation() + (
            f" Restart every process that reads {MASTER_KEY_VARIABLE} with the new value."
        )


class CommandKeySource(HandedOverKey):
    """HEALTHLEDGER_MASTER_KEY_COMMAND: a command (no shell; split as a shell would split
    words) that prints the key, base64. Run again when the database names a newer key, so
    that a rotation stored in the secrets manager reaches running processes."""

    def __init__(self, command: str, timeout: timedelta = COMMAND_TIMEOUT) -> None:
        super().__init__()
        self.name = MASTER_KEY_COMMAND_VARIABLE
        self.argv = shlex.split(command)
        self.timeout = timeout
        if not self.argv:
            raise MasterKeyError(f"{MASTER_KEY_COMMAND_VARIABLE} is empty")

    def load(self, *, create: bool) -> bytes:
        # Only the program's name is ever shown: its arguments may carry a token, and its
        # output (or error output) may carry the key.
        program = self.argv[0]
        try:
            done = subprocess.run(
                self.argv,
                capture_output=True,
                timeout=self.timeout.total_seconds(),
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise MasterKeyError(
                f"the master key command ({program}) did not finish within "
                f"{self.timeout.total_seconds():g} s"
            ) from None
        except OSError as exc:
            raise MasterKeyError(
                f"the master key command ({program}) could not be run: {exc.strerror}"
            ) from None
        if done.returncode != 0:
            raise MasterKeyError(
                f"the master key command ({program}) exited with status {done.returncode}"
            )
        return decoded(done.stdout, f"the output of the master key command ({program})")


def master_key_source(
    *,
    value: str | None,
    command: str | None,
    file: Path,
    database_file: Path | None,
    allow_beside_database: bool,
) -> MasterKeySource:
    """The first configured of: HEALTHLEDGER_MASTER_KEY, HEALTHLEDGER_MASTER_KEY_COMMAND,
    HEALTHLEDGER_MASTER_KEY_FILE (which has a default). `database_file`: the SQLite
    database's file, whose directory the key file may not share."""
    if value is not None:
        return EnvironmentKeySource(value)
    if command is not None:
        return CommandKeySource(command)
    return FileKeySource(
        file,
        database_directory=None if database_file is None else database_file.absolute().parent,
        allow_beside_database=allow_beside_database,
    )
