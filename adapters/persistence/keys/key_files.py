"""Key files kept outside the database: where they live by default, and how they are
written, checked and destroyed.

The service's secrets that must never sit in the database or beside it (the master key,
the service's signing key) are small files in one private directory: by default
`$XDG_CONFIG_HOME/healthledger` (else `~/.config/healthledger`), created 0700, each file
0600. A copy of the database's directory (a backup, a snapshot of its volume) then never
carries the key that opens what the database holds.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

# Owner read and write only: what every key file is created with, and what a key file
# found with more (any group or other bit) is refused for.
PRIVATE_FILE_MODE = stat.S_IRUSR | stat.S_IWUSR
PRIVATE_DIRECTORY_MODE = stat.S_IRWXU
_OTHERS = stat.S_IRWXG | stat.S_IRWXO


def default_key_directory() -> Path:
    """Where the service keeps its key files unless told otherwise:
    `$XDG_CONFIG_HOME/healthledger`, else `~/.config/healthledger`. The XDG base directory
    specification ignores a relative XDG_CONFIG_HOME, and so do we."""
    configured = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(configured) if configured and os.path.isabs(configured) else None
    return (base or Path.home() / ".config") / "healthledger"


def make_private_directory(directory: Path) -> None:
    """Create `directory` and any missing parent with mode 0700 (an existing one is left
    as it is: an operator may have chosen its mode)."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        # Another process may make it meanwhile: that is as good.
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=PRIVATE_DIRECTORY_MODE)


def exposure(path: Path) -> str | None:
    """Why the key file at `path` is readable or writable by others than its owner (its
    mode), or None when it is private."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & _OTHERS:
        return f"its mode is {mode:04o}, open to its group or others (chmod 600 {path})"
    return None


def write_private_file(path: Path, content: bytes, *, replace: bool) -> bool:
    """Write `content` to `path` (0600, its directory made 0700 if missing) so that a crash
    leaves either the old file or the new one, never a part: written to a temporary file
    beside it, flushed to disk, then moved into place and the directory flushed too.

    With `replace`, an existing file is replaced. Without, an existing file wins (another
    process wrote it first) and False is returned: nothing was written."""
    make_private_directory(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(temporary, path)
        else:
            try:
                # A hard link fails if the name exists: of two processes creating the
                # same file, exactly one wins.
                os.link(temporary, path)
            except FileExistsError:
                return False
            finally:
                temporary.unlink(missing_ok=True)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    sync_directory(path.parent)
    return True


def destroy_file(path: Path) -> None:
    """Overwrite the file's bytes in place with random ones, flush them to disk, then
    remove it. On a copy-on-write or journalling file system the old blocks may survive
    below the file system; what this removes is every copy reachable through it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    with path.open("r+b") as handle:
        handle.write(os.urandom(size))
        handle.flush()
        os.fsync(handle.fileno())
    path.unlink()
    sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """Flush a directory's entries (a rename or unlink in it) to disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
