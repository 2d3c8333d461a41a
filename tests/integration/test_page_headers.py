"""Every HTML page the service serves carries the same Content-Security-Policy (issue 30
§4: the deletion report's page had none): the hosted link page, the portal and the HTML
deletion report. On both databases."""

from __future__ import annotations

from fastapi.testclient import TestClient
from healthledger.adapters.http import link_page, portal_page
from healthledger.adapters.http.deletion_reports import HTML_HEADERS

from tests.conftest import Team, create_user

CSP = "content-security-policy"


def test_the_html_deletion_report_has_the_pages_content_security_policy(
    client: TestClient, team: Team
) -> None:
    user_id = create_user(client, team, "csp-1")["user_id"]
    path = f"/v2/audit/user/{user_id}/deletion_report"
    page = client.get(path, params={"format": "html"}, headers=team.headers)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers[CSP]
    # The portal's policy, word for word: nothing loads, styles inline only, no framing.
    assert policy == portal_page.PRIVATE_PAGE_HEADERS["Content-Security-Policy"]
    assert policy.startswith("default-src 'none';") and "frame-ancestors 'none'" in policy
    assert "script-src" not in policy
    # And what the link page's says, at least.
    for directive in link_page._HEADERS["Content-Security-Policy"].split("; "):
        assert directive in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert {k.lower(): v for k, v in HTML_HEADERS.items()}.items() <= page.headers.items()
    # The JSON report is not a page: no policy needed, and none given.
    document = client.get(path, headers=team.headers)
    assert document.status_code == 200 and CSP not in document.headers
