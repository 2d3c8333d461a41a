"""The deletion report for a human auditor: one printable HTML page (inline CSS, no
external asset, nothing fetched), and a PDF printed from it by headless Chromium.

The page shows what the JSON report holds and nothing more (no personal value is in
it to show); the JSON stays the document that is signed and verified. It is the Jinja2
template adapters/templates/compliance/deletion_report.html, every value autoescaped."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

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


# The units a duration is shown in, largest first.
_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def _duration(seconds: int) -> str:
    """A duration in its largest fitting unit, with the next one if it is not zero: 7
    days is "7 d", 5 minutes "5 min" (not "0 d 0 h"), 36 hours "1 d 12 h"."""
    seconds = int(seconds)
    if seconds <= 0:
        return "0 s"
    for i, (unit, size) in enumerate(_UNITS):
        if seconds >= size:
            whole, rest = divmod(seconds, size)
            shown = f"{whole} {unit}"
            if i + 1 < len(_UNITS):
                next_unit, next_size = _UNITS[i + 1]
                if rest // next_size:
                    shown += f" {rest // next_size} {next_unit}"
            return shown
    return f"{seconds} s"


def _event_name(topic: str) -> str:
    """`healthledger:User.Deleted.v1` -> `User.Deleted`."""
    name = topic.partition(":")[2] or topic
    return name.rsplit(".v", 1)[0]


def _shown(value: Any) -> Any:
    # A value the report does not have (a delivery that never succeeded) is left blank,
    # not printed as "None".
    return "" if value is None else value


# The report's own environment (the pages an end user sees have theirs, in adapters/http):
# the same templates folder, every value escaped by Jinja's autoescaping rather than by
# hand, and a name the template misspells is an error, not a blank.
_TEMPLATES = Environment(
    loader=PackageLoader("healthledger.adapters", "templates"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    finalize=_shown,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_TEMPLATES.filters["duration"] = _duration
_TEMPLATES.filters["event_name"] = _event_name


def render_html(report: dict[str, Any]) -> str:
    """The report (as `deletion_report` answers it) as one printable page."""
    return _TEMPLATES.get_template("compliance/deletion_report.html").render(report=report)


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
