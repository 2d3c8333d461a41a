"""Lab reports as PDF files, read with pypdf (pure Python, nothing shelled out): the
lab report parser's `ReportReader` (domain/labs/report_parsing.py).

A file is checked at the upload (a PDF's header, not empty, not encrypted, its pages
countable and not too many) and read by the worker: each page's text in pypdf's layout
mode (columns kept as runs of spaces), read into results by
`domain/labs/report_reading.py` against the lab catalog. Only text-based PDFs are read: a
scanned report (images, no text) fails its job as `low_quality` (`no_text`); nothing here
does OCR.

Nothing of a file reaches a log or an error: pypdf's own warnings name PDF objects, never
their text, and every error is one of report_reading.py's fixed texts.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from typing import Any

from healthledger.domain.labs.catalog import Lab, Marker
from healthledger.domain.labs.report_reading import (
    EMPTY_FILE,
    ENCRYPTED,
    NOT_A_PDF,
    TOO_LARGE,
    TOO_MANY_PAGES,
    UNREADABLE,
    ReportRefused,
    read_report,
)
from pypdf import PdfReader
from pypdf.errors import PyPdfError

# pypdf reports a damaged file's repairs as warnings: kept out of the service's log.
logging.getLogger("pypdf").setLevel(logging.ERROR)

# Where a PDF's header may start (the format allows junk before it).
_HEADER_WITHIN = 1024


class PdfReportReader:
    """Reads lab reports from PDF files against the catalog's markers and labs."""

    def __init__(
        self,
        markers: Sequence[Marker],
        labs: Sequence[Lab],
        *,
        max_bytes: int,
        max_pages: int,
    ) -> None:
        self.markers = tuple(markers)
        self.labs = tuple(labs)
        self.max_bytes = max_bytes
        self.max_pages = max_pages

    def check(self, files: Sequence[bytes]) -> None:
        if sum(len(f) for f in files) > self.max_bytes:
            raise ReportRefused(TOO_LARGE, f"The files are larger than {self.max_bytes} bytes.")
        pages = 0
        for data in files:
            pages += len(self._open(data).pages)
            if pages > self.max_pages:
                raise ReportRefused(
                    TOO_MANY_PAGES, f"The report has more than {self.max_pages} pages."
                )

    def read(self, files: Sequence[bytes]) -> dict[str, Any]:
        self.check(files)
        texts: list[str] = []
        for data in files:
            reader = self._open(data)
            for page in reader.pages:
                try:
                    texts.append(page.extract_text(extraction_mode="layout"))
                except (PyPdfError, ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise ReportRefused(UNREADABLE, "The PDF's text cannot be read.") from exc
        return read_report(texts, self.markers, self.labs)

    def _open(self, data: bytes) -> PdfReader:
        if not data:
            raise ReportRefused(EMPTY_FILE, "The file is empty.")
        if b"%PDF-" not in data[:_HEADER_WITHIN]:
            raise ReportRefused(NOT_A_PDF, "The file is not a PDF.")
        try:
            reader = PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted and not reader.decrypt(""):
                raise ReportRefused(ENCRYPTED, "The PDF is protected by a password.")
            len(reader.pages)  # the page tree read now: a broken one is refused here
        except ReportRefused:
            raise
        except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise ReportRefused(UNREADABLE, "The PDF cannot be read.") from exc
        except Exception as exc:  # pypdf's own failures on a hostile file vary
            raise ReportRefused(UNREADABLE, "The PDF cannot be read.") from exc
        return reader
