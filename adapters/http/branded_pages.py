"""The server-rendered pages an end user sees (the link page, the lab portal): one HTML
shell in the team's brand, so that both look alike and validate a brand color the same
way. Each page brings its own body and the style rules of its own elements."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

from starlette.responses import HTMLResponse

# What a team may set as its brand color (gaps.md: six hex digits); anything else, or
# nothing, is the default.
_BRAND_COLOR = re.compile(r"^#[0-9A-Fa-f]{6}$")
DEFAULT_COLOR = "#2f5fd0"


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


def branded_page(
    status: int,
    title: str,
    body: str,
    brand: Brand,
    *,
    style: str,
    headers: Mapping[str, str],
    width: str = "28rem",
) -> HTMLResponse:
    """A page: `body` (HTML, escaped by the caller) under the team's logo, `style` the
    page's own CSS rules (`{color}` in them is the brand's color). Pages are never
    indexed: their URLs carry a user's token."""
    logo = f'<img class="brand" src="{escape(brand.logo_url)}" alt="">' if brand.logo_url else ""
    rules = style.replace("{color}", brand.color)
    document = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex, nofollow">
<title>{escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1c1e21; }}
main {{ max-width: {width}; margin: 2rem auto; background: #fff; padding: 2rem;
        border-radius: 12px; box-shadow: 0 1px 4px rgba(0, 0, 0, .1); }}
h1 {{ font-size: 1.4rem; }}
.muted {{ color: #65676b; font-size: .9rem; }}
img.brand {{ max-height: 48px; margin-bottom: 1rem; }}
{rules}
</style>
</head>
<body><main>{logo}{body}</main></body>
</html>
"""
    return HTMLResponse(document, status_code=status, headers=dict(headers))
