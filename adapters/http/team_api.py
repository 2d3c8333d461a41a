"""The team API application ({base_url}): FastAPI, with OpenAPI at /openapi.json.

Its routes are built once per process and shared by every app made from them (see
`service_dependency`); an app holds its service and its middleware."""

from __future__ import annotations

import functools

from fastapi import APIRouter, FastAPI
from healthledger.adapters.composition import Service
from healthledger.adapters.http.aggregate_query import aggregate_query_router
from healthledger.adapters.http.area_info import area_info_router
from healthledger.adapters.http.audit_routes import audit_router
from healthledger.adapters.http.connections import connections_router
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
from starlette.routing import BaseRoute


@functools.cache
def team_routes() -> tuple[BaseRoute, ...]:
    """Every route of the team API, built once per process."""
    routes = APIRouter()
    routes.include_router(users_router())
    routes.include_router(connections_router())
    routes.include_router(link_tokens_router())
    # A page for browsers the makers send back (the custom credentials' redirect_uri).
    routes.include_router(oauth_callback_router())
    routes.include_router(providers_router())
    routes.include_router(lab_tests_router())
    routes.include_router(area_info_router())
    routes.include_router(introspection_router())
    routes.include_router(audit_router())
    routes.include_router(deletion_reports_router())
    routes.include_router(aggregate_query_router())
    routes.include_router(summaries_router())
    routes.include_router(timeseries_router())
    routes.include_router(orders_router())
    routes.include_router(portal_router())
    return tuple(routes.routes)


def create_team_api(service: Service) -> FastAPI:
    app = FastAPI(
        title="healthledger team API",
        version="2",
        description="Users, their lifecycle and their data. Authenticate with the "
        "`x-service-api-key` header. Text fields refuse control characters (Unicode "
        "category C) with a 422; any malformed JSON body is a 422 `json_invalid`.",
        # Starlette's `routes`: the shared route objects themselves, where include_router
        # would build each of them again.
        routes=list(team_routes()),
    )
    app.state.service = service
    # The zip codes are read now, when the app is made, not at the first question.
    service.area_info.warm()
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=service.settings.max_body_bytes)
    app.add_middleware(RequestIdMiddleware)
    return app
