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


@functools.cache
def team_routes() -> tuple[BaseRoute, ...]:
    """Every route of the team API, built once per process."""
    routes = APIRouter()
    # The data reads first: a request is matched against the routes in this order, one by
    # one, and these are the ones users wait on (their paths share no prefix with the
    # rest's, so the order changes no match).
    routes.include_router(timeseries.router)
    # After the timeseries: `.../cholesterol/grouped` stays the generic grouped route.
    routes.include_router(cholesterol.router)
    routes.include_router(summaries.router)
    # The makers' payloads as received (`*.get_raw`, docs/data.md#raw-payloads).
    routes.include_router(raw_payloads.router)
    routes.include_router(session_streams.router)
    routes.include_router(aggregate_query.router)
    routes.include_router(continuous_queries.router)
    routes.include_router(users.router)
    routes.include_router(connections.router)
    routes.include_router(link_tokens.router)
    # A team's own link widget, with the link token alone (ADR 0038).
    routes.include_router(link_api.router)
    routes.include_router(link_codes.router)
    routes.include_router(manual_connections.router)
    routes.include_router(bulk_operations.router)
    # A page for browsers the makers send back (the custom credentials' redirect_uri).
    routes.include_router(oauth_callback.router)
    # The makers call us here (no team key: each maker's own signature).
    routes.include_router(maker_webhooks.router)
    routes.include_router(providers.router)
    routes.include_router(lab_tests.router)
    routes.include_router(area_info.router)
    routes.include_router(introspection.router)
    routes.include_router(audit_routes.router)
    routes.include_router(deletion_reports.router)
    routes.include_router(orders.router)
    routes.include_router(order_tracking.router)
    routes.include_router(order_transactions.router)
    routes.include_router(testkits.router)
    routes.include_router(lab_documents.router)
    routes.include_router(lab_methods.router)
    routes.include_router(compendium.router)
    routes.include_router(unmatched_results.router)
    routes.include_router(appointments.router)
    routes.include_router(portal.router)
    routes.include_router(imports.router)
    routes.include_router(lab_report_parser.router)
    routes.include_router(team_settings.router)
    routes.include_router(source_priorities.router)
    routes.include_router(user_devices.router)
    routes.include_router(user_insurance.router)
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
