"""Every HTML page renders what it is given as text (issue 27): each page of the link page,
the lab portal, the OAuth callback and the deletion report, rendered through the functions
its routes call with a hostile value in every field, holds no markup, attribute or script
link of its input, and still shows the value, escaped. Every page template is rendered
here (a new one without a case fails), and every template ships in the wheel."""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

import pytest
from healthledger.adapters.answers import lab_documents
from healthledger.adapters.answers.lab_documents import LabDocuments, code128_svg
from healthledger.adapters.answers.orders import OrderAnswers, OrderRow
from healthledger.adapters.compliance import report_rendering
from healthledger.adapters.http import branded_pages, link_page, portal_page, webhook_portal
from healthledger.adapters.persistence.queries.lab_tests import LabTestRow
from healthledger.adapters.persistence.queries.link_tokens import LinkTokenView
from healthledger.adapters.persistence.queries.portal import PortalHolder
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.labs.catalog import Lab, LabTestView, Marker
from healthledger.domain.labs.documents import requisition_number
from healthledger.domain.labs.sandbox import SandboxPolicy
from jinja2 import Environment
from starlette.responses import Response

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "adapters" / "templates"
# Templates that are only extended or imported by the pages.
LAYOUTS = {
    "branded.html",
    "labs/layout.html",
    "labs/_markers.html",
    "labs/_patient.html",
    "link/layout.html",
    "portal/layout.html",
    "portal/flags.html",
    "webhook_portal/layout.html",
}

# Markup, an attribute breaking out of either quote, an entity: what an XSS would bring.
EVIL = "<script>alert(1)</script>\"onmouseover=alert(1) x='y' onfocus='alert(2)' &amp; &"
# A URL that runs script when followed.
SCRIPT_URL = "javascript:alert(document.cookie)//<script>"
WHEN = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
# The tags the templates themselves write.
# fmt: off
ALLOWED_TAGS = frozenset({
    "html", "head", "meta", "title", "style", "body", "main", "header", "section", "footer",
    "h1", "h2", "h3", "p", "a", "img", "span", "strong", "code", "br", "ul", "ol", "li",
    "dl", "dt", "dd", "table", "thead", "tbody", "tr", "th", "td", "form", "input", "button",
    "div",
})
# fmt: on


class Page(HTMLParser):
    """What a browser would make of a page: its tags, attributes and text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [(name, value or "") for name, value in attrs]

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_harmless(html: str, *, shows: str = EVIL) -> None:
    """No tag, attribute or script URL of the input in the page; the input shown as text."""
    assert "<script" not in html.lower()
    page = Page(html)
    assert set(page.tags) <= ALLOWED_TAGS, set(page.tags) - ALLOWED_TAGS
    names = {name for name, _ in page.attributes}
    assert not {name for name in names if name.startswith("on")}, names
    assert not {"x", "y", "alert(1)"} & names, names
    for name, value in page.attributes:
        if name in ("href", "src", "action"):
            assert not value.strip().lower().startswith(("javascript:", "data:")), value
    # What was given is there, as text or as an attribute's value (escaped, so intact).
    shown = "".join(page.text) + "".join(value for _, value in page.attributes)
    assert shows in shown


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """The templates the test loaded (its pages, and the layouts they extend or import)."""
    names: set[str] = set()
    environments = (branded_pages.PAGES, report_rendering._TEMPLATES, lab_documents._TEMPLATES)
    for environment in environments:
        monkeypatch.setattr(environment, "get_template", recording(environment, names))
    yield names


def recording(environment: Environment, names: set[str]) -> Any:
    get_template = environment.get_template

    def get(name: str, *args: Any, **kwargs: Any) -> Any:
        names.add(name)
        return get_template(name, *args, **kwargs)

    return get


def body(response: Response) -> str:
    assert response.headers["content-type"].startswith("text/html")
    return bytes(response.body).decode()


# -- the link page and the OAuth callback's pages ---------------------------------------------


def hostile_settings(logo_url: str = f"https://cdn.example.com/{EVIL}") -> dict[str, Any]:
    return {
        "logo_url": logo_url,
        "brand_information": {"company_name": f"Co {EVIL}", "brand_color": EVIL},
    }


def link_view(redirect_url: str | None, logo_url: str = SCRIPT_URL) -> LinkTokenView:
    return LinkTokenView(
        token_id=uuid.uuid4(),
        team_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        environment="sandbox",
        provider=None,
        redirect_url=redirect_url,
        filter_on_providers=None,
        on_error=None,
        on_close=None,
        issued_at=WHEN,
        consumed_at=None,
        usable_owner=True,
        team_name=f"Team {EVIL}",
        team_settings=hostile_settings(logo_url),
    )


def provider(logo: str | None) -> ProviderEntry:
    # Built past the catalog's validation (its slugs are [a-z0-9_], its logos https): the
    # page must hold even if the shipped catalog ever did not.
    return ProviderEntry.model_construct(
        slug=f"slug{EVIL}",
        name=f"Name {EVIL}",
        description=EVIL,
        logo=logo,
        auth_type="oauth",
        source_type="app",
        supported_resources=(),
        demo=True,
        oauth=None,
    )


def test_the_link_page_shows_hostile_values_as_text(rendered: set[str]) -> None:
    view = link_view(f"https://app.example.com/done?next={EVIL}")
    listed = [
        (provider(f"https://logo.example.com/{EVIL}"), True, True),
        (provider(SCRIPT_URL), True, False),
        (provider(None), False, False),
    ]
    page = body(
        link_page.page_response(
            200,
            "link/providers.html",
            view,
            team=f"Team {EVIL}",
            token=EVIL,
            providers=listed,
            sandbox=True,
        )
    )
    assert_harmless(page)
    assert f"Name {EVIL}" in Page(page).text
    # A brand color is a validated #rrggbb: anything else is the default.
    style = page.split("<style>")[1].split("</style>")[0]
    assert "alert" not in style and branded_pages.DEFAULT_COLOR in style
    # The hidden token, each provider's slug, the logos: attribute values, whole.
    values = [value for _, value in Page(page).attributes]
    # Four forms (a sign-in, two simulated devices, the close button), three of them for a
    # provider.
    assert values.count(EVIL) == 4 and values.count(f"slug{EVIL}") == 3
    assert f"https://logo.example.com/{EVIL}" in values
    assert branded_pages.NOT_A_WEB_URL in values  # the script URLs of a logo
    for response in (
        link_page.page_response(200, "link/closed.html", view),
        link_page.page_response(400, "link/not_offered.html", view),
        link_page.connected_page(f"Name {EVIL}", view),
        link_page.not_here_page(404, EVIL),
    ):
        assert_harmless(body(response), shows="")
    assert_harmless(body(link_page.connected_page(EVIL, view)))
    assert_harmless(body(link_page.not_here_page(404, EVIL)))


@pytest.mark.parametrize(
    "ways_on",
    [
        {"retry_href": f"./?token={EVIL}"},
        {"back_href": link_page.outcome_url(f"https://app.example.com/?a={EVIL}", "error")},
        {"back_href": SCRIPT_URL},
        {"retry_href": SCRIPT_URL},
        {},
    ],
)
def test_a_link_error_shows_hostile_values_as_text(
    rendered: set[str], ways_on: dict[str, str]
) -> None:
    for view in (link_view(SCRIPT_URL), None):
        for title in ("Link error", EVIL):
            page = body(link_page.failure_page(400, EVIL, view, title=title, **ways_on))
            assert_harmless(page)
            if view is not None and "back_href" in ways_on:
                assert f"Return to Co {EVIL}" in "".join(Page(page).text)
    assert rendered - LAYOUTS == {"link/failed.html"}


# -- the lab portal ---------------------------------------------------------------------------


def order_row(status: str) -> OrderRow:
    return OrderRow(
        order_id=uuid.uuid4(),
        team_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        environment="sandbox",
        sealed_lab_test=EVIL,
        lab_id=1,
        collection_method=EVIL,
        status=status,
        detailed_status=EVIL,
        interpretation=EVIL,
        sample_id=EVIL,
        sealed_patient_details=EVIL,
        sealed_patient_address=EVIL,
        sealed_results=EVIL,
        events=[
            {"status": EVIL, "created_at": WHEN.isoformat()},
            {"status": "sample_with_lab", "created_at": WHEN},
        ],
        created_at=WHEN,
        updated_at=WHEN,
    )


def holder() -> PortalHolder:
    return PortalHolder(
        team_id=uuid.uuid4(),
        live=True,
        deleted_since_issue=False,
        team_name=f"Team {EVIL}",
        team_settings=hostile_settings(SCRIPT_URL),
        features=frozenset({portal_page.PORTAL_URL_FEATURE}),
    )


def test_the_portal_shows_hostile_values_as_text(rendered: set[str]) -> None:
    rows = [order_row(status) for status in ("completed", "cancelled", "failed", EVIL)]
    for who in (holder(), None):
        named = [(row, f"Test {EVIL}") for row in rows]
        page = body(portal_page.orders_page(named, EVIL, who))
        assert_harmless(page)
        assert "".join(Page(page).text).count(f"Test {EVIL}") == len(rows)
        assert_harmless(body(portal_page.orders_page([], EVIL, who)), shows="")
    results = [
        {
            "name": EVIL,
            "result": EVIL,
            "unit": EVIL,
            "reference_range": EVIL,
            "interpretation": EVIL,
        },
        {
            "name": EVIL,
            "result": 1.5,
            "unit": None,
            "reference_range": None,
            "interpretation": None,
        },
    ]
    for row in rows:
        for answers in (results, None, EVIL):
            for lab in ({"name": EVIL}, None):
                page = body(
                    portal_page.order_page(row, f"Test {EVIL}", lab, answers, EVIL, holder())
                )
                assert_harmless(page)
                assert f"Test {EVIL}" in "".join(Page(page).text)
    for back in (EVIL, None):
        assert_harmless(body(portal_page.error_page(404, (EVIL, EVIL), holder(), back=back)))
    assert rendered - LAYOUTS == {"portal/orders.html", "portal/order.html", "portal/error.html"}


# -- the webhook portal -----------------------------------------------------------------------


def test_the_webhook_portal_shows_hostile_values_as_text(rendered: set[str]) -> None:
    brand = branded_pages.Brand.of(hostile_settings(), f"Team {EVIL}")
    endpoint = {
        "id": uuid.uuid4(),
        "url": f"https://hooks.example.com/{EVIL}",
        "description": EVIL,
        "filter_types": [EVIL],
        "disabled": True,
        "disabled_reason": EVIL,
    }
    row = SimpleNamespace(
        delivery_id=uuid.uuid4(),
        event_type=EVIL,
        message_id=EVIL,
        user_id=EVIL,
        source_timestamp=WHEN,
        status=EVIL,
        attempts=EVIL,
        last_attempt_at=WHEN,
        last_status_code=EVIL,
        next_attempt_at=WHEN,
    )
    listed = [(endpoint, {EVIL: 1}, [row], {row.delivery_id: SCRIPT_URL})]
    page = body(webhook_portal.endpoints_page(brand, EVIL, listed, WHEN))
    assert_harmless(page)
    assert "".join(Page(page).text).count(EVIL) >= 8
    assert_harmless(body(webhook_portal.endpoints_page(brand, EVIL, [], WHEN)), shows=EVIL)
    attempts = [
        {"kind": "attempt", "number": EVIL, "at": WHEN},
        {
            "kind": "attempt",
            "number": 2,
            "at": WHEN,
            "outcome": EVIL,
            "status_code": None,
            "error": EVIL,
            "latency_ms": EVIL,
        },
        {"kind": "replayed", "at": WHEN},
        {"kind": "dropped", "at": WHEN, "reason": EVIL},
    ]
    page = body(webhook_portal.delivery_page(brand, row, endpoint, attempts, SCRIPT_URL))
    assert_harmless(page)
    for back in (SCRIPT_URL, None):
        assert_harmless(body(webhook_portal.error_page(404, (EVIL, EVIL), brand, back=back)))
    assert rendered - LAYOUTS == {
        "webhook_portal/endpoints.html",
        "webhook_portal/delivery.html",
        "webhook_portal/error.html",
    }


# -- the deletion report ----------------------------------------------------------------------


def by() -> dict[str, str]:
    return {"actor": EVIL, "request_id": EVIL}


def hostile_report(*, erased: bool) -> dict[str, Any]:
    """A deletion report (the shape deletion_report answers) with a hostile value in every
    text field, and one of every list's entries."""
    erasure = {
        "erased_at": EVIL,
        **by(),
        "removed": [EVIL, EVIL],
        "checked_at_erasure": {EVIL: 1},
        "checks_now": [{"check": EVIL, "looked_at": EVIL, "found": EVIL, "passed": False}],
        "horizon": {
            "passed": True,
            "rotated_at": EVIL,
            "master_key_id": EVIL,
            "keys_rewrapped": EVIL,
            "meaning": EVIL,
            "condition": EVIL,
        },
        "webhooks": {
            "deliveries_by_status": {EVIL: EVIL},
            "user_erased": [
                {
                    "delivery_id": EVIL,
                    "endpoint_id": EVIL,
                    "status": EVIL,
                    "attempts": EVIL,
                    "last_status_code": EVIL,
                    "succeeded_at": EVIL,
                }
            ],
            "user_erased_acknowledged": True,
            "user_erased_acknowledged_means": EVIL,
        },
    }
    return {
        "generated_at": EVIL,
        "generated_by": by(),
        "user": {
            "user_id": EVIL,
            "team_id": EVIL,
            "status": EVIL,
            "created_at": EVIL,
            "created_by": by(),
            "client_user_id_digest": {
                "algorithm": EVIL,
                "key": EVIL,
                "value": EVIL if erased else None,
            },
        },
        "request": {
            "deletions": [
                {
                    "requested_at": EVIL,
                    **by(),
                    "grace_period_seconds": 90000,
                    "grace_period_ends_at": EVIL,
                    "outcome": EVIL,
                    "reason": EVIL,
                    "ticket": EVIL,
                }
            ],
            "reason_note": EVIL,
            "undos": [{"at": EVIL, **by()}],
            "refused_undos": [{"at": EVIL, **by(), "reason": EVIL}],
            "connections_deregistered": [
                {"provider": EVIL, "at": EVIL, "reason": EVIL, **by(), "connection_id": EVIL}
            ],
            "orders": {
                "supported": erased,
                "cancelled": [
                    {"order_id": EVIL, "at": EVIL, "reason": EVIL, **by(), "version": EVIL}
                ],
                "note": EVIL,
            },
        },
        "categories": {
            "note": EVIL,
            "held": [
                {
                    "category": EVIL,
                    "what": EVIL,
                    "held": EVIL,
                    "items": {"orders": EVIL},
                    "places": [EVIL],
                    "counted_at_erasure": {EVIL: EVIL},
                    "erasure_check": (
                        {"checks": [EVIL], "found": EVIL, "passed": False} if erased else None
                    ),
                },
                {
                    "category": "health_data",
                    "what": EVIL,
                    "held": None,
                    "items": None,
                    "places": [EVIL],
                    "counted_at_erasure": None,
                    "erasure_check": None,
                    "by_resource": [
                        {
                            "pull_id": EVIL,
                            "provider": EVIL,
                            "resource": EVIL,
                            "days_with_data_recorded": EVIL,
                            "rows_now": EVIL,
                        }
                    ],
                    "by_resource_note": EVIL,
                },
            ],
        },
        "recipients": {
            "note": EVIL,
            "webhook_endpoints": [
                {
                    "endpoint_id": EVIL,
                    "origin": EVIL,
                    "deliveries": EVIL,
                    "posts": EVIL,
                    "acknowledged": EVIL,
                    "first_sent_at": EVIL,
                    "last_sent_at": EVIL,
                    "first_acknowledged_at": EVIL,
                    "last_acknowledged_at": EVIL,
                    "received": True,
                    "outcome_unknown": EVIL,
                    "first_possibly_sent_at": EVIL,
                    "possibly_received": True,
                }
            ],
            "event_destinations": {"supported": False, "note": EVIL},
        },
        "erasure": erasure if erased else None,
        "proof": {
            "scope": EVIL,
            "algorithm": EVIL,
            "public_key": EVIL,
            "signed_head": {
                "position": EVIL,
                "signed_at": EVIL,
                "chain_hash": EVIL,
                "key_id": EVIL,
                "signature": EVIL,
            },
            "events": [
                {
                    "position": EVIL,
                    "topic": f"healthledger:{EVIL}.v1",
                    "version": EVIL,
                    "stream": EVIL,
                    "originator_id": EVIL,
                    "timestamp": EVIL,
                    "hash": EVIL,
                    "prev_hash": EVIL,
                    "state_digest": EVIL,
                }
            ],
        },
        "signature": {"algorithm": EVIL, "public_key": EVIL, "value": EVIL},
    }


def test_the_deletion_report_shows_hostile_values_as_text(rendered: set[str]) -> None:
    for erased in (True, False):
        html = report_rendering.render_html(hostile_report(erased=erased))
        assert_harmless(html)
        # Still one self-contained page: nothing to fetch when Chromium prints it.
        assert not {name for name, _ in Page(html).attributes} & {"src", "href"}
        shown = "".join(Page(html).text)
        assert "1 d 1 h" in shown and shown.count(EVIL) > 40
        # The webhook deliveries by status, joined: keys and counts alike.
        assert (f"{EVIL}: {EVIL}" in shown) == erased
    assert rendered - LAYOUTS == {"compliance/deletion_report.html"}


# -- the lab documents ------------------------------------------------------------------------

HOSTILE_LAB = Lab(
    id=1,
    slug="hostile_lab",
    name=f"Lab {EVIL}",
    first_line_address=EVIL,
    city=EVIL,
    state=EVIL,
    zipcode=EVIL,
    collection_methods=("testkit", "walk_in_test"),
    sample_types=(f"dried {EVIL}",),
)
HOSTILE_MARKER = Marker(
    id=7,
    name=f"Marker {EVIL}",
    slug=EVIL,
    description=EVIL,
    lab_id=1,
    provider_id=f"Code {EVIL}",
    type=EVIL,  # type: ignore[arg-type]
    unit=EVIL,
    price=EVIL,
    a_la_carte_enabled=True,
    expected_results=(),
)


class HostileCatalog:
    """The lab and the marker above, for every id asked."""

    def lab(self, lab_id: int) -> Lab:
        return HOSTILE_LAB

    def marker(self, marker_id: int) -> Marker:
        return HOSTILE_MARKER


class Opened:
    """A vault whose every sealed value opens to the hostile value of its name."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def open(self, user_id: uuid.UUID, sealed: str) -> Any:
        return self.values[sealed]


def hostile_result(interpretation: str, value: float | None) -> dict[str, Any]:
    """A stored result (what `OrderAnswers.results` opens) with a hostile value in every
    text field the report shows."""
    return {
        "name": f"Result {EVIL}",
        "slug": EVIL,
        "result": EVIL,
        "value": value,
        "type": EVIL,
        "unit": EVIL,
        "reference_range": {
            "text": EVIL,
            "low": 1.0,
            "high": 2.0,
            "critical_low": None,
            "critical_high": None,
        },
        "interpretation": interpretation,
        "loinc": EVIL,
        "loinc_slug": EVIL,
        "provider_id": f"Code {EVIL}",
        "expected_result_id": EVIL,
        "marker_id": 7,
        "marker_name": f"Marker {EVIL}",
        "marker_slug": EVIL,
        "marker_provider_id": EVIL,
    }


def hostile_documents() -> tuple[LabDocuments, list[str]]:
    """The documents as the routes make them, but keeping each page's HTML (appended to
    the list it answers) instead of printing it."""
    vault = Opened(
        {
            "lab_test": {
                "lab_test_id": str(uuid.uuid4()),
                "lab_test_name": f"Test {EVIL}",
                "marker_ids": [7],
            },
            "details": {
                "first_name": f"First {EVIL}",
                "last_name": f"Last {EVIL}",
                "dob": "1980-02-03",
                "gender": EVIL,
                "phone_number": f"Phone {EVIL}",
            },
            "address": {
                "first_line": f"Street {EVIL}",
                "second_line": EVIL,
                "city": f"City {EVIL}",
                "state": EVIL,
                "zip_code": EVIL,
            },
            "results": [hostile_result(EVIL, None), hostile_result("critical", 3.0)],
        }
    )
    pages: list[str] = []

    def keep(html: str) -> bytes:
        pages.append(html)
        return html.encode()

    documents = LabDocuments(
        HostileCatalog(),  # type: ignore[arg-type]
        OrderAnswers(
            HostileCatalog(),  # type: ignore[arg-type]
            vault,
            SandboxPolicy(),
            lag=timedelta(seconds=5),
            base_url="https://healthledger.example",
        ),
        lambda team_id: f"Team {EVIL}",
        lambda: WHEN,
        printer=keep,
    )
    return documents, pages


def hostile_order(method: str) -> OrderRow:
    return OrderRow(
        order_id=uuid.uuid4(),
        team_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        environment="sandbox",
        sealed_lab_test="lab_test",
        lab_id=1,
        collection_method=method,
        status="completed",
        detailed_status="completed",
        interpretation=EVIL,
        sample_id=EVIL,
        sealed_patient_details="details",
        sealed_patient_address="address",
        sealed_results="results",
        events=[
            {"status": "sample_with_lab.transit_lab", "created_at": WHEN.isoformat()},
            {"status": "completed", "created_at": WHEN.isoformat()},
        ],
        created_at=WHEN,
        updated_at=WHEN,
    )


def test_the_lab_documents_show_hostile_values_as_text(rendered: set[str]) -> None:
    documents, pages = hostile_documents()
    for method in ("testkit", "walk_in_test", EVIL):
        row = hostile_order(method)
        for print_one in (
            documents.requisition,
            lambda row: documents.labels(row, WHEN, 2),
            documents.abn,
            documents.order_instructions,
            documents.result_report,
        ):
            printed = print_one(row)
            html = pages[-1]
            assert printed == html.encode()  # what the test reads is what is printed
            # The barcode, the one markup taken as is, is the order's number drawn: the
            # number is the order id's digits, which no hostile value reaches.
            number = requisition_number(row.order_id)
            assert number.isdigit()
            barcode = str(code128_svg(number))
            assert html.count("<svg") == html.count(barcode)
            html = html.replace(barcode, "")
            assert_harmless(html)
            for value in (f"Team {EVIL}", f"Lab {EVIL}", f"{EVIL}, {EVIL}, {EVIL} {EVIL}"):
                assert html_shows(html, value), value
        requisition, labels, abn, instructions, report = pages[-5:]
        for page in (requisition, labels):
            assert html_shows(page, f"First {EVIL} Last {EVIL}")
        assert html_shows(requisition, f"Street {EVIL}, {EVIL}, City {EVIL}, {EVIL} {EVIL}")
        assert html_shows(requisition, f"Phone {EVIL}")
        assert html_shows(requisition, f"Code {EVIL}") and html_shows(abn, f"Marker {EVIL}")
        for page in (requisition, instructions, report):
            assert html_shows(page, f"Test {EVIL}")
        assert report.count("<svg") == 0  # the result report draws no barcode
        assert requisition.count("<svg") == 1 and labels.count("<svg") == 2
        # A kit's sample is the lab's; an unknown collection method is named as given.
        sample = f"dried {EVIL}" if method == "testkit" else "serum"
        assert html_shows(instructions, sample) and html_shows(labels, sample)
        assert html_shows(instructions, f"Collection{EVIL}") == (method == EVIL)
        assert html_shows(report, f"Result {EVIL}") and html_shows(report, "CRITICAL")
    lab_test = LabTestRow(
        view=LabTestView(
            id=uuid.uuid4(),
            team_id=uuid.uuid4(),
            name=f"Test {EVIL}",
            method=EVIL,  # type: ignore[arg-type]
            lab_id=1,
            marker_ids=(7,),
        ),
        description=EVIL,
        fasting=True,
        created_at=WHEN,
    )
    documents.lab_test_instructions(lab_test)
    assert_harmless(pages[-1])
    assert html_shows(pages[-1], f"Marker {EVIL}")
    assert rendered - LAYOUTS == {
        "labs/requisition.html",
        "labs/labels.html",
        "labs/abn.html",
        "labs/collection_instructions.html",
        "labs/result_report.html",
    }


def html_shows(html: str, value: str) -> bool:
    """`value` is in the page's text, whole."""
    return value in "".join(Page(html).text)


# -- every template: rendered above, and shipped ----------------------------------------------


def template_names() -> set[str]:
    return {path.relative_to(TEMPLATES).as_posix() for path in TEMPLATES.rglob("*.html")}


def test_every_page_template_has_a_hostile_case_above() -> None:
    covered = {
        "link/providers.html",
        "link/closed.html",
        "link/not_offered.html",
        "link/connected.html",
        "link/not_here.html",
        "link/failed.html",
        "portal/orders.html",
        "portal/order.html",
        "portal/error.html",
        "compliance/deletion_report.html",
        "labs/requisition.html",
        "labs/labels.html",
        "labs/abn.html",
        "labs/collection_instructions.html",
        "labs/result_report.html",
        "webhook_portal/endpoints.html",
        "webhook_portal/delivery.html",
        "webhook_portal/error.html",
    }
    assert template_names() - LAYOUTS == covered


def test_every_template_is_package_data() -> None:
    """`pip install .` is not editable: a template outside pyproject's package-data globs
    would render in development and be missing in production."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = config["package-data"]["healthledger.adapters"]
    for name in template_names():
        path = PurePosixPath("templates", name)
        assert any(path.match(pattern) for pattern in globs), name
