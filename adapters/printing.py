"""Pages printed to PDF by headless Chromium: the deletion report's and the lab orders'
documents go through this one path (ADR 0037). A loose module of its own, below both
the compliance and the answers packages that print, so neither imports the other."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

# Debian's package (`apt-get install chromium`) puts it here; PATH is looked at first.
CHROMIUM = "chromium"
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
PDF_TIMEOUT_SECONDS = 120
# Chromium as the service (and the tests' browser) runs it: headless, fetching nothing of
# its own (updates, sync, first-run pages); a profile directory is given with each run.
HEADLESS_CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class PdfUnavailable(RuntimeError):
    """Headless Chromium is not installed, or failed to print."""


def chromium_path() -> Path:
    found = shutil.which(CHROMIUM)
    if found:
        return Path(found)
    if DEBIAN_CHROMIUM.exists():
        return DEBIAN_CHROMIUM
    raise PdfUnavailable(
        "a PDF is printed by headless Chromium, which is not installed: install Debian's "
        "package (apt-get install chromium), or ask for --format html and print that"
    )


def render_pdf(html: str) -> bytes:
    """The page printed to PDF by headless Chromium, offline (no network, no profile
    kept): the HTML loads nothing from outside."""
    browser = chromium_path()
    with tempfile.TemporaryDirectory(prefix="healthledger-pdf-") as work:
        page = Path(work) / "report.html"
        page.write_text(html, encoding="utf-8")
        pdf = Path(work) / "report.pdf"
        command = [
            str(browser),
            *HEADLESS_CHROMIUM_FLAGS,
            f"--user-data-dir={Path(work) / 'profile'}",
            "--no-pdf-header-footer",
            f"--print-to-pdf={pdf}",
            page.as_uri(),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, timeout=PDF_TIMEOUT_SECONDS, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PdfUnavailable(
                f"headless Chromium did not print within {PDF_TIMEOUT_SECONDS} s"
            ) from exc
        if done.returncode != 0 or not pdf.exists():
            raise PdfUnavailable(
                f"headless Chromium failed to print (exit {done.returncode}): "
                + done.stderr.decode(errors="replace").strip()[-500:]
            )
        return pdf.read_bytes()
