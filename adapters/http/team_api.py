"""The team API application ({base_url}): FastAPI, with OpenAPI at /openapi.json."""

from __future__ import annotations

from fastapi import FastAPI
from healthledger.adapters.composition import Service
from healthledger.adapters.http.aggregate_query import aggregate_query_router
from healthledger.adapters.http.area_info import area_info_router
from healthledger.adapters.http.audit_routes import audit_router
from healthledger.adapters.http.connections import connections_router
from healthledger.adapters.http.cursors import CursorCodec
from healthledger.adapters.http.deletion_reports import deletion_reports_router
from healthledger.adapters.http.errors import install_error_handlers
from healthledger.adapters.http.introspection import introspection_router
from healthledger.adapters.http.lab_tests import lab_tests_router
from healthledger.adapters.http.link_tokens import link_tokens_router
from healthledger.adapters.http.oauth_callback import oauth_callback_router
from healthledger.adapters.http.orders import orders_router
from healthledger.adapters.http.portal import portal_router
from healthledger.adapters.http.providers import providers_router
from healthledger.adapters.http.requests import BodyLimitMiddleware, RequestIdMiddleware
from healthledger.adapters.http.summaries import summaries_router
from healthledger.adapters.http.timeseries import timeseries_router
from healthledger.adapters.http.users import users_router


def create_team_api(service: Service) -> FastAPI:
    app = FastAPI(
        title="healthledger team API",
        version="2",
        description="Users, their lifecycle and their data. Authenticate with the "
        "`x-service-api-key` header. Text fields refuse control characters (Unicode "
        "category C) with a 422; any malformed JSON body is a 422 `json_invalid`.",
    )
    install_error_handlers(app)
    app.include_router(users_router(service))
    app.include_router(connections_router(service))
    app.include_router(link_tokens_router(service))
    # A page for browsers the makers send back (the custom credentials' redirect_uri).
    app.include_router(oauth_callback_router(service))
    app.include_router(providers_router(service))
    app.include_router(lab_tests_router(service))
    app.include_router(area_info_router(service))
    app.include_router(introspection_router(service, CursorCodec(service.cursor_secret)))
    app.include_router(audit_router(service, CursorCodec(service.cursor_secret)))
    app.include_router(deletion_reports_router(service))
    app.include_router(aggregate_query_router(service))
    app.include_router(summaries_router(service))
    app.include_router(timeseries_router(service))
    app.include_router(orders_router(service))
    app.include_router(portal_router(service))
    app.add_middleware(BodyLimitMiddleware, max_bytes=service.settings.max_body_bytes)
    app.add_middleware(RequestIdMiddleware)
    return app
