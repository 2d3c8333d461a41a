"""PDFs for the lab report parser's tests, made here without any network or tool: a
text PDF of another lab's layout laid out by hand (Helvetica, one line a `Tm`), and the
files the parser must refuse."""

from __future__ import annotations

import io
from collections.abc import Sequence

from pypdf import PdfWriter

Line = tuple[int, int, str]


def text_pdf(pages: Sequence[Sequence[Line]]) -> bytes:
    """A PDF whose pages hold these lines of text at (x, y), Helvetica 10 pt."""
    objects: list[str] = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "",  # the page tree, once the pages are numbered
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    kids = []
    for lines in pages:
        shown = " ".join(f"1 0 0 1 {x} {y} Tm ({_escaped(text)}) Tj" for x, y, text in lines)
        content = f"BT /F1 10 Tf {shown} ET"
        objects.append(f"<< /Length {len(content)} >>\nstream\n{content}\nendstream")
        objects.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {len(objects)} 0 R >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


# Another lab's report: a lab our catalog does not know, upper-case headings, the flag
# before the units, ranges with spaces, a qualitative result, a critical value, the
# patient as LAST, FIRST and US dates.
RIVERSIDE_ROWS = [
    ("Glucose", "112", "HIGH", "mg/dL", "65 - 99"),
    ("Hemoglobin A1c", "5.4", "", "%", "< 5.7"),
    ("TSH", "0.21", "LOW", "mIU/L", "0.40 - 4.50"),
    ("HIV-1/2 Antibody", "Negative", "", "", "Negative"),
    ("Potassium", "6.8", "CRIT", "mmol/L", "3.5 - 5.3"),
]


def riverside_report() -> bytes:
    lines: list[Line] = [
        (50, 740, "RIVERSIDE CLINICAL LABORATORY"),
        (50, 726, "1200 River Road, Sacramento, CA 95814"),
        (50, 700, "Patient Name: LOVELACE, ADA"),
        (300, 700, "DOB: 12/10/1985"),
        (450, 700, "Sex: F"),
        (50, 686, "Accession No: RC-2026-0042"),
        (300, 686, "Collected: 03/01/2026"),
        (450, 686, "Reported: 03/02/2026"),
        (50, 650, "ANALYTE"),
        (200, 650, "VALUE"),
        (270, 650, "FLAG"),
        (330, 650, "UNITS"),
        (400, 650, "REFERENCE INTERVAL"),
    ]
    y = 634
    for row in RIVERSIDE_ROWS:
        lines += [
            (x, y, text) for x, text in zip((50, 200, 270, 330, 400), row, strict=True) if text
        ]
        y -= 16
    lines.append(
        (50, y - 20, "Results reviewed by J. Smith, MD. Values flagged CRIT were called in.")
    )
    return text_pdf([lines])


def letter_without_results() -> bytes:
    """A text PDF that is no lab report (no table of results)."""
    return text_pdf([[(50, 740, "Dear patient,"), (50, 720, "Your appointment is on Monday.")]])


def blank_pdf(pages: int = 1) -> bytes:
    """A PDF of pages without text (what a scanned report is to a text reader)."""
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=612, height=792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted_pdf() -> bytes:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    writer.encrypt("secret", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
