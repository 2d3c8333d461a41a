"""The team API application ({base_url}): FastAPI, with OpenAPI at /openapi.json.

Its routes are built once per process and shared by every app made from them (see
`service_dependency`); an app holds its service and its middleware."""

from __future__ import annotations

import functools
import re

from fastapi import APIRouter, FastAPI
from fastapi_offline import FastAPIOffline
from healthledger.adapters.composition import Service
from healthledger.adapters.http import (
    aggregate_query,
    appointments,
    area_info,
    audit_routes,
    bulk_operations,
    cholesterol,
    compendium,
    connections,
    continuous_queries,
    deletion_reports,
    imports,
    introspection,
    lab_documents,
    lab_methods,
    lab_report_parser,
    lab_tests,
    link_api,
    link_codes,
    link_tokens,
    maker_webhooks,
    manual_connections,
    oauth_callback,
    order_tracking,
    order_transactions,
    orders,
    portal,
    providers,
    raw_payloads,
    session_streams,
    source_priorities,
    summaries,
    team_settings,
    testkits,
    timeseries,
    unmatched_results,
    user_devices,
    user_insurance,
    users,
)
from healthledger.adapters.http.errors import install_error_handlers
from healthledger.adapters.http.requests import BodyLimitMiddleware, RequestIdMiddleware
from starlette.routing import BaseRoute

# Every router of the team API (the access log reads their paths' words too).
TEAM_ROUTERS: tuple[APIRouter, ...] = (
    # The data reads first: a request is matched against the routes in this order, one by
    # one, and these are the ones users wait on (their paths share no prefix with the
    # rest's, so the order changes no match).
    timeseries.router,
    # After the timeseries: `.../cholesterol/grouped` stays the generic grouped route.
    cholesterol.router,
    summaries.router,
    # The makers' payloads as received (`*.get_raw`, docs/data.md#raw-payloads).
    raw_payloads.router,
    session_streams.router,
    aggregate_query.router,
    continuous_queries.router,
    users.router,
    connections.router,
    link_tokens.router,
    # A team's own link widget, with the link token alone (ADR 0038).
    link_api.router,
    link_codes.router,
    manual_connections.router,
    bulk_operations.router,
    # A page for browsers the makers send back (the custom credentials' redirect_uri).
    oauth_callback.router,
    # The makers call us here (no team key: each maker's own signature).
    maker_webhooks.router,
    providers.router,
    lab_tests.router,
    area_info.router,
    introspection.router,
    audit_routes.router,
    deletion_reports.router,
    orders.router,
    order_tracking.router,
    order_transactions.router,
    testkits.router,
    lab_documents.router,
    lab_methods.router,
    compendium.router,
    unmatched_results.router,
    appointments.router,
    portal.router,
    imports.router,
    lab_report_parser.router,
    team_settings.router,
    source_priorities.router,
    user_devices.router,
    user_insurance.router,
)


@functools.cache
def team_routes() -> tuple[BaseRoute, ...]:
    """Every route of the team API, built once per process."""
    routes = APIRouter()
    for router in TEAM_ROUTERS:
        routes.include_router(router)
    return tuple(routes.routes)


# The uploads whose routes read their bodies under limits of their own.
UNLIMITED_UPLOADS = re.compile(
    f"{imports.UNLIMITED_PATH.pattern}|{lab_report_parser.UNLIMITED_PATH.pattern}"
)


def create_team_api(service: Service) -> FastAPI:
    # FastAPIOffline: FastAPI whose /docs and /redoc pages load Swagger UI and ReDoc from
    # files in the package, not from a CDN (blank pages without internet otherwise).
    app = FastAPIOffline(
        title="healthledger team API",
        version="2",
        description="Users, their lifecycle and their data. Authenticate with the "
        "`x-service-api-key` header (or `x-vital-api-key`, as the official clients send "
        "the key). Text fields refuse control characters (Unicode "
        "category C) with a 422; any malformed JSON body is a 422 `json_invalid`.",
        # Starlette's `routes`: the shared route objects themselves, where include_router
        # would build each of them again.
        routes=list(team_routes()),
    )
    app.state.service = service
    # The zip codes are read now, when the app is made, not at the first question.
    service.area_info.warm()
    install_error_handlers(app)
    # An export upload streams to disk under its own limit (adapters/http/imports.py), a
    # lab report into memory under its own (adapters/http/lab_report_parser.py).
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=service.settings.max_body_bytes,
        unlimited=UNLIMITED_UPLOADS,
    )
    app.add_middleware(RequestIdMiddleware)
    return app
