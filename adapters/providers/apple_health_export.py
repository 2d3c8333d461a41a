"""Apple Health's export file opened safely: the zip the Health app writes (`export.zip`
holding `apple_health_export/export.xml`), its XML streamed element by element.

What a hostile upload could do, and what stops it:

- Not a zip, or a zip without `export.xml`: refused with a fixed reason.
- A zip bomb: `export.xml` is read through a counter that stops at `max_xml_bytes` of
  uncompressed XML, whatever the zip's header claims.
- An XML bomb (entities expanding into gigabytes, external entities reading files):
  expat is asked to refuse any entity declaration; the export's own DTD declares
  elements and attributes only, so a real export never has one.
- Malformed XML: expat's error, reported by line number only (never the text).

expat is a streaming parser: nothing but the element being read is held, so memory stays
bounded whatever the size of the file.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO
from xml.parsers import expat

from healthledger.domain.connections.imports import (
    ENTITIES,
    MALFORMED,
    NO_EXPORT,
    NOT_A_ZIP,
    NOT_AN_EXPORT,
    TOO_LARGE,
    ImportRefused,
)

# The root element of an export.
ROOT = "HealthData"
# Read this much of the XML at a time.
CHUNK = 1 << 20

StartElement = Callable[[str, dict[str, str]], None]
EndElement = Callable[[str], None]


class _Refused(Exception):
    """Raised inside expat's handlers; turned into ImportRefused outside them."""

    def __init__(self, refused: ImportRefused) -> None:
        super().__init__(refused.message)
        self.refused = refused


def export_member(archive: zipfile.ZipFile) -> zipfile.ZipInfo:
    """The archive's `export.xml`: `apple_health_export/export.xml` as the Health app
    writes it (its folder's name is translated on some phones), or `export.xml` at the
    top. `export_cda.xml` (clinical documents) is not it."""
    found = [
        info
        for info in archive.infolist()
        if not info.is_dir() and info.filename.rsplit("/", 1)[-1] == "export.xml"
    ]
    if not found:
        raise ImportRefused(NO_EXPORT, "The zip holds no apple_health_export/export.xml.")
    found.sort(key=lambda info: (info.filename != "apple_health_export/export.xml", info.filename))
    return found[0]


def check_upload(path: Path) -> None:
    """What can be told of an upload at once (its central directory only): a zip that
    holds an export.xml. Raises ImportRefused."""
    try:
        with zipfile.ZipFile(path) as archive:
            export_member(archive)
    except (zipfile.BadZipFile, OSError, ValueError):
        raise ImportRefused(NOT_A_ZIP, "The upload is not a zip archive.") from None


class _Bounded:
    """A file read through a counter: more than `limit` bytes is a zip bomb."""

    def __init__(self, source: IO[bytes], limit: int) -> None:
        self.source = source
        self.limit = limit
        self.read_bytes = 0

    def read(self, size: int) -> bytes:
        data = self.source.read(size)
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise ImportRefused(
                TOO_LARGE, f"export.xml unpacks to more than {self.limit} bytes: refused."
            )
        return data


def stream_export(
    path: Path,
    start: StartElement,
    end: EndElement,
    *,
    max_xml_bytes: int,
    on_read: Callable[[int, int], None] | None = None,
) -> None:
    """Stream the export's XML through `start` (name, attributes) and `end` (name), in
    document order; `on_read(read, total)` after each chunk with the uncompressed bytes
    read and the size the zip declares. Raises ImportRefused."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        raise ImportRefused(NOT_A_ZIP, "The upload is not a zip archive.") from None
    with archive:
        member = export_member(archive)
        if member.file_size > max_xml_bytes:
            raise ImportRefused(
                TOO_LARGE, f"export.xml unpacks to more than {max_xml_bytes} bytes: refused."
            )
        parser = _parser(start, end)
        try:
            with archive.open(member) as raw:
                source = _Bounded(raw, max_xml_bytes)
                while True:
                    data = source.read(CHUNK)
                    parser.Parse(data, not data)
                    if on_read is not None:
                        on_read(source.read_bytes, member.file_size)
                    if not data:
                        break
        except _Refused as exc:
            raise exc.refused from None
        except expat.ExpatError as exc:
            raise ImportRefused(
                MALFORMED, f"export.xml is not well-formed XML (line {exc.lineno})."
            ) from None
        except (zipfile.BadZipFile, EOFError, OSError):
            # A damaged member (a CRC that does not match, a cut-off stream).
            raise ImportRefused(NOT_A_ZIP, "The zip archive is damaged.") from None


def _parser(start: StartElement, end: EndElement) -> expat.XMLParserType:
    parser = expat.ParserCreate()
    parser.buffer_text = True
    # External parameter entities (an external DTD) are never read.
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    root_seen = [False]

    def refuse_entity(*_args: object) -> None:
        raise _Refused(
            ImportRefused(ENTITIES, "export.xml declares entities; an export has none: refused.")
        )

    def refuse_external(*_args: object) -> int:
        refuse_entity()
        return 0

    def first(name: str, attributes: dict[str, str]) -> None:
        if not root_seen[0]:
            root_seen[0] = True
            if name != ROOT:
                raise _Refused(
                    ImportRefused(NOT_AN_EXPORT, "export.xml is not an Apple Health export.")
                )
            parser.StartElementHandler = start
        start(name, attributes)

    parser.EntityDeclHandler = refuse_entity
    parser.UnparsedEntityDeclHandler = refuse_entity
    parser.ExternalEntityRefHandler = refuse_external
    parser.StartElementHandler = first
    parser.EndElementHandler = end
    return parser
