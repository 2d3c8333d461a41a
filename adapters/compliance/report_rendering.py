"""The deletion report for a human auditor: one printable HTML page (inline CSS, no
external asset, nothing fetched), and a PDF printed from it by headless Chromium
(adapters/printing.py).

The page shows what the JSON report holds and nothing more (no personal value is in
it to show); the JSON stays the document that is signed and verified. It is the Jinja2
template adapters/templates/compliance/deletion_report.html, every value autoescaped."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

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
