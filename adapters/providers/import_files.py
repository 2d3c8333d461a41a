"""Where uploaded exports wait for their import: one file per import in a folder
(`HEALTHLEDGER_IMPORT_DIR`), named by the import's id, kept until the import ends.

The folder is what makes an import survive a restart: a worker that starts finds the
files still kept and runs the imports that are due (domain/connections/imports.py). The
processes of one host share it; processes on several hosts need it on a shared volume.
An upload is written to `<id>.part` and renamed to `<id>.zip` once whole, so a worker
never reads a file still arriving.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

from healthledger.adapters.providers.apple_health import SPILL_PREFIX, AppleHealthReading
from healthledger.domain.connections.imports import FILE_GONE, ImportRefused

_SUFFIX = ".zip"
_PARTIAL = ".part"
# What a crashed process leaves behind (an upload cut off, a read's spill folder) is
# removed once nothing has written to it for this long: far longer than an upload's
# deadline or a running import's silence (its spill file is written as it goes).
LEFTOVER_AFTER = 24 * 3600.0


class UploadTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"The upload is larger than {limit} bytes.")
        self.limit = limit


class ImportFolder:
    """The domain's ImportFiles port on a folder."""

    def __init__(self, folder: Path, *, max_xml_bytes: int) -> None:
        self.folder = folder
        self.max_xml_bytes = max_xml_bytes

    def _ready(self) -> Path:
        # Private: the uploads are a person's health data.
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.folder

    def path(self, import_id: UUID) -> Path:
        return self.folder / f"{import_id}{_SUFFIX}"

    async def receive(self, import_id: UUID, chunks: AsyncIterator[bytes], limit: int) -> int:
        """Write an upload as it streams in, never whole in memory; its size. Raises
        UploadTooLarge (nothing kept) past `limit` bytes."""
        partial = self._ready() / f"{import_id}{_PARTIAL}"
        size = 0
        try:
            with open(partial, "xb") as out:
                os.chmod(partial, 0o600)
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        raise UploadTooLarge(limit)
                    out.write(chunk)
            partial.rename(self.path(import_id))
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return size

    def keep_copy(self, import_id: UUID, source: Path, limit: int) -> int:
        """Copy a local file in as an upload (the command line's); its size."""
        size = source.stat().st_size
        if size > limit:
            raise UploadTooLarge(limit)
        partial = self._ready() / f"{import_id}{_PARTIAL}"
        try:
            with open(source, "rb") as given, open(partial, "xb") as out:
                os.chmod(partial, 0o600)
                while chunk := given.read(1 << 20):
                    out.write(chunk)
            partial.rename(self.path(import_id))
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return size

    def open(self, import_id: UUID, user_id: UUID) -> AppleHealthReading:
        path = self.path(import_id)
        if not path.exists():
            raise ImportRefused(FILE_GONE, "The uploaded file is no longer kept: upload it again.")
        return AppleHealthReading(
            path, user_id, max_xml_bytes=self.max_xml_bytes, spill_dir=self._ready()
        )

    def sweep_leftovers(self, now: float | None = None) -> int:
        """Remove uploads cut off and spill folders of reads that died, untouched for
        LEFTOVER_AFTER; how many."""
        limit = (time.time() if now is None else now) - LEFTOVER_AFTER
        removed = 0
        for path in self.folder.iterdir():
            try:
                if path.is_dir() and path.name.startswith(SPILL_PREFIX):
                    touched = max(
                        [path.stat().st_mtime, *(f.stat().st_mtime for f in path.iterdir())]
                    )
                    if touched < limit:
                        shutil.rmtree(path, ignore_errors=True)
                        removed += 1
                elif path.suffix == _PARTIAL and path.stat().st_mtime < limit:
                    path.unlink(missing_ok=True)
                    removed += 1
            except FileNotFoundError:
                continue  # removed meanwhile (its import ended)
        return removed

    def discard(self, import_id: UUID) -> None:
        self.path(import_id).unlink(missing_ok=True)

    def waiting(self) -> list[UUID]:
        if not self.folder.is_dir():
            return []
        self.sweep_leftovers()
        found = []
        for path in sorted(self.folder.glob(f"*{_SUFFIX}")):
            try:
                found.append(UUID(path.name.removesuffix(_SUFFIX)))
            except ValueError:
                continue
        return found
