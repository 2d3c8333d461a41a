"""The server-rendered pages an end user sees (the link page, the lab portal): Jinja2
templates in adapters/templates that extend one shell in the team's brand
(`branded.html`), so that both look alike and validate a brand color the same way. Each
page brings its own body and the style rules of its own elements.

Every value a template prints is escaped by Jinja's autoescaping (on for .html), and a URL
put in an `href` or `src` goes through `web_url`: what reaches a page from a team, a
request or the catalog is text, never markup or script."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

# What a team may set as its brand color (gaps.md: six hex digits); anything else, or
# nothing, is the default.
_BRAND_COLOR = re.compile(r"^#[0-9A-Fa-f]{6}$")
DEFAULT_COLOR = "#2f5fd0"

# The schemes a link or an image of a page may have; no scheme is a relative URL.
_WEB_SCHEMES = frozenset({"", "http", "https"})
# What a URL of another scheme (javascript:, data:, ...) becomes: a URL that goes nowhere.
NOT_A_WEB_URL = "about:invalid"


@dataclass(frozen=True)
class Brand:
    """A team's brand as its settings give it."""

    name: str  # the brand's company name, else the team's name; "" when unknown
    color: str  # a valid `#rrggbb`
    logo_url: str | None

    @classmethod
    def of(cls, settings: Mapping[str, Any], team_name: str = "") -> Brand:
        information = settings.get("brand_information") or {}
        color = information.get("brand_color") or ""
        return cls(
            name=information.get("company_name") or team_name,
            color=color if _BRAND_COLOR.match(color) else DEFAULT_COLOR,
            logo_url=settings.get("logo_url"),
        )


NO_BRAND = Brand("", DEFAULT_COLOR, None)


def web_url(url: str) -> str:
    """`url` when it is an http(s) or a relative URL, else NOT_A_WEB_URL. Escaping keeps a
    URL inside its attribute but not a `javascript:` link from running when clicked. The
    URLs of the pages are http(s) already (the API validates logos and redirect URLs, the
    catalog ships https logos): this holds if one ever is not."""
    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError:
        return NOT_A_WEB_URL
    return url if scheme in _WEB_SCHEMES else NOT_A_WEB_URL


def _shown(value: Any) -> Any:
    # A missing value is left blank, not printed as "None".
    return "" if value is None else value


PAGES = Environment(
    loader=PackageLoader("healthledger.adapters", "templates"),
    # Every .html template escapes what it prints; the pages never build markup in Python.
    autoescape=select_autoescape(["html"]),
    # A name a template misspells is an error in the tests, not a blank on a page.
    undefined=StrictUndefined,
    finalize=_shown,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
PAGES.filters["web_url"] = web_url


def branded_page(
    status: int,
    template: str,
    brand: Brand,
    *,
    headers: Mapping[str, str],
    **context: Any,
) -> HTMLResponse:
    """The page `template` (one that extends branded.html) in `brand`, with `context`."""
    document = PAGES.get_template(template).render(brand=brand, **context)
    return HTMLResponse(document, status_code=status, headers=dict(headers))
